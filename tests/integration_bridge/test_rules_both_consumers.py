"""Each of Laravel's rules for a job's outcome, through both consumers that apply them:
``laravel-bridge work`` (:class:`~laravel_bridge.worker.Worker`) and a Celery worker on a
``laravel`` queue (:class:`~laravel_bridge.messages.LaravelFormat` through the transport,
driven here as Celery's task machinery drives it: an ack on success, the signal handler's
``fail_delivery`` on an exception or a timeout). Both decide by ``laravel_bridge/outcomes.py``;
this shows they reach the same table state, on every engine and both layouts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Empty
from types import SimpleNamespace
from typing import Any, Literal, Protocol

import pytest
import sqlalchemy as sa
from bridge_support import failed
from celery.signals import task_postrun
from kombu import Connection
from laravel_support import batch_row, sql_engine, unique_locks

from kombu_sqlqueue import complete
from laravel_bridge import HandlerRegistry, Job, JobCommand, LaravelQueue
from laravel_bridge.alarms import JobTimedOut
from laravel_bridge.tables import JobTable
from laravel_bridge.worker import Worker, WorkerOptions

QUEUE = "rules"
CLASS = "App\\Jobs\\Ruled"
#: "complete": the handler or task writes an effect and completes its job in that
#: transaction (``job.complete`` / ``kombu_sqlqueue.complete``).
Outcome = Literal["ok", "raise", "timeout", "complete"]
EFFECTS = sa.Table("effects", sa.MetaData(), sa.Column("n", sa.Integer, nullable=False))


class Consumer(Protocol):
    """Takes the next ready job of ``QUEUE`` and runs it to ``outcome``; False if none
    was handed out (none ready, or settled before it started)."""

    ran: list[int]

    def run(self, outcome: Outcome) -> bool: ...

    def close(self) -> None: ...


class LaravelWorker:
    def __init__(self, table: JobTable, db: sa.Engine, **options: Any) -> None:
        self.ran: list[int] = []
        self.db = db
        self.outcome: Outcome = "ok"
        registry = HandlerRegistry()
        registry.register(CLASS, self._handle)
        self.worker = Worker(
            table, WorkerOptions(queues=[QUEUE], sleep=0, **options), handlers=registry
        )

    def _handle(self, job: Job) -> None:
        self.ran.append(job.attempts)
        if self.outcome == "raise":
            raise RuntimeError(f"boom {job.attempts}")
        if self.outcome == "timeout":  # what the worker's alarm raises in the handler
            raise JobTimedOut("the job ran longer than its timeout of 1 s")
        if self.outcome == "complete":
            with self.db.begin() as conn:
                conn.execute(EFFECTS.insert().values(n=job.attempts))
                job.complete(conn)

    def run(self, outcome: Outcome) -> bool:
        self.outcome = outcome
        before = len(self.ran)
        self.worker.process_next()
        return len(self.ran) > before

    def close(self) -> None:
        self.worker.rules.close()  # what run() does when it returns


class Pool:
    """``app.pool`` as ``complete()`` uses it: a broker connection of the task's process."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.url, self.options = url, options

    @contextmanager
    def acquire(self, block: bool = True) -> Iterator[Connection]:
        conn = Connection(self.url, transport_options=self.options)
        conn.connect()
        try:
            yield conn
        finally:
            conn.release()


class Task:
    """What ``complete()`` and ``task_postrun``'s receivers read of a running task."""

    name = CLASS

    def __init__(self, app: Any, request: Any) -> None:
        self.app, self.request = app, request


class CeleryWorker:
    def __init__(self, conn: Connection, db: sa.Engine) -> None:
        self.ran: list[int] = []
        self.conn = conn
        self.db = db

    def _complete(self, message: Any) -> None:
        """What a task that completes in its transaction does, as Celery runs it: the
        request carries the message's headers and properties; ``task_postrun`` follows."""
        pool = Pool(self.conn.as_uri(include_password=True), self.conn.transport_options)
        request = SimpleNamespace(**message.headers, properties=message.properties)
        task = Task(SimpleNamespace(pool=pool), request)
        with self.db.begin() as conn:
            conn.execute(EFFECTS.insert().values(n=message.headers["laravel"]["attempts"]))
            complete(conn, task)
        task_postrun.send(sender=task, task_id=request.id)

    def run(self, outcome: Outcome) -> bool:
        try:
            message = self.conn.SimpleQueue(QUEUE).get(block=False)
        except Empty:
            return False
        attempts = message.headers["laravel"]["attempts"]
        self.ran.append(attempts)
        if outcome == "complete":
            self._complete(message)
        elif outcome != "ok":
            # What laravel_bridge.celery_signals does when the task raises (or hits its
            # soft time limit): the failure settled by Laravel's rules, then Celery's ack.
            assert self.conn.transport.fail_delivery(
                QUEUE,
                message.delivery_tag,
                message.headers,
                f"RuntimeError: boom {attempts}",
                timed_out=outcome == "timeout",
            )
        quiet = self.conn.transport.pending.settled_elsewhere
        message.ack()
        if outcome == "complete":  # Celery's late ack finds the job completed: counted
            assert self.conn.transport.pending.settled_elsewhere == quiet + 1
        return True

    def close(self) -> None:
        self.conn.release()


MakeConsumer = Callable[..., Consumer]


@pytest.fixture(params=["laravel-bridge work", "celery worker"])
def make_consumer(
    request: pytest.FixtureRequest, db_url: str, layout: str, table: JobTable
) -> Iterator[MakeConsumer]:
    """The consumer under test, with ``settings`` named as both take them (the worker's
    ``WorkerOptions`` fields; the format's ``queue_formats`` settings)."""
    made: list[Consumer] = []
    table.size(QUEUE)  # the job tables exist before the effects' transactions
    db = sql_engine(db_url)
    EFFECTS.create(db)

    def make(**settings: Any) -> Consumer:
        consumer: Consumer
        if request.param == "laravel-bridge work":
            consumer = LaravelWorker(table, db, **settings)
        else:
            formats = {QUEUE: {"format": "laravel", "layout": layout, **settings}}
            options = {"queue_formats": formats}
            conn = Connection(f"sqlqueue+{db_url}", transport_options=options)
            consumer = CeleryWorker(conn, db)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()
    EFFECTS.drop(db)
    db.dispose()


def effects(db_url: str) -> list[int]:
    """The attempts each effect was written by."""
    db = sql_engine(db_url)
    try:
        with db.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(EFFECTS.c.n))]
    finally:
        db.dispose()


@pytest.fixture
def consumer(make_consumer: MakeConsumer) -> Consumer:
    return make_consumer()


def dispatch(queue: LaravelQueue, batchId: str | None = None, **options: Any) -> str:
    properties: dict[str, Any] = {"n": 1} if batchId is None else {"n": 1, "batchId": batchId}
    return queue.dispatch(CLASS, properties, queue=QUEUE, **options).uuid


@pytest.mark.parametrize("outcome", ["ok", "complete"])
def test_success_deletes_the_job_and_stores_the_next_of_its_chain(
    consumer: Consumer, queue: LaravelQueue, table: JobTable, db_url: str, outcome: Outcome
) -> None:
    dispatch(queue, chain=[JobCommand.build(CLASS, {"n": 2}, queue=QUEUE)])
    assert consumer.run(outcome)
    assert table.size(QUEUE) == 1  # the chain's next job, stored with the delete
    assert consumer.run(outcome)
    assert table.size(QUEUE) == 0 and failed(table) == []
    assert consumer.ran == [1, 1]
    assert effects(db_url) == ([1, 1] if outcome == "complete" else [])


def test_a_failure_within_tries_is_released_after_its_attempts_backoff(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    dispatch(queue, tries=3, backoff=[300, 600])
    assert consumer.run("raise")
    assert not consumer.run("ok")  # ready again in 300 s
    assert table.size(QUEUE) == 1 and failed(table) == []


def test_a_failure_at_its_tries_fails_the_job_with_the_exception_text(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    uuid = dispatch(queue, tries=2, backoff=0)
    assert consumer.run("raise") and consumer.run("raise")
    assert not consumer.run("ok")
    (row,) = failed(table)
    assert row["uuid"] == uuid and row["exception"].startswith("RuntimeError: boom 2")
    assert table.size(QUEUE) == 0 and consumer.ran == [1, 2]


def test_max_exceptions_fails_the_job_before_its_tries_run_out(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    dispatch(queue, tries=5, backoff=0, max_exceptions=2)
    assert consumer.run("raise") and consumer.run("raise")
    (row,) = failed(table)
    assert row["exception"].startswith("RuntimeError: boom 2")
    assert not consumer.run("ok") and consumer.ran == [1, 2]


def test_a_job_past_its_retry_until_is_failed_without_running(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    dispatch(queue, tries=0, retry_until=int(time.time()) - 60)
    assert not consumer.run("ok")
    (row,) = failed(table)
    # Named Illuminate\Queue\MaxAttemptsExceededException by the Celery side, as PHP
    # names it; laravel_bridge.worker.MaxAttemptsExceeded by laravel-bridge work, as its
    # failed rows always have.
    assert "MaxAttemptsExceeded" in row["exception"]
    assert f"{CLASS} has been attempted too many times" in row["exception"]
    assert consumer.ran == [] and table.size(QUEUE) == 0


def test_a_timeout_fails_the_job_with_fail_on_timeout(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    dispatch(queue, tries=3, backoff=0, timeout=1, fail_on_timeout=True)
    assert consumer.run("timeout")
    assert len(failed(table)) == 1 and table.size(QUEUE) == 0


def test_a_timeout_without_fail_on_timeout_is_a_failed_attempt_released(
    consumer: Consumer, queue: LaravelQueue, table: JobTable
) -> None:
    dispatch(queue, tries=3, backoff=0, timeout=1)
    assert consumer.run("timeout")
    assert failed(table) == [] and table.size(QUEUE) == 1
    assert consumer.run("ok") and consumer.ran == [1, 2]


LOCK = f"laravel_cachelaravel_unique_job:{CLASS}7"


@pytest.mark.parametrize("outcome", ["ok", "raise", "complete"])
def test_a_unique_jobs_lock_is_released_when_it_is_done_or_failed(
    make_consumer: MakeConsumer, db_url: str, table: JobTable, outcome: Outcome
) -> None:
    table.cache_locks("cache_locks").create_schema()  # Laravel's cache:table migration
    unique = LaravelQueue(db_url, table.layout, table=table, unique_locks="cache_locks")
    # uniqueId as a property: a uniqueId() method is PHP, which a handler's unique_id
    # stands in for on laravel-bridge work only (a Celery worker reads the payload).
    props = {"n": 1, "uniqueId": 7}
    assert unique.dispatch(CLASS, props, queue=QUEUE, unique_for=600, unique_id=7)
    assert unique_locks(db_url) == [LOCK]
    consumer = make_consumer(unique_locks="cache_locks")
    assert consumer.run(outcome)  # tries 1: done, or failed
    assert unique_locks(db_url) == [] and table.size(QUEUE) == 0
    assert len(failed(table)) == (outcome == "raise")


@pytest.mark.parametrize("outcome", ["ok", "raise", "complete"])
def test_a_batched_job_is_recorded_in_its_batch(
    make_consumer: MakeConsumer, db_url: str, queue: LaravelQueue, table: JobTable,
    outcome: Outcome,
) -> None:  # fmt: skip
    batches = table.job_batches("job_batches")
    batches.create_schema()  # Laravel's queue:batches-table migration
    db = sql_engine(db_url)
    with db.begin() as conn:  # what Bus::batch(...)->dispatch() writes
        conn.execute(
            batches.table.insert().values(
                id="b-1", name="", total_jobs=2, pending_jobs=2, failed_jobs=0,
                failed_job_ids="[]", options="a:0:{}", created_at=int(time.time()),
            )
        )  # fmt: skip
    db.dispose()
    uuid = dispatch(queue, batchId="b-1")
    consumer = make_consumer(batches_table="job_batches")
    assert consumer.run(outcome)
    row = batch_row(db_url, "b-1")
    if outcome != "raise":
        assert (row["pending_jobs"], row["failed_jobs"]) == (1, 0)
    else:
        assert (row["pending_jobs"], row["failed_jobs"]) == (2, 1)
        assert uuid in row["failed_job_ids"]


def test_the_worker_names_its_failures_as_its_failed_rows_always_have() -> None:
    """The rules moved to outcomes.py and alarms.py; the exception classes kept the module
    name a failed row's text carries (``laravel_bridge.worker``)."""
    from laravel_bridge.outcomes import MaxAttemptsExceeded, exception_text

    assert exception_text(MaxAttemptsExceeded("x")).startswith(
        "laravel_bridge.worker.MaxAttemptsExceeded: x"
    )
    assert exception_text(JobTimedOut("y")).startswith("laravel_bridge.worker.JobTimedOut: y")
