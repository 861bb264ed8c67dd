"""The Python worker's Laravel rules, on every engine and both table layouts."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from bridge_support import failed, make_worker
from support import T0, Clock

from laravel_bridge import (
    HandlerRegistry,
    Job,
    LaravelQueue,
    Payload,
)
from laravel_bridge.tables import JobTable, PushJob


def test_handler_gets_properties_and_job_facts(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    seen: list[Job] = []
    registry.register("App\\Jobs\\ResizeImage", seen.append)
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    d = queue.dispatch(
        "App\\Jobs\\ResizeImage",
        {"path": "/a.png", "width": 640, "ratio": 0.1, "tags": ["x", "ü"], "when": when},
        queue="images",
    )
    make_worker(queue.table, registry, clock, queues=["images"]).run()
    (job,) = seen
    assert job.properties == {
        "path": "/a.png",
        "width": 640,
        "ratio": 0.1,
        "tags": ["x", "ü"],
        "when": when,
    }
    assert (job.uuid, job.queue, job.attempts, job.name) == (d.uuid, "images", 1, job.name)
    assert job.name == "App\\Jobs\\ResizeImage"
    assert isinstance(job.payload, Payload) and job.payload.uuid == d.uuid
    assert job.command is not None and job.command.class_name == "App\\Jobs\\ResizeImage"
    assert queue.size("images") == 0


def test_queues_are_checked_in_the_order_given(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    order: list[str] = []
    registry.register("App\\Jobs\\X", lambda j: order.append(j.queue))
    for q in ("low", "default", "high", "low", "high"):
        queue.dispatch("App\\Jobs\\X", {}, queue=q)
    make_worker(queue.table, registry, clock, queues=["high", "default", "low"]).run()
    assert order == ["high", "high", "default", "low", "low"]


def test_failure_after_tries_lands_in_the_failed_table(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    attempts: list[int] = []

    def boom(job: Job) -> None:
        attempts.append(job.attempts)
        raise RuntimeError("card declined")

    registry.register("App\\Jobs\\Charge", boom)
    d = queue.dispatch("App\\Jobs\\Charge", {"id": 1}, tries=3, queue="pay")
    make_worker(queue.table, registry, clock, queues=["pay"]).run()
    assert attempts == [1, 2, 3]
    (row,) = failed(queue.table)
    assert row["uuid"] == d.uuid and row["queue"] == "pay"
    assert row["exception"].startswith("RuntimeError: card declined")
    assert json.loads(row["payload"])["uuid"] == d.uuid
    if queue.table.layout == "laravel":
        assert row["connection"] == "database"


def test_worker_tries_apply_when_the_payload_has_none(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    attempts: list[int] = []

    def boom(job: Job) -> None:
        attempts.append(job.attempts)
        raise ValueError("no")

    registry.register("App\\Jobs\\X", boom)
    queue.dispatch("App\\Jobs\\X", {})
    make_worker(queue.table, registry, clock, tries=2).run()
    assert attempts == [1, 2]
    assert len(failed(queue.table)) == 1


def test_backoff_list_is_indexed_by_attempt(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    runs: list[float] = []

    def boom(job: Job) -> None:
        runs.append(clock.now - T0)
        raise RuntimeError("again")

    registry.register("App\\Jobs\\X", boom)
    queue.dispatch("App\\Jobs\\X", {}, tries=4, backoff=[5, 20])
    worker = make_worker(queue.table, registry, clock)
    for advance in (0, 4, 1, 19, 1, 19, 1):  # due at +5, then +25, then +45 (last entry again)
        clock.now += advance
        worker.process_next()
    assert runs == [0, 5, 25, 45]
    assert len(failed(queue.table)) == 1


def test_retry_until_overrides_tries(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    runs: list[int] = []

    def boom(job: Job) -> None:
        runs.append(job.attempts)
        raise RuntimeError("later")

    registry.register("App\\Jobs\\X", boom)
    queue.dispatch("App\\Jobs\\X", {}, tries=1, retry_until=int(T0) + 100)
    worker = make_worker(queue.table, registry, clock)
    for _ in range(5):  # tries=1 would fail at once; retryUntil keeps it going
        worker.process_next()
    assert runs == [1, 2, 3, 4, 5]
    assert failed(queue.table) == []
    clock.now = T0 + 101
    worker.process_next()  # past retryUntil: failed before it runs
    assert runs == [1, 2, 3, 4, 5]
    (row,) = failed(queue.table)
    assert "attempted too many times or run too long" in row["exception"]


def test_max_exceptions_counts_across_workers(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    runs: list[int] = []

    def boom(job: Job) -> None:
        runs.append(job.attempts)
        raise RuntimeError("flaky")

    registry.register("App\\Jobs\\X", boom)
    queue.dispatch("App\\Jobs\\X", {}, tries=10, max_exceptions=3)
    first = make_worker(queue.table, registry, clock)
    second = make_worker(queue.table, registry, clock)
    first.process_next()
    second.process_next()
    assert failed(queue.table) == []
    first.process_next()
    assert runs == [1, 2, 3]
    assert len(failed(queue.table)) == 1


def test_timeout_stops_the_job_not_the_worker(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    done: list[str] = []

    def slow(job: Job) -> None:
        time.sleep(30)

    registry.register("App\\Jobs\\Slow", slow)
    registry.register("App\\Jobs\\Fast", lambda j: done.append("fast"))
    queue.dispatch("App\\Jobs\\Slow", {}, timeout=1, tries=3, queue="a")
    queue.dispatch("App\\Jobs\\Slow", {}, timeout=1, tries=3, fail_on_timeout=True, queue="b")
    queue.dispatch("App\\Jobs\\Fast", {}, queue="c")
    worker = make_worker(queue.table, registry, clock, queues=["a", "b", "c"])
    worker.process_next()  # a: timed out, released for another try
    assert queue.size("a") == 1 and failed(queue.table) == []
    clock.now += 1
    worker.process_next()  # a again (released with no backoff comes first)
    worker.process_next()
    worker.process_next()  # b: failOnTimeout
    rows = failed(queue.table)
    assert [r["queue"] for r in rows] == ["a", "b"]
    assert all("JobTimedOut" in r["exception"] for r in rows)
    worker.process_next()
    assert done == ["fast"]


def test_unknown_job_is_released_with_its_attempt_refunded(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, db_url: str, layout: str
) -> None:
    queue.dispatch("App\\Jobs\\PhpOnly", {"x": 1})
    worker = make_worker(queue.table, registry, clock, unknown_delay=30, claim="all")
    worker.process_next()
    assert queue.size("default") == 1
    assert queue.table.pop("default", 90) is None  # released for 30 s
    clock.now += 30
    again = queue.table.pop("default", 90)
    assert again is not None and again.attempts == 1  # the Python pass did not count


def test_a_worker_claims_only_the_classes_it_has_handlers_for(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, layout: str
) -> None:
    """The default (claim="handled"): a job of a class with no handler here is never reserved
    on Laravel's table — it waits, untouched (attempts 0), for a PHP worker; contract v1's
    layout has no such filter and hands it back (released, attempt refunded)."""
    first = queue.dispatch("App\\Jobs\\PhpOnly", {})
    ours = queue.dispatch("App\\Jobs\\SendInvoice", {"invoiceId": 1})
    ran: list[str] = []
    registry.register("App\\Jobs\\SendInvoice", lambda job: ran.append(job.uuid))
    make_worker(queue.table, registry, clock).run()
    assert ran == [ours.uuid] and queue.size("default") == 1 and failed(queue.table) == []
    if layout == "laravel":
        left = queue.table.pop("default", 90)  # no class filter: what a PHP worker sees
        assert left is not None and left.attempts == 1 and left.id == first.id


def test_unknown_job_fails_when_the_policy_says_so(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    d = queue.dispatch("App\\Jobs\\PhpOnly", {})
    make_worker(queue.table, registry, clock, unknown_jobs="fail", claim="all").run()
    (row,) = failed(queue.table)
    assert row["uuid"] == d.uuid
    assert "no handler is registered for App\\Jobs\\PhpOnly" in row["exception"]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{not json", "payload is not JSON"),
        ('["a list"]', "not an object"),
        ('{"uuid": "u-1", "data": {}}', "no 'job'"),
        ('{"job": "Illuminate\\\\Queue\\\\CallQueuedHandler@call", "data": {}}', "no 'uuid'"),
        (
            '{"uuid": "u-2", "job": "Illuminate\\\\Queue\\\\CallQueuedHandler@call",'
            ' "data": {"commandName": "X", "command": "O:1:\\"X\\":1:{"}}',
            "cannot decode data.command",
        ),
        (
            '{"uuid": "u-3", "job": "Illuminate\\\\Queue\\\\CallQueuedHandler@call",'
            ' "data": {"commandName": "X", "command": "eyJpdiI6IngifQ=="}}',
            "cannot decode data.command",
        ),
        ('{"uuid": "u-4", "job": "X@handle", "maxTries": "3", "data": {}}', "maxTries"),
    ],
)
def test_malformed_payload_goes_to_the_failed_table_with_the_reason(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, payload: str, reason: str
) -> None:
    registry.register("X", lambda j: None)
    queue.table.push(PushJob("default", payload))
    make_worker(queue.table, registry, clock).run()
    (row,) = failed(queue.table)
    assert reason in row["exception"]
    assert row["payload"] == payload  # verbatim
    if queue.table.layout == "laravel":
        assert row["uuid"]  # failed_jobs.uuid is required: made up when the payload has none
    assert queue.size("default") == 0


def test_handler_may_release_or_fail_its_job(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    calls: list[int] = []

    def later(job: Job) -> None:
        calls.append(job.attempts)
        if job.attempts == 1:
            job.release(10)

    registry.register("App\\Jobs\\Later", later)
    registry.register("App\\Jobs\\Give", lambda j: j.fail("not today"))
    queue.dispatch("App\\Jobs\\Later", {}, tries=5)
    queue.dispatch("App\\Jobs\\Give", {}, tries=5)
    worker = make_worker(queue.table, registry, clock)
    worker.run()
    assert calls == [1]
    clock.now += 10
    worker.run()
    assert calls == [1, 2]
    (row,) = failed(queue.table)
    assert "not today" in row["exception"]


def test_chain_dispatches_the_next_job_after_success(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    ran: list[tuple[str, dict[str, Any], str]] = []
    for name in ("A", "B", "C"):
        registry.register(
            f"App\\Jobs\\{name}", lambda j: ran.append((j.name, j.properties, j.queue))
        )
    queue.dispatch(
        "App\\Jobs\\A", {"n": 1}, chain=[("App\\Jobs\\B", {"n": 2}), ("App\\Jobs\\C", {"n": 3})]
    )
    make_worker(queue.table, registry, clock).run()
    assert ran == [
        ("App\\Jobs\\A", {"n": 1}, "default"),
        ("App\\Jobs\\B", {"n": 2}, "default"),
        ("App\\Jobs\\C", {"n": 3}, "default"),
    ]


def test_encrypted_job_is_decrypted_with_the_app_key(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    seen: list[dict[str, Any]] = []
    registry.register("App\\Jobs\\Secret", lambda j: seen.append(j.properties))
    queue.dispatch("App\\Jobs\\Secret", {"token": "s3cr3t"}, encrypt=True)
    make_worker(queue.table, registry, clock).run()
    assert seen == [{"token": "s3cr3t"}]


def test_safety_cap_bounds_a_job_released_forever(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []

    def boom(job: Job) -> None:
        runs.append(job.attempts)
        raise RuntimeError("forever")

    registry.register("App\\Jobs\\X", boom)
    queue.dispatch("App\\Jobs\\X", {}, tries=0)  # unlimited, no backoff: a hot loop in Laravel
    with caplog.at_level(logging.WARNING, logger="laravel_bridge.worker"):
        make_worker(queue.table, registry, clock, attempts_cap=6).run()
    assert runs == [1, 2, 3, 4, 5, 6]
    (row,) = failed(queue.table)
    assert "safety cap of 6 attempts" in row["exception"]
    no_backoff = [r for r in caplog.records if "no backoff" in r.getMessage()]
    assert len(no_backoff) == 3  # attempts 3..5 released with zero delay; the 6th failed


def test_once_processes_one_job(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    ran: list[int] = []
    registry.register("App\\Jobs\\X", lambda j: ran.append(1))
    queue.dispatch_many([("App\\Jobs\\X", {}), ("App\\Jobs\\X", {})])
    make_worker(queue.table, registry, clock, once=True, stop_when_empty=False).run()
    assert ran == [1]
    assert queue.size("default") == 1


def test_console_lines_match_queue_work(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    registry.register("App\\Jobs\\Ok", lambda j: None)
    registry.register("App\\Jobs\\Bad", lambda j: j.fail("x"))
    a = queue.dispatch("App\\Jobs\\Ok", {})
    b = queue.dispatch("App\\Jobs\\Bad", {})
    lines: list[str] = []
    w = make_worker(queue.table, registry, clock)
    w.output = lines.append
    w.run()
    stamp = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]"
    expected = [
        rf"{stamp}\[{a.id}\] Processing: App\\Jobs\\Ok",
        rf"{stamp}\[{a.id}\] Processed:  App\\Jobs\\Ok",
        rf"{stamp}\[{b.id}\] Processing: App\\Jobs\\Bad",
        rf"{stamp}\[{b.id}\] Failed:     App\\Jobs\\Bad",
    ]
    assert len(lines) == 4
    for line, pattern in zip(lines, expected, strict=True):
        assert __import__("re").fullmatch(pattern, line), line


def test_command_with_an_unreadable_date_is_malformed(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    from laravel_bridge import PhpObject, dumps

    bad_date = PhpObject(
        "Carbon\\Carbon", {"date": "yesterday", "timezone_type": 3, "timezone": "UTC"}
    )
    command = dumps(PhpObject("App\\Jobs\\X", {"when": bad_date})).decode()
    payload = json.dumps(
        {
            "uuid": "u-date",
            "job": "Illuminate\\Queue\\CallQueuedHandler@call",
            "data": {"commandName": "App\\Jobs\\X", "command": command},
        }
    )
    registry.register("App\\Jobs\\X", lambda j: None)
    queue.table.push(PushJob("default", payload))
    make_worker(queue.table, registry, clock).run()
    (row,) = failed(queue.table)
    assert "cannot decode data.command" in row["exception"]
    assert "bad serialized date" in row["exception"]


def test_delete_and_pop_settles_and_reserves_in_one_transaction(table: JobTable) -> None:
    table.push(PushJob("q1", '{"n":1}'))
    table.push(PushJob("q2", '{"n":2}'))
    table.push(PushJob("q2", '{"n":3}'))
    first = table.pop("q1", 90)
    assert first is not None
    deleted, nxt = table.delete_and_pop(first, [PushJob("q3", '{"n":4}')], ["q3", "q2"], 90)
    assert deleted and nxt is not None
    assert (nxt.queue, nxt.payload, nxt.attempts) == ("q3", '{"n":4}', 1)  # queue order
    # A stale delete writes nothing (no chain push either) but still reserves the next job.
    deleted, after = table.delete_and_pop(first, [PushJob("q3", "dup")], ["q1", "q2"], 90)
    assert not deleted and after is not None and after.payload == '{"n":2}'
    assert table.size("q3") == 1 if table.layout == "laravel" else table.size("q3") == 0
    assert table.delete_and_pop(after, [], [], 90) == (True, None)


def test_worker_prefetch_never_strands_a_reserved_job(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    ran: list[int] = []
    registry.register("App\\Jobs\\X", lambda j: ran.append(j.properties["n"]))
    queue.dispatch_many([("App\\Jobs\\X", {"n": i}) for i in range(5)])
    worker = make_worker(queue.table, registry, clock, max_jobs=2, stop_when_empty=False)
    worker.run()
    assert ran == [0, 1]  # max_jobs: the second job's delete reserved nothing more
    assert queue.table.pop("default", 90) is not None  # job 2 is free to take
    stopper = make_worker(queue.table, registry, clock, stop_when_empty=False)
    stopper.handlers = HandlerRegistry()
    stopper.handlers.register(
        "App\\Jobs\\X", lambda j: (ran.append(j.properties["n"]), stopper.stop())
    )
    stopper.run()
    # Stopped while the job ran: its delete reserved nothing; nothing is left reserved.
    assert ran == [0, 1, 3]
    assert queue.table.pop("default", 90) is not None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tries": -1}, "tries must be an int >= 0"),
        ({"timeout": 1.5}, "timeout must be an int >= 0"),
        ({"backoff": [1, -2]}, "backoff must be seconds >= 0"),
        ({"delay": -3}, "delay must be >= 0"),
        ({"encrypt": True}, "needs the app key"),
        ({"queue": "bad\nname"}, "queue name"),
    ],
)
def test_dispatch_refuses_bad_options(db_url: str, options: dict[str, Any], message: str) -> None:
    from kombu_sqlqueue.exceptions import SqlQueueError
    from laravel_bridge import LaravelBridgeError

    q = LaravelQueue(db_url)
    try:
        with pytest.raises((LaravelBridgeError, SqlQueueError), match=message):
            q.dispatch("App\\Jobs\\X", {}, **options)
        assert q.size("default") == 0
    finally:
        q.close()


def test_a_chain_link_that_does_not_decode_fails_the_job_not_the_worker(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    from laravel_bridge import JobCommand

    ran: list[str] = []
    registry.register("App\\Jobs\\A", lambda j: ran.append("A"))
    command = JobCommand.build("App\\Jobs\\A", {})
    command.obj.properties["chained"] = ["O:1:not php"]
    payload = Payload.build(command, max_tries=1).to_json()
    queue.table.push(PushJob("default", payload))
    make_worker(queue.table, registry, clock).run()
    assert ran == ["A"]
    (row,) = failed(queue.table)
    assert "the command is not PHP-serialized data" in row["exception"]


@pytest.mark.parametrize("layout", ["askr"])
def test_a_chain_successor_too_large_for_the_database_fails_the_job_not_the_worker(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock
) -> None:
    ran: list[str] = []
    registry.register("App\\Jobs\\A", lambda j: ran.append("A"))
    queue.dispatch("App\\Jobs\\A", {}, chain=[("App\\Jobs\\B", {"blob": "x" * 5000})])
    store: Any = queue.table.store  # type: ignore[attr-defined]
    store.engine.max_payload_bytes = 2000  # as a server whose max_allowed_packet is tiny
    make_worker(queue.table, registry, clock).run()
    assert ran == ["A"] and queue.size("default") == 0
    (row,) = failed(queue.table)
    assert "MessageTooLarge" in row["exception"] and "2,000 bytes" in row["exception"]
