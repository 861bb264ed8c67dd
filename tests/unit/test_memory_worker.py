"""The Laravel bridge's worker over the in-memory store (``askr`` layout): no database."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from support import T0, Clock

from kombu_sqlqueue.store import MemoryJobStore, NewJob
from laravel_bridge import HandlerRegistry, Job, LaravelQueue, Worker, WorkerOptions
from laravel_bridge.exceptions import LaravelBridgeError
from laravel_bridge.tables import JobTable, open_table


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(url: str, clock: Clock) -> Iterator[JobTable]:
    t = open_table(url, layout="askr")
    store_of(t).clock = clock
    yield t
    t.close()


@pytest.fixture
def queue(url: str, table: JobTable) -> LaravelQueue:
    return LaravelQueue(url, "askr", table=table)


def store_of(table: JobTable) -> MemoryJobStore:
    store = table.store  # type: ignore[attr-defined]
    assert isinstance(store, MemoryJobStore)
    return store


def worker(table: JobTable, registry: HandlerRegistry, clock: Clock, **options: object) -> Worker:
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    w = Worker(table, WorkerOptions(**options), handlers=registry)  # type: ignore[arg-type]
    w.clock = clock
    return w


def test_a_handled_job_runs_once_and_is_deleted(queue: LaravelQueue, clock: Clock) -> None:
    seen: list[Job] = []
    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Resize", seen.append)
    d = queue.dispatch("App\\Jobs\\Resize", {"path": "/a.png", "width": 640}, queue="images")
    worker(queue.table, registry, clock, queues=["images"]).run()
    (job,) = seen
    assert (job.uuid, job.queue, job.attempts) == (d.uuid, "images", 1)
    assert job.properties == {"path": "/a.png", "width": 640}
    store = store_of(queue.table)
    assert store.rows() == [] and store.dead_letters() == []


def test_a_raising_job_is_released_with_backoff_then_failed_after_tries(
    queue: LaravelQueue, clock: Clock
) -> None:
    runs: list[tuple[int, float]] = []

    def boom(job: Job) -> None:
        runs.append((job.attempts, clock.now - T0))
        raise RuntimeError("card declined")

    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Charge", boom)
    d = queue.dispatch("App\\Jobs\\Charge", {"id": 1}, tries=3, backoff=[5, 20])
    w = worker(queue.table, registry, clock)
    store = store_of(queue.table)
    w.process_next()
    (row,) = store.rows()
    assert (row["attempts"], row["reserved_until"], row["available_at"]) == (1, None, T0 + 5)
    clock.now += 4
    assert w.process_next() is False  # not before its backoff
    clock.now += 1
    w.process_next()  # attempt 2, released for 20 s
    clock.now += 20
    w.process_next()  # attempt 3 of 3: failed
    assert runs == [(1, 0), (2, 5), (3, 25)]
    assert store.rows() == []
    (dead,) = store.dead_letters()
    assert dead.uuid == d.uuid and dead.attempts == 3
    assert (dead.exception or "").startswith("RuntimeError: card declined")
    assert json.loads(dead.payload)["uuid"] == d.uuid


def test_max_exceptions_count_across_workers(queue: LaravelQueue, clock: Clock) -> None:
    def flaky(job: Job) -> None:
        raise ValueError("no")

    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Flaky", flaky)
    queue.dispatch("App\\Jobs\\Flaky", {}, tries=10, max_exceptions=2)
    first, second = worker(queue.table, registry, clock), worker(queue.table, registry, clock)
    first.process_next()
    assert store_of(queue.table).dead_letters() == []
    second.process_next()  # the second exception, counted by the other worker
    (dead,) = store_of(queue.table).dead_letters()
    assert dead.attempts == 2


def test_an_unreadable_payload_is_failed_with_its_reason(queue: LaravelQueue, clock: Clock) -> None:
    store = store_of(queue.table)
    store.enqueue(NewJob("default", b"{not json", max_attempts=255))
    ran: list[Job] = []
    registry = HandlerRegistry()
    registry.register("App\\Jobs\\Fine", ran.append)
    queue.dispatch("App\\Jobs\\Fine", {})
    worker(queue.table, registry, clock).run()
    assert len(ran) == 1  # the loop went on past the bad row
    (dead,) = store.dead_letters()
    assert dead.payload == b"{not json"  # as stored
    assert "MalformedJob" in (dead.exception or "") and "payload is not JSON" in (
        dead.exception or ""
    )
    assert store.rows() == []


def test_the_laravel_layout_needs_a_database(url: str) -> None:
    with pytest.raises(LaravelBridgeError, match="layout='askr'"):
        open_table(url, layout="laravel")


def test_a_unique_id_hook_that_raises_does_not_stop_the_worker(
    queue: LaravelQueue, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    registry = HandlerRegistry()

    def unique_id(job: Job) -> str:
        raise KeyError("reportId")

    registry.register("App\\Jobs\\Report", lambda job: ran.append(job.uuid), unique_id=unique_id)
    first = queue.dispatch("App\\Jobs\\Report", {})
    second = queue.dispatch("App\\Jobs\\Report", {})
    worker(queue.table, registry, clock, unique_locks="cache_locks").run()
    assert ran == [first.uuid, second.uuid]
    assert sum("unique_id of App\\Jobs\\Report's handler raised" in r.getMessage()
               for r in caplog.records) == 1  # fmt: skip


def test_a_class_name_no_log_file_can_hold_is_logged_escaped(
    queue: LaravelQueue, clock: Clock, tmp_path: pytest.TempPathFactory
) -> None:
    """A lone surrogate in a stored class name reaches a UTF-8 log file escaped (unescaped,
    the file's handler fails and the line is lost), a control character too."""
    import logging

    path = tmp_path / "worker.log"  # type: ignore[operator]
    handler = logging.FileHandler(path, encoding="utf-8", errors="strict")
    errors: list[object] = []
    handler.handleError = errors.append  # type: ignore[method-assign,assignment]
    logger = logging.getLogger("laravel_bridge.worker")
    logger.addHandler(handler)
    try:
        name = "App\\Jobs\\\udcff\x1bOdd"
        payload = json.dumps({"uuid": "odd", "job": f"{name}@handle", "data": {}})
        store_of(queue.table).enqueue(NewJob("default", payload.encode(), max_attempts=255))
        worker(queue.table, HandlerRegistry(), clock, unknown_jobs="fail").run()
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = path.read_text(encoding="utf-8")  # type: ignore[attr-defined]
    assert errors == [] and "App\\Jobs\\\\udcff\\x1bOdd" in text, text
