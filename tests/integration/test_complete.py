"""``kombu_sqlqueue.complete()``: a task's effects and the deletion of its job commit in one
transaction of the application's, fenced by the delivery's reservation — on every engine and
with every kind of connection ``enlist`` takes. Driven here as a Celery worker's task calls
it (the task's request carries the message's properties); real ``celery worker`` processes:
``e2e/test_complete_e2e.py``."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from kombu import Connection
from test_enlist import KINDS, App

from kombu_sqlqueue import complete
from kombu_sqlqueue.exceptions import DeliveryLost, NotCompletable, WrongDatabase
from kombu_sqlqueue.store import JobStore

QUEUE = "effects"


class Pool:
    """``app.pool`` as ``complete()`` uses it: a broker connection of the task's process,
    here opened for each call and closed after (a prefork child's own connection, not the
    one holding the delivery). Celery's own pool: ``e2e/test_complete_e2e.py``."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url

    @contextmanager
    def acquire(self, block: bool = True) -> Iterator[Connection]:
        conn = Connection(self.broker_url)
        conn.connect()  # so that release() closes the transport's store too
        try:
            yield conn
        finally:
            conn.release()


class Task:
    """What ``complete()`` reads of a running Celery task: its app and its request."""

    def __init__(self, app: Any, message: Any, *, eager: bool = False) -> None:
        self.app, self.name = app, "tasks.charge"
        self.request = SimpleNamespace(properties=message.properties, is_eager=eager)


@pytest.fixture
def celery_app(broker_url: str) -> Any:
    return SimpleNamespace(pool=Pool(broker_url))


@pytest.fixture
def consumer(broker_url: str) -> Iterator[Connection]:
    """The worker's connection: it holds the delivery, renews it and acks it after."""
    conn = Connection(broker_url)
    yield conn
    conn.release()


@pytest.fixture(params=KINDS)
def app(request: pytest.FixtureRequest, db_url: str) -> Iterator[App]:
    a = App(db_url, str(request.param))
    yield a
    a.close()


def deliver(consumer: Connection, body: str = "order-1") -> Any:
    queue = consumer.SimpleQueue(QUEUE)
    queue.put(body)
    return queue.get(timeout=5)


def test_the_effects_and_the_jobs_deletion_commit_together(
    app: App, consumer: Connection, celery_app: Any, db_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    message = deliver(consumer)
    job_id = int(message.delivery_tag.split(":")[0])
    store = JobStore(db_url)
    with app.transaction() as (conn, insert):
        insert("charged order-1")
        complete(conn, Task(celery_app, message))
        assert store.gone([job_id]) == set()  # not before the commit
        app.commit()
    assert app.notes() == ["charged order-1"]
    assert store.gone([job_id]) == {job_id}  # settled by the commit, not taken over
    store.close()
    transport = consumer.transport
    with caplog.at_level(logging.DEBUG, logger="kombu_sqlqueue"):
        assert transport.renewer.renew_once()  # the row is gone: lost, but not warned of
        message.ack()  # the worker's acks_late ack: finds the job gone, counted
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert transport.pending.settled_elsewhere == 1
    assert consumer.SimpleQueue(QUEUE).qsize() == 0


def test_a_rolled_back_transaction_leaves_the_delivery_held_and_settled_as_usual(
    app: App, consumer: Connection, celery_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    message = deliver(consumer)
    with app.transaction() as (conn, insert):
        insert("charged order-1")
        complete(conn, Task(celery_app, message))
        app.rollback()
    assert app.notes() == []
    transport = consumer.transport
    assert transport.renewer.renew_once() == set()  # still held, renewed
    with caplog.at_level(logging.WARNING, logger="kombu_sqlqueue"):
        message.ack()
    assert caplog.records == [] and transport.pending.settled_elsewhere == 0
    assert consumer.SimpleQueue(QUEUE).qsize() == 0


def test_a_delivery_taken_over_cannot_complete_and_writes_nothing(
    app: App, consumer: Connection, celery_app: Any, db_url: str
) -> None:
    message = deliver(consumer)
    other = JobStore(db_url)
    other.clock = lambda: time.time() + 3600  # the reservation lapsed; another worker claims
    (taken,) = other.claim(QUEUE, 1, 30).jobs
    with app.transaction() as (conn, insert):
        insert("charged order-1 twice")
        with pytest.raises(DeliveryLost, match="no longer this task's delivery"):
            complete(conn, Task(celery_app, message))
        app.rollback()  # what the task does: its effects are the other delivery's
    assert app.notes() == []
    assert other.get_job(taken.id) is not None  # the new holder's job, untouched
    assert other.ack(taken.receipt)
    other.close()


def test_twice_in_one_transaction_the_second_is_refused(
    app: App, consumer: Connection, celery_app: Any
) -> None:
    message = deliver(consumer)
    with app.transaction() as (conn, _insert):
        complete(conn, Task(celery_app, message))
        with pytest.raises(DeliveryLost):
            complete(conn, Task(celery_app, message))
        app.commit()
    assert consumer.SimpleQueue(QUEUE).qsize() == 0


def test_without_a_delivery_of_ours_complete_says_so(
    consumer: Connection, celery_app: Any, db_url: str
) -> None:
    message = deliver(consumer)
    app = App(db_url, "sqlalchemy")
    try:
        with app.transaction() as (conn, _insert):
            with pytest.raises(NotCompletable, match="no task is running"):
                complete(conn)
            with pytest.raises(NotCompletable, match="runs eagerly"):
                complete(conn, Task(celery_app, message, eager=True))
            bare = SimpleNamespace(app=celery_app, name="t", request=SimpleNamespace(properties={}))
            with pytest.raises(NotCompletable, match="no delivery tag"):
                complete(conn, bare)
            job_id = message.delivery_tag.split(":")[0]
            laravel = SimpleNamespace(properties={"delivery_tag": f"{job_id}:L3"})
            fmt = SimpleNamespace(app=celery_app, name="t", request=laravel)
            with pytest.raises(NotCompletable, match="queue format's table"):
                complete(conn, fmt)
            app.rollback()
        outside = app.engine.connect()  # a connection with no transaction open
        with outside, pytest.raises(NotCompletable, match="has none"):
            complete(outside, Task(celery_app, message))
    finally:
        app.close()
    message.ack()  # still held: nothing above wrote


def test_a_connection_to_another_database_is_refused(
    engine_name: str, consumer: Connection, celery_app: Any, tmp_path: Path
) -> None:
    message = deliver(consumer)
    other = sqlite3.connect(tmp_path / "other.db")
    with pytest.raises(WrongDatabase):
        complete(other, Task(celery_app, message))
    other.close()
    message.ack()
    assert consumer.SimpleQueue(QUEUE).qsize() == 0


def test_another_brokers_task_is_not_ours_to_complete(tmp_path: Path) -> None:
    app = Celery("other", broker="memory://", set_as_current=False)
    message = SimpleNamespace(properties={"delivery_tag": "1:" + "a" * 32})
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    with engine.begin() as conn, pytest.raises(NotCompletable, match="not kombu-sqlqueue"):
        complete(conn, Task(app, message))  # Celery's own pool, of Kombu's memory transport
    engine.dispose()
    app.close()


def test_a_savepoint_rolled_back_after_complete_takes_the_completion_with_it(
    consumer: Connection, celery_app: Any, db_url: str
) -> None:
    """The completion is a write of the caller's transaction like any other: a savepoint
    rolled back after it undoes it, the outer transaction commits without it, and the
    delivery — still held — completes later."""
    message = deliver(consumer)
    job_id = int(message.delivery_tag.split(":")[0])
    store = JobStore(db_url)
    engine = sa.create_engine(store.url)  # the broker's database, with its driver
    try:
        with engine.begin() as conn:
            nested = conn.begin_nested()
            complete(conn, Task(celery_app, message))
            nested.rollback()
        assert store.gone([job_id]) == set()  # still there, and held
        assert consumer.transport.renewer.renew_once() == set()
        with engine.begin() as conn:
            complete(conn, Task(celery_app, message))
        assert store.gone([job_id]) == {job_id}
    finally:
        store.close()
        engine.dispose()
    message.ack()
    assert consumer.transport.pending.settled_elsewhere == 1
