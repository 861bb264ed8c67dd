"""Edges of the worker and dispatch found in review: none may crash the worker or lose a job."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import (
    bridge_cli,
    failed,
    handlers_module_env,
    laravel_13_jobs_table,
    make_worker,
    raw_engine,
)
from laravel_support import sql_engine
from support import T0, Clock

from laravel_bridge import (
    HandlerRegistry,
    Job,
    JobCommand,
    LaravelBridgeError,
    LaravelQueue,
    Payload,
    PayloadError,
    PhpObject,
)
from laravel_bridge.tables import PushJob


def chained_payload(next_props: dict[str, Any]) -> str:
    nxt = JobCommand.build("App\\Jobs\\B", {"n": 2})
    nxt.obj.properties.update(next_props)
    first = JobCommand.build("App\\Jobs\\A", {"n": 1}, chained=[nxt])
    return Payload.build(first, max_tries=1).to_json()


def test_chain_next_job_with_laravels_own_carbon_delay(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    ran: list[str] = []
    registry.register("App\\Jobs\\A", lambda j: ran.append("A"))
    registry.register("App\\Jobs\\B", lambda j: ran.append("B"))
    when = PhpObject(  # what now()->addSeconds(30) serializes to
        "Illuminate\\Support\\Carbon",
        {"date": "2027-01-15 08:00:30.000000", "timezone_type": 3, "timezone": "UTC"},
    )
    queue.table.push(PushJob("default", chained_payload({"delay": when})))
    worker = make_worker(queue.table, registry, clock)
    worker.clock = lambda: T0  # 2027-01-15 08:00:00 UTC
    worker.run()
    assert ran == ["A"]
    clock.now = T0 + 31  # the delayed next job is due (the store's clock decides)
    worker.run()
    assert ran == ["A", "B"]


def test_chain_next_job_with_an_unreadable_delay_fails_the_job_not_the_worker(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    registry.register("App\\Jobs\\A", lambda j: None)
    interval = PhpObject("Carbon\\CarbonInterval", {"s": 30})
    queue.table.push(PushJob("default", chained_payload({"delay": interval})))
    make_worker(queue.table, registry, clock).run()
    (row,) = failed(queue.table)
    assert "Carbon\\CarbonInterval" in row["exception"]


def test_a_row_at_its_columns_limit_of_attempts_does_not_block_the_queue(
    db_url: str, registry: HandlerRegistry
) -> None:
    """A row Laravel left at the most its attempts column holds (255 in MySQL's TINYINT,
    32767 in PostgreSQL's SMALLINT, 2^31-1 on SQLite) with ``tries: 0`` is failed at the
    safety cap when it fails again, never released where its attempt cannot be counted."""
    queue = LaravelQueue(db_url, "laravel")
    store = queue.table.store  # type: ignore[attr-defined]
    store.ensure_ready()
    limit = store.attempts_limit
    payload = Payload.build(JobCommand.build("App\\Jobs\\X", {}), max_tries=0).to_json()
    store.push("default", payload, attempts=limit)
    queue.dispatch("App\\Jobs\\Y", {})

    def boom(job: Job) -> None:
        raise RuntimeError("still broken")

    ran: list[str] = []
    registry.register("App\\Jobs\\X", boom)
    registry.register("App\\Jobs\\Y", lambda j: ran.append("Y"))
    worker = make_worker(queue.table, registry, Clock())
    worker.run()
    assert ran == ["Y"]
    (row,) = failed(queue.table)
    assert f"X reached the safety cap of {limit} attempts" in row["exception"]
    queue.close()


def test_laravel_13s_job_past_255_attempts_is_released_by_the_cli_worker(
    db_url: str, engine_name: str, tmp_path: Path
) -> None:
    """``laravel-bridge work``'s default cap is the column's: on Laravel 13's SMALLINT a job
    with ``tries: 0`` failing its 301st attempt is released, as PHP's worker releases it."""
    laravel_13_jobs_table(db_url, engine_name)
    queue = LaravelQueue(db_url, "laravel")
    store = queue.table.store  # type: ignore[attr-defined]
    command = JobCommand.build("App\\Jobs\\Flaky", {})
    store.push("default", Payload.build(command, max_tries=0, backoff=[600]).to_json(), 0, 300)
    env = handlers_module_env(tmp_path, "cap_handlers", CAP_HANDLERS)
    done = subprocess.run(
        bridge_cli("work", "--url", db_url, "--handlers", "cap_handlers", "--stop-when-empty"),
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Failed:" not in done.stdout and "safety cap" not in done.stderr, done.stderr
    assert "App\\Jobs\\Flaky (job 1, attempt 301) raised: still broken" in done.stderr
    assert failed(queue.table) == []
    engine = raw_engine(queue.table)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT attempts FROM jobs")).scalars().all() == [301]
    engine.dispose()
    queue.close()


CAP_HANDLERS = """
from laravel_bridge import handles

@handles("App\\\\Jobs\\\\Flaky")
def flaky(job):
    raise RuntimeError("still broken")
"""


@pytest.mark.parametrize(
    "payload",
    [
        '{"uuid": "u-1", "job": "@handle", "data": {}}',
        '{"uuid": "u-2", "job": "Illuminate\\\\Queue\\\\CallQueuedHandler@call",'
        ' "data": {"commandName": "X", "command": "O:1:\\"X\\":0:{}\\ud800"}}',
        json.dumps({"uuid": "u" * 300, "job": "X@handle", "data": {}}),
    ],
)
def test_more_malformed_payloads_are_failed_not_fatal(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, payload: str
) -> None:
    registry.register("X", lambda j: None)
    queue.table.push(PushJob("default", payload))
    make_worker(queue.table, registry, clock).run()
    (row,) = failed(queue.table)
    assert "MalformedJob" in row["exception"]


def test_two_failures_with_one_uuid_keep_one_failed_row(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    registry.register("App\\Jobs\\X", lambda j: j.fail("no"))
    queue.dispatch("App\\Jobs\\X", {"n": 1}, uuid="same-uuid")
    queue.dispatch("App\\Jobs\\X", {"n": 2}, uuid="same-uuid")
    make_worker(queue.table, registry, clock).run()
    rows = failed(queue.table)
    assert queue.size("default") == 0
    if queue.table.layout == "laravel":
        (row,) = rows  # failed_jobs.uuid is unique: the latest failure is kept
        assert json.loads(row["payload"])["uuid"] == "same-uuid"
    else:
        assert len(rows) == 2
    with pytest.raises(LaravelBridgeError, match="uuid per job"):
        queue.dispatch_many([("App\\Jobs\\X", {})], uuid="same-uuid")


def test_a_job_reserved_ahead_is_handed_back_when_run_ends_on_an_error(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    registry.register("App\\Jobs\\X", lambda j: None)
    queue.dispatch_many([("App\\Jobs\\X", {"n": i}) for i in range(2)])
    worker = make_worker(queue.table, registry, clock, stop_when_empty=False)

    def broken_pipe(line: str) -> None:
        if "Processed" in line:
            raise BrokenPipeError("stdout is gone")

    worker.output = broken_pipe
    with pytest.raises(BrokenPipeError):
        worker.run()
    again = queue.table.pop("default", 90)
    assert again is not None and again.attempts == 1  # handed back, its attempt refunded


def test_settlement_made_by_the_handler_stands_when_it_then_raises(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    def delete_then_raise(job: Job) -> None:
        job.delete()
        raise RuntimeError("after the delete")

    registry.register("App\\Jobs\\X", delete_then_raise)
    queue.dispatch("App\\Jobs\\X", {}, tries=3)
    make_worker(queue.table, registry, clock).run()
    assert queue.size("default") == 0
    assert failed(queue.table) == []


def test_dispatch_reads_delays_and_times_as_laravel_does(queue: LaravelQueue) -> None:
    job = queue.build("App\\Jobs\\X", {}, retry_until=T0 + 0.75, delay=timedelta(seconds=90))
    assert json.loads(job.payload)["retryUntil"] == int(T0)
    assert job.delay == 90
    job = queue.build("App\\Jobs\\X", {}, retry_until=datetime.fromtimestamp(T0, UTC))
    assert json.loads(job.payload)["retryUntil"] == int(T0)
    with pytest.raises(PayloadError, match="unix time"):
        queue.build("App\\Jobs\\X", {}, retry_until="tomorrow")
    with pytest.raises(LaravelBridgeError, match="delay must be seconds"):
        queue.build("App\\Jobs\\X", {}, delay="soon")
    with pytest.raises(PayloadError, match="not UTF-8"):
        queue.build("App\\Jobs\\X", {"blob": b"\xff\xfe"})


def test_a_unique_lock_on_another_cache_connection_is_released_there(
    db_url: str, registry: HandlerRegistry, tmp_path: Path
) -> None:
    """``cache.stores.database.connection`` names another database: --unique-locks-url."""
    from laravel_bridge.laravel_tables import CacheLocks

    cache_url = f"sqlite:///{tmp_path / 'cache.db'}"
    locks = CacheLocks(cache_url)
    locks.create_schema()
    key = "laravel_cachelaravel_unique_job:App\\Jobs\\Export2024-05"
    engine = sql_engine(cache_url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO cache_locks VALUES (:k, 'owner', 0)"), {"k": key})
    engine.dispose()
    queue = LaravelQueue(db_url, "laravel")
    queue.dispatch("App\\Jobs\\Export", {"uniqueId": "2024-05", "uniqueFor": 3600})
    registry.register("App\\Jobs\\Export", lambda job: None)
    make_worker(
        queue.table, registry, Clock(), unique_locks="cache_locks", unique_locks_url=cache_url
    ).run()
    assert locks.force_release(key) is False  # the worker released it already
    locks.close()
    queue.close()
