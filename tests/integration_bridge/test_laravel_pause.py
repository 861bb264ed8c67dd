"""``queue:pause`` on Laravel's layout, every engine: ``kombu-sqlqueue pause --layout
laravel`` writes the key Laravel 12.40+'s ``QueueManager::pause`` writes in the database
cache store's table (``queue:work`` then skips the queue); ``laravel-bridge work`` and a
Celery worker on a Laravel queue honour such a key, whoever wrote it; ``resume`` forgets
it; a limit is refused (Laravel's workers could not honour one)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import make_worker
from kombu import Connection
from support import Clock, kombu_sqlqueue_cli

from laravel_bridge import HandlerRegistry, Job, LaravelQueue
from laravel_bridge.laravel_tables import FOREVER_SECONDS, QueuePauses
from laravel_bridge.tables import JobTable, open_table

PREFIX = "laravel_cache"


@pytest.fixture
def table(db_url: str) -> Iterator[JobTable]:
    t = open_table(db_url, "laravel")
    t.store.ensure_ready()  # type: ignore[attr-defined]  # Laravel's migrations, run
    yield t
    t.close()


@pytest.fixture
def pauses(db_url: str, table: JobTable) -> Iterator[QueuePauses]:
    """The app's ``cache`` table, as ``php artisan cache:table`` makes it."""
    p = QueuePauses(db_url, "cache", prefix=PREFIX)
    p.create_schema()
    yield p
    p.close()


def cache_rows(db_url: str) -> list[tuple[str, str, int]]:
    engine = sa.create_engine(db_url.replace("mysql://", "mysql+pymysql://"))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT c.key, c.value, c.expiration FROM cache c"))
            return sorted((str(k), str(v), int(e)) for k, v, e in rows)
    finally:
        engine.dispose()


def cli(*args: str) -> Any:
    return kombu_sqlqueue_cli(*args)


def test_the_operators_pause_is_the_key_laravel_writes(db_url: str, pauses: QueuePauses) -> None:
    lay = ["--layout", "laravel"]
    unnamed = cli("pause", db_url, "emails", *lay)  # which prefix would queue:work read?
    assert unnamed.returncode == 2 and "--cache-prefix" in unnamed.stderr, unnamed.stderr
    assert cache_rows(db_url) == []
    done = cli("pause", db_url, "emails", "--cache-prefix", PREFIX, *lay)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "paused queue 'emails' until resumed"
    ((key, value, expiration),) = cache_rows(db_url)
    assert (key, value) == (f"{PREFIX}illuminate:queue:paused:database:emails", "b:1;")
    assert abs(expiration - (time.time() + FOREVER_SECONDS)) < 60  # Repository::forever

    mine = ["--connection", "redis", "--cache-prefix", "shop_cache_"]
    done = cli("pause", db_url, "reports", "--for", "10m", *mine, *lay)
    assert done.returncode == 0, done.stderr
    found = {k: e for k, _v, e in cache_rows(db_url)}
    assert abs(found["shop_cache_illuminate:queue:paused:redis:reports"] - time.time() - 600) < 60
    assert len(found) == 2  # that prefix alone

    stats = json.loads(cli("stats", db_url, "--json", *lay).stdout)
    (row,) = [r for r in stats if r["queue"] == "emails"]
    assert (row["paused"], row["resume_at"], row["total"]) == (True, None, 0)
    assert "reports" not in {r["queue"] for r in stats}  # another connection's queue
    again = json.loads(cli("stats", db_url, "--json", *mine, *lay).stdout)
    (row,) = [r for r in again if r["queue"] == "reports"]
    assert row["paused"] and abs(row["resume_at"] - time.time() - 600) < 60

    refused = cli("limit", db_url, "emails", "--concurrency", "2", *lay)
    assert refused.returncode == 2 and "WithoutOverlapping" in refused.stderr
    refused = cli("pause", db_url, "emails", "--for", "0", *lay)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr

    assert cli("resume", db_url, "emails", *lay).stdout.strip() == "resumed queue 'emails'"
    assert cli("resume", db_url, "emails", *lay).stdout.strip() == "queue 'emails' was not paused"
    assert [k for k, _v, _e in cache_rows(db_url)] == [
        "shop_cache_illuminate:queue:paused:redis:reports"
    ]


def test_a_pause_under_any_default_prefix_is_read(db_url: str, pauses: QueuePauses) -> None:
    """An app named Laravel keys its cache by the skeleton it came from (8: laravel_cache,
    9-12.0: laravel_cache_, 12.1+/13: laravel-cache-): the default reads each."""
    for n, prefix in enumerate(("laravel_cache", "laravel_cache_", "laravel-cache-")):
        one = QueuePauses(db_url, "cache", prefix=prefix)
        one.pause("database", f"q{n}")
        one.close()
    assert pauses.paused("database", ["q0", "q1", "q2", "q3"]) == {"q0", "q1", "q2"}
    other = QueuePauses(db_url, "cache", prefix="shop_cache_")
    assert other.paused("database", ["q0", "q1", "q2"]) == set()
    other.close()


def test_laravel_bridge_work_skips_a_paused_queue_until_it_is_resumed(
    db_url: str, table: JobTable, pauses: QueuePauses
) -> None:
    queue = LaravelQueue(db_url, "laravel", table=table)
    ran: list[str] = []
    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Mail", lambda job: ran.append(f"mail:{job.properties['n']}"))
    registry.register("App\\Jobs\\Sync", lambda job: ran.append(f"sync:{job.properties['n']}"))
    for n in range(2):
        queue.dispatch("App\\Jobs\\Mail", {"n": n}, queue="emails")
        queue.dispatch("App\\Jobs\\Sync", {"n": n})
    pauses.pause("database", "emails")  # as queue:pause database:emails writes it
    make_worker(table, registry, Clock(), queues=["emails", "default"]).run()
    assert ran == ["sync:0", "sync:1"]
    assert table.store.size("emails") == 2  # type: ignore[attr-defined]

    pauses.pause("database", "emails", 1)  # pauseFor: over in a second
    time.sleep(2.1)
    make_worker(table, registry, Clock(), queues=["emails", "default"]).run()
    assert ran[2:] == ["mail:0", "mail:1"]


def test_a_worker_of_another_connection_or_without_the_cache_table_works_on(
    db_url: str, table: JobTable, caplog: pytest.LogCaptureFixture
) -> None:
    queue = LaravelQueue(db_url, "laravel", table=table)
    ran: list[int] = []
    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Mail", lambda job: ran.append(job.properties["n"]))
    queue.dispatch("App\\Jobs\\Mail", {"n": 1}, queue="emails")
    with caplog.at_level(logging.INFO, "laravel_bridge.pauses"):
        make_worker(table, registry, Clock(), queues=["emails"]).run()  # no cache table
    assert ran == [1]
    assert "queue:pause is not read" in caplog.text

    pauses = QueuePauses(db_url, "cache", prefix=PREFIX)
    pauses.create_schema()
    pauses.pause("redis", "emails")  # another connection's queue of that name
    queue.dispatch("App\\Jobs\\Mail", {"n": 2}, queue="emails")
    make_worker(table, registry, Clock(), queues=["emails"]).run()
    assert ran == [1, 2]
    pauses.close()


def test_a_celery_worker_claims_nothing_of_a_paused_laravel_queue(
    db_url: str, table: JobTable, pauses: QueuePauses
) -> None:
    queue = LaravelQueue(db_url, "laravel", table=table)
    queue.dispatch("App\\Jobs\\Mail", {"n": 1}, queue="php")
    settings = {"format": "laravel", "claim": "all"}
    conn = Connection(f"sqlqueue+{db_url}", transport_options={"queue_formats": {"php": settings}})
    try:
        pauses.pause("database", "php")
        simple = conn.SimpleQueue("php")
        with pytest.raises(simple.Empty):
            simple.get(block=True, timeout=1.5)
        assert pauses.resume("database", "php")
        time.sleep(1.1)  # what the consumer last read of the pauses lasts a second
        message = simple.get(block=True, timeout=10)
        assert message.headers["task"] == "App\\Jobs\\Mail"
        message.ack()
    finally:
        conn.release()


def test_a_job_of_a_paused_queue_is_not_run_by_a_handler(
    db_url: str, table: JobTable, pauses: QueuePauses
) -> None:
    """The prefetch path (the next job reserved with the last one's delete) skips a queue
    paused while the worker runs."""
    queue = LaravelQueue(db_url, "laravel", table=table)
    ran: list[int] = []
    registry = HandlerRegistry()

    def handle(job: Job) -> None:
        ran.append(job.properties["n"])
        if job.properties["n"] == 0:
            pauses.pause("database", "default")

    registry.register("App\\Jobs\\Mail", handle)
    for n in range(3):
        queue.dispatch("App\\Jobs\\Mail", {"n": n})
    worker = make_worker(table, registry, Clock(), queues=["default"])
    ticks = iter(range(0, 1000, 2))  # each read of the pauses two seconds after the last
    worker.pauses._clock = lambda: float(next(ticks))
    worker.run()
    assert ran == [0]
    assert table.store.size("default") == 2  # type: ignore[attr-defined]


def test_laravel_13s_pause_of_every_queue_pauses_ours_too(
    db_url: str, table: JobTable, pauses: QueuePauses
) -> None:
    """``queue:pause --all`` (Laravel 13.25+, ``pauseAll``) writes one key for every queue."""
    engine = sa.create_engine(db_url.replace("mysql://", "mysql+pymysql://"))
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.insert(pauses.table).values(
                    key=f"{PREFIX}illuminate:queues:paused",
                    value="b:1;",
                    expiration=int(time.time()) + FOREVER_SECONDS,
                )
            )
    finally:
        engine.dispose()
    assert pauses.paused("database", ["a", "b"]) == {"a", "b"}
    assert pauses.paused("redis", ["c"]) == {"c"}
