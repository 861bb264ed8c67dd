"""``job.complete(conn)``: a Laravel job's handler writes its effects and the deletion of its
job in one transaction, fenced by the delivery's reservation — on Laravel's ``jobs`` table
and contract v1's, every engine. Real ``laravel-bridge work`` processes under kill -9 and
SIGSTOP: ``e2e/test_complete_e2e.py``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import failed, make_worker
from laravel_support import sql_engine
from support import Clock

from kombu_sqlqueue.exceptions import DeliveryLost, NotCompletable, WrongDatabase
from laravel_bridge import HandlerRegistry, Job, LaravelQueue
from laravel_bridge.tables import JobTable

CHARGE = "App\\Jobs\\Charge"
METADATA = sa.MetaData()
EFFECTS = sa.Table("effects", METADATA, sa.Column("note", sa.String(100), nullable=False))


@pytest.fixture
def engine(db_url: str, queue: LaravelQueue) -> Iterator[sa.Engine]:
    """The application's engine on the jobs table's database, with its effects table."""
    queue.size("default")  # the job tables exist before the app's first transaction
    e = sql_engine(db_url)
    METADATA.create_all(e)
    yield e
    METADATA.drop_all(e)
    e.dispose()


def notes(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(EFFECTS.c.note))]


def charging(engine: sa.Engine, after: Callable[[Job], Any] = lambda job: None) -> Any:
    """A handler that writes an effect and completes its job in one transaction, then
    runs ``after`` (outside it)."""

    def charge(job: Job) -> None:
        with engine.begin() as conn:
            conn.execute(EFFECTS.insert().values(note=f"charged {job.properties['order']}"))
            job.complete(conn)
        after(job)

    return charge


def test_the_effects_and_the_jobs_deletion_commit_together(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    seen_during: list[bool] = []

    def charge(job: Job) -> None:
        with engine.begin() as conn:
            conn.execute(EFFECTS.insert().values(note=f"charged {job.properties['order']}"))
            job.complete(conn)
            seen_during.append(queue.table.gone(reserved(queue.table, job)))

    registry.register(CHARGE, charge)
    queue.dispatch(CHARGE, {"order": 1})
    lines: list[str] = []
    worker = make_worker(queue.table, registry, clock)
    worker.output = lines.append
    with caplog.at_level(logging.WARNING):
        worker.run()
    assert seen_during == [False]  # not before the commit
    assert notes(engine) == ["charged 1"] and queue.size("default") == 0
    assert worker.completed_in_transaction == 1 and failed(queue.table) == []
    assert [line.split("] ", 1)[1].split()[0] for line in lines] == ["Processing:", "Processed:"]
    assert caplog.records == []  # the worker's own delete is not sent: nothing stale


def reserved(table: JobTable, job: Job) -> Any:
    """A stand-in reservation of ``job`` for ``table.gone`` (which reads its id only)."""
    from laravel_bridge.tables import ReservedJob

    return ReservedJob(job.id, job.queue, "", job.attempts, None)


def test_the_chains_next_job_commits_with_the_completion(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine
) -> None:
    ran: list[str] = []
    rolled_back = {"once": True}

    def first(job: Job) -> None:
        with engine.begin() as conn:
            conn.execute(EFFECTS.insert().values(note="first"))
            job.complete(conn)
            if rolled_back.pop("once", False):
                raise RuntimeError("the transaction rolls back, the next job with it")
        ran.append("first")

    registry.register("App\\Jobs\\First", first)
    registry.register("App\\Jobs\\Second", lambda job: ran.append("second"))
    queue.dispatch("App\\Jobs\\First", {}, chain=[("App\\Jobs\\Second", {})])
    make_worker(queue.table, registry, clock, tries=2, once=True).run()
    # The first run rolled back: released, and no next job stored.
    assert ran == [] and notes(engine) == [] and queue.size("default") == 1
    clock.now += 3600
    make_worker(queue.table, registry, clock, tries=2).run()
    assert ran == ["first", "second"] and notes(engine) == ["first"]
    assert queue.size("default") == 0


def test_a_completion_rolled_back_leaves_the_job_to_laravels_rules(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine
) -> None:
    def charge(job: Job) -> None:
        with engine.begin() as conn:
            conn.execute(EFFECTS.insert().values(note="never"))
            job.complete(conn)
            raise ValueError("card declined")

    registry.register(CHARGE, charge)
    queue.dispatch(CHARGE, {"order": 1})
    worker = make_worker(queue.table, registry, clock, tries=2)
    worker.run()  # first attempt: released (backoff 0), second: failed
    assert notes(engine) == [] and worker.completed_in_transaction == 0
    (row,) = failed(queue.table)
    assert "card declined" in row["exception"]


def test_a_handler_that_raises_after_its_completion_committed_is_done(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    def after(job: Job) -> None:
        job.release(30)  # asked after the commit: the completion stands
        raise RuntimeError("the e-mail after the payment failed")

    registry.register(CHARGE, charging(engine, after))
    queue.dispatch(CHARGE, {"order": 7})
    worker = make_worker(queue.table, registry, clock)
    with caplog.at_level(logging.ERROR, logger="laravel_bridge.worker"):
        worker.run()
    assert notes(engine) == ["charged 7"] and queue.size("default") == 0
    assert failed(queue.table) == [] and worker.completed_in_transaction == 1
    (record,) = caplog.records
    assert "raised after completing in its transaction" in record.getMessage()


def test_a_delivery_taken_over_cannot_complete_and_writes_nothing(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    taken: list[Any] = []
    lost: list[BaseException] = []

    def charge(job: Job) -> None:
        clock.now += 3600  # this worker stopped past retry_after: another takes the job
        taken.append(queue.table.pop("default", 90))
        try:
            charging(engine)(job)
        except DeliveryLost as exc:
            lost.append(exc)
            raise

    registry.register(CHARGE, charge)
    queue.dispatch(CHARGE, {"order": 1})
    with caplog.at_level(logging.WARNING, logger="laravel_bridge.worker"):
        make_worker(queue.table, registry, clock).run()
    assert len(lost) == 1 and "no longer this delivery's" in str(lost[0])
    assert notes(engine) == []  # rolled back: the effects are the other delivery's
    (other,) = taken
    assert other is not None and other.attempts == 2
    assert any("was stale" in r.getMessage() for r in caplog.records)  # its release
    assert queue.table.delete(other) and queue.size("default") == 0


def test_complete_outside_a_transaction_or_a_workers_delivery_says_so(
    queue: LaravelQueue, registry: HandlerRegistry, clock: Clock, engine: sa.Engine
) -> None:
    errors: list[BaseException] = []

    def charge(job: Job) -> None:
        with engine.connect() as conn:  # no transaction begun
            try:
                job.complete(conn)
            except NotCompletable as exc:
                errors.append(exc)

    registry.register(CHARGE, charge)
    queue.dispatch(CHARGE, {"order": 1})
    worker = make_worker(queue.table, registry, clock)
    worker.run()
    assert "has none" in str(errors[0])
    assert queue.size("default") == 0 and worker.completed_in_transaction == 0  # returned: done
    bare = Job(1, CHARGE, "default", 1, "u", None, None, {})  # type: ignore[arg-type]
    with pytest.raises(NotCompletable, match="not delivered by a worker"):
        bare.complete()


def test_a_connection_to_another_database_is_refused(
    engine_name: str, queue: LaravelQueue, registry: HandlerRegistry, clock: Clock,
    engine: sa.Engine, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    if engine_name == "sqlite":
        other_url = f"sqlite:///{tmp_path / 'other.db'}"
    else:
        server = request.getfixturevalue("db_server")
        other_url = server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    other = sql_engine(other_url)
    errors: list[BaseException] = []

    def charge(job: Job) -> None:
        with other.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
            try:
                job.complete(conn)
            except WrongDatabase as exc:
                errors.append(exc)
                raise

    registry.register(CHARGE, charge)
    queue.dispatch(CHARGE, {"order": 1})
    make_worker(queue.table, registry, clock, tries=1).run()
    other.dispose()
    assert len(errors) == 1 and len(failed(queue.table)) == 1
