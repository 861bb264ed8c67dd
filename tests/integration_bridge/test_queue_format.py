"""The ``laravel`` queue format through Kombu's API and Celery's producer: Laravel jobs
delivered as Celery task messages and tasks stored as Laravel jobs, on every engine and both
layouts. (Real ``celery worker`` processes and PHP: ``e2e_laravel/test_celery_laravel.py``.)"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from queue import Empty
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from bridge_support import failed, insert_raw, laravel_13_jobs_table
from celery import Celery
from kombu import Connection, Consumer, Exchange, Producer, Queue

from kombu_sqlqueue.store import NewJob
from laravel_bridge import JobCommand, LaravelQueue, ModelIdentifier, PhpEnum, PhpObject
from laravel_bridge.job import parse_job
from laravel_bridge.tables import JobTable

QUEUE = "php"


def options(layout: str, **settings: Any) -> dict[str, Any]:
    return {"queue_formats": {QUEUE: {"format": "laravel", "layout": layout, **settings}}}


@pytest.fixture
def conn(db_url: str, layout: str) -> Iterator[Connection]:
    c = Connection(f"sqlqueue+{db_url}", transport_options=options(layout))
    yield c
    c.release()


def get(conn: Connection, queue: str = QUEUE) -> Any:
    """One message of ``queue``, or Empty."""
    return conn.SimpleQueue(queue).get(block=False)


VALUES: dict[str, Any] = {
    "invoiceId": 7,
    "big": 9223372036854775807,
    "amount": 19.99,
    "whole": 2.0,
    "customer": 'Zoë "Ünïcode" \u2028',
    "paid": False,
    "note": None,
    "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B/2", "qty": 1}],
    "sparse": {5: "five", 9: "nine"},
    "at": datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=ZoneInfo("Europe/Paris")),
    "since": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    "user": ModelIdentifier("App\\Models\\User", 42, ("posts",), "mysql"),
    "status": PhpEnum("App\\Enums\\Status", "Paid"),
    "card": PhpObject("App\\Support\\Card", {"last4": "4242"}),
}


def assert_same(got: Any, want: Any, *, zones: bool = True) -> None:
    """Equal and of the same type all the way down; a datetime at the same instant and
    offset, and (``zones``) in the same named zone."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_same(got[k], want[k], zones=zones)
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w, zones=zones)
    elif isinstance(want, datetime):
        assert got == want and got.utcoffset() == want.utcoffset()
        assert got.tzinfo == want.tzinfo or not zones
    else:
        assert got == want


def test_a_laravel_job_is_delivered_as_a_celery_task_message(
    conn: Connection, queue: LaravelQueue
) -> None:
    d = queue.dispatch(
        "App\\Jobs\\SendInvoice",
        VALUES,
        queue=QUEUE,
        tries=3,
        backoff=[1, 5],
        timeout=30,
        max_exceptions=2,
    )
    message = get(conn)
    headers = message.headers
    assert (headers["task"], headers["id"], headers["retries"]) == (
        "App\\Jobs\\SendInvoice",
        d.uuid,
        0,
    )
    assert headers["timelimit"] == [40, 30]  # [hard, soft]: soft = Laravel's timeout
    meta = headers["laravel"]
    assert (meta["tries"], meta["backoff"], meta["maxExceptions"], meta["attempts"]) == (
        3,
        [1, 5],
        2,
        1,
    )
    args, kwargs, embed = message.decode()
    assert args == [] and embed["chain"] is None
    assert_same(kwargs, VALUES)
    message.ack()
    assert queue.size(QUEUE) == 0


def test_a_task_name_mapping_names_the_task(db_url: str, layout: str, queue: LaravelQueue) -> None:
    queue.dispatch("App\\Jobs\\Resize", {"path": "/a.png"}, queue=QUEUE)
    tasks = {"App\\Jobs\\Resize": "images.resize"}
    with Connection(f"sqlqueue+{db_url}", transport_options=options(layout, tasks=tasks)) as c:
        message = get(c)
        assert message.headers["task"] == "images.resize"
        message.ack()


def test_a_failed_job_is_retried_by_its_tries_then_failed_with_the_exception_text(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    d = queue.dispatch("App\\Jobs\\Flaky", {"n": 1}, queue=QUEUE, tries=2, backoff=0)
    for attempt in (1, 2):
        message = get(conn)
        assert message.headers["laravel"]["attempts"] == attempt
        assert message.headers["retries"] == attempt - 1
        assert message.delivery_info["redelivered"] is (attempt > 1)
        # What the Celery signal handler does when the task raises.
        written = conn.transport.fail_delivery(
            QUEUE, message.delivery_tag, message.headers, f"RuntimeException: boom {attempt}"
        )
        assert written
        message.ack()  # Celery's ack after a failure: changes nothing now
    with pytest.raises(Empty):
        get(conn)
    (row,) = failed(table)
    assert row["uuid"] == d.uuid and row["exception"].startswith("RuntimeException: boom 2")
    assert json.loads(row["payload"])["uuid"] == d.uuid


def test_a_release_waits_for_the_backoff_of_its_attempt(
    conn: Connection, queue: LaravelQueue
) -> None:
    queue.dispatch("App\\Jobs\\Flaky", {}, queue=QUEUE, tries=5, backoff=[300, 600])
    message = get(conn)
    assert conn.transport.fail_delivery(QUEUE, message.delivery_tag, message.headers, "boom")
    with pytest.raises(Empty):
        get(conn)  # ready again in 300 s
    assert queue.size(QUEUE) == 1


def test_a_rejected_job_is_a_failed_attempt(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    queue.dispatch("App\\Jobs\\Once", {}, queue=QUEUE)  # no tries: Laravel's --tries=1
    get(conn).reject()
    (row,) = failed(table)
    assert "rejected by its Celery task" in row["exception"]


def test_a_job_past_its_tries_is_failed_before_it_starts(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    job = queue.build("App\\Jobs\\Tried", {}, queue=QUEUE, tries=2)
    store: Any = table.store  # type: ignore[attr-defined]
    if table.layout == "laravel":
        store.push(QUEUE, job.payload, 0, 2)  # two attempts used (a worker died twice)
    else:
        store.enqueue(NewJob(QUEUE, job.payload.encode(), max_attempts=255, attempts=2))
    with pytest.raises(Empty):
        get(conn)
    (row,) = failed(table)
    assert "MaxAttemptsExceededException" in row["exception"]
    assert "App\\Jobs\\Tried has been attempted too many times" in row["exception"]


def test_an_unreadable_row_is_failed_once_and_the_next_job_delivered(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    insert_raw(
        table, QUEUE, b'{"uuid": "bad", "job": "Illuminate\\\\Queue\\\\CallQueuedHandler@call"}'
    )
    insert_raw(table, QUEUE, b"not json at all")
    queue.dispatch("App\\Jobs\\Good", {"ok": True}, queue=QUEUE)
    for _ in range(2):  # a get that settles a bad row delivers nothing
        with pytest.raises(Empty):
            get(conn)
    message = get(conn)
    assert message.headers["task"] == "App\\Jobs\\Good"
    message.ack()
    reasons = [r["exception"] for r in failed(table)]
    assert len(reasons) == 2 and all("malformed stored message" in r for r in reasons)


def celery_app(db_url: str, layout: str) -> Celery:
    app = Celery("laravel-format-test", broker=f"sqlqueue+{db_url}")
    app.conf.broker_transport_options = options(layout)
    return app


def pop_job(table: JobTable) -> Any:
    reserved = table.pop(QUEUE, 90)
    assert reserved is not None
    return parse_job(reserved)


def test_send_task_writes_the_job_laravel_would_dispatch(
    db_url: str, layout: str, table: JobTable
) -> None:
    app = celery_app(db_url, layout)
    kwargs = {k: VALUES[k] for k in ("invoiceId", "amount", "customer", "lines", "at", "user")}
    result = app.send_task("App\\Jobs\\SendInvoice", kwargs=kwargs, queue=QUEUE)
    job = pop_job(table)
    assert (job.name, job.uuid, job.queue, job.attempts) == (
        "App\\Jobs\\SendInvoice",
        result.id,
        QUEUE,
        1,
    )
    # Kombu's JSON writes a datetime with its offset, not its zone's name.
    assert_same(job.properties, kwargs, zones=False)
    assert job.payload.data["displayName"] == "App\\Jobs\\SendInvoice"
    # Laravel's own options come in a header of that name.
    app.send_task(
        "App\\Jobs\\Ping",
        kwargs={"label": "x"},
        queue=QUEUE,
        headers={"laravel": {"tries": 4, "backoff": [2, 4], "timeout": 9}},
    )
    ping = pop_job(table)
    assert (ping.payload.max_tries, ping.payload.backoff, ping.payload.timeout) == (4, [2, 4], 9)
    app.close()


def test_a_countdown_becomes_available_at(db_url: str, layout: str, table: JobTable) -> None:
    app = celery_app(db_url, layout)
    app.send_task("App\\Jobs\\Later", kwargs={}, queue=QUEUE, countdown=120)
    assert table.pop(QUEUE, 90) is None and table.size(QUEUE) == 1
    app.close()


def test_positional_arguments_are_refused_and_nothing_stored(
    db_url: str, layout: str, table: JobTable
) -> None:
    app = celery_app(db_url, layout)
    with pytest.raises(Exception, match="keyword arguments"):
        app.send_task("App\\Jobs\\Ping", args=["x"], queue=QUEUE)
    assert table.size(QUEUE) == 0
    app.close()


def test_a_celery_retry_writes_the_jobs_own_payload_back(
    db_url: str, layout: str, conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    d = queue.dispatch("App\\Jobs\\Flaky", {"n": 1}, queue=QUEUE, tries=3)
    original = queue.table.pop(QUEUE, 0)  # read it as stored, then hand it back
    assert original is not None and queue.table.release(original, 0, refund=True)
    message = get(conn)
    args, kwargs, _embed = message.decode()
    app = celery_app(db_url, layout)
    # What Task.retry() sends: the request's kwargs and custom headers, retries + 1.
    app.send_task(
        message.headers["task"],
        args=args,
        kwargs=kwargs,
        task_id=d.uuid,
        queue=QUEUE,
        retries=1,
        headers={"laravel": message.headers["laravel"]},
    )
    message.ack()
    again = table.pop(QUEUE, 90)
    assert again is not None
    assert again.payload == original.payload and again.attempts == 2  # one used before
    # A retry with changed kwargs keeps them.
    assert queue.table.release(again, 0, refund=True)
    message = get(conn)
    app.send_task(
        message.headers["task"],
        kwargs={"n": 2},
        task_id=d.uuid,
        queue=QUEUE,
        retries=2,
        headers={"laravel": message.headers["laravel"]},
    )
    message.ack()
    assert pop_job(table).properties == {"n": 2}
    app.close()


def test_the_celery_format_counts_attempts_to_what_laravel_13s_column_holds(
    db_url: str, engine_name: str
) -> None:
    """On Laravel 13's SMALLINT ``attempts`` a Celery task with ``tries: 0`` failing its
    301st attempt is released (as PHP's worker does), a retry sent at 300 is stored at
    300, and only a job at the column's limit is failed, at the safety cap."""
    laravel_13_jobs_table(db_url, engine_name)
    queue = LaravelQueue(db_url, "laravel")
    table = queue.table
    store: Any = table.store  # type: ignore[attr-defined]
    store.ensure_ready()
    limit = store.attempts_limit
    assert limit > 300  # 65535 on MariaDB; PostgreSQL's and SQLite's SMALLINT: 32767
    c = Connection(f"sqlqueue+{db_url}", transport_options=options("laravel"))
    try:
        unlimited = queue.build("App\\Jobs\\Flaky", {}, queue=QUEUE, tries=0)
        store.push(QUEUE, unlimited.payload, 0, 300)
        message = get(c)
        assert message.headers["laravel"]["attemptsCap"] == limit
        assert c.transport.fail_delivery(QUEUE, message.delivery_tag, message.headers, "boom")
        assert failed(table) == []
        released = table.pop(QUEUE, 90)
        assert released is not None and released.attempts == 302  # 301 used, this pop's
        assert table.delete(released)

        app = celery_app(db_url, "laravel")
        app.send_task("App\\Jobs\\Again", kwargs={}, queue=QUEUE, retries=300)
        app.close()
        again = table.pop(QUEUE, 90)
        assert again is not None and again.attempts == 301  # stored at 300, not 255
        assert table.delete(again)

        store.push(QUEUE, unlimited.payload, 0, limit - 1)
        message = get(c)
        assert message.headers["laravel"]["attempts"] == limit
        assert c.transport.fail_delivery(QUEUE, message.delivery_tag, message.headers, "boom")
        (row,) = failed(table)
        assert f"Flaky reached the safety cap of {limit} attempts" in row["exception"]
    finally:
        c.release()
        queue.close()


def test_ordinary_queues_in_the_same_database_keep_kombus_envelope(
    conn: Connection, table: JobTable
) -> None:
    exchange = Exchange("plain", "direct")
    plain = Queue("plain", exchange, "plain")
    got: list[Any] = []
    with conn.channel() as channel:
        Producer(channel).publish(
            {"hello": 1}, exchange=exchange, routing_key="plain", declare=[plain]
        )
        with Consumer(channel, [plain], callbacks=[lambda body, m: (got.append(body), m.ack())]):
            conn.drain_events(timeout=5)
    assert got == [{"hello": 1}] and table.size(QUEUE) == 0


def test_the_ack_of_a_chained_job_stores_the_next_job_in_its_transaction(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    queue.dispatch(
        "App\\Jobs\\ChainStep",
        {"step": "first"},
        queue=QUEUE,
        # The next job's own queue (Laravel's default, "default", when it names none).
        chain=[JobCommand.build("App\\Jobs\\ChainStep", {"step": "second"}, queue=QUEUE)],
    )
    message = get(conn)
    assert message.decode()[1] == {"step": "first"}
    message.ack()
    nxt = get(conn)
    assert nxt.decode()[1] == {"step": "second"} and nxt.headers["laravel"]["then"] is None
    nxt.ack()
    assert table.size(QUEUE) == 0


def test_a_chained_job_that_fails_stores_no_next_job(
    conn: Connection, queue: LaravelQueue, table: JobTable
) -> None:
    queue.dispatch(
        "App\\Jobs\\ChainStep",
        {"step": "first"},
        queue=QUEUE,
        chain=[("App\\Jobs\\ChainStep", {"step": "second"})],
    )
    message = get(conn)
    assert conn.transport.fail_delivery(QUEUE, message.delivery_tag, message.headers, "boom")
    message.ack()  # Celery's ack after the failure: stale, so no next job either
    assert table.size(QUEUE) == 0 and len(failed(table)) == 1


def test_what_a_celery_worker_does_not_keep_for_laravel_is_said_once(
    db_url: str, layout: str, queue: LaravelQueue, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(2):
        queue.dispatch("App\\Jobs\\Step", {"n": n, "batchId": "batch-1"}, queue=QUEUE)
        queue.dispatch("App\\Jobs\\Report", {"n": n, "uniqueFor": 60}, queue=QUEUE)
    unrecorded = options(layout, batches_table=None)
    with (
        Connection(f"sqlqueue+{db_url}", transport_options=unrecorded) as c,
        caplog.at_level(logging.WARNING, logger="laravel_bridge.messages"),
    ):
        for _ in range(4):
            get(c).ack()
    said = [r.getMessage() for r in caplog.records]
    assert sum("belongs to batch batch-1, which is not recorded" in m for m in said) == 1
    assert sum("App\\Jobs\\Report looks unique" in m for m in said) == 1
