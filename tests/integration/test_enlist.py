"""``kombu_sqlqueue.enlist``: a publish written in the caller's transaction, on every engine
and with every kind of connection it takes — a SQLAlchemy ``Connection``, a ``Session``,
the driver's own DB-API connection. It commits with the caller's data, vanishes with their
rollback (a savepoint's too), is invisible to consumers until then, and is refused, with
nothing written anywhere, on a connection to another database."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kombu import Connection
from laravel_support import sql_engine
from sqlalchemy.orm import Session

from kombu_sqlqueue import enlist
from kombu_sqlqueue.exceptions import EnlistError, WriteLockHeld, WrongDatabase

QUEUE = "orders"
KINDS = ["sqlalchemy", "session", "dbapi"]


class App:
    """The application's side: its own engine on the same database, an ``orders`` table,
    and a transaction on it of the kind under test."""

    def __init__(self, db_url: str, kind: str) -> None:
        self.engine = sql_engine(db_url)
        self.kind = kind
        orders = sa.Table(
            "orders",
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True),  # autoincrement on every engine
            sa.Column("note", sa.Text),
        )
        orders.metadata.create_all(self.engine)

    @contextmanager
    def transaction(self) -> Iterator[tuple[Any, Callable[[str], None]]]:
        """(what enlist() takes, insert(note)) in an open transaction; yields, then the
        caller commits or rolls back with :meth:`commit` / :meth:`rollback`."""
        if self.kind == "dbapi":
            raw = self.engine.raw_connection()
            dbapi = raw.dbapi_connection
            assert dbapi is not None
            self._end = dbapi
            marker = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"

            def insert(note: str) -> None:
                cur = dbapi.cursor()
                cur.execute(f"INSERT INTO orders (note) VALUES ({marker})", (note,))
                cur.close()

            try:
                yield dbapi, insert
            finally:
                dbapi.rollback()  # what was not committed
                raw.close()
            return
        if self.kind == "session":
            with Session(self.engine) as session:
                self._end = session

                def insert(note: str) -> None:
                    session.execute(sa.text("INSERT INTO orders (note) VALUES (:n)"), {"n": note})

                yield session, insert
            return
        with self.engine.connect() as conn:
            conn.begin()
            self._end = conn

            def insert(note: str) -> None:
                conn.execute(sa.text("INSERT INTO orders (note) VALUES (:n)"), {"n": note})

            yield conn, insert

    def commit(self) -> None:
        self._end.commit()

    def rollback(self) -> None:
        self._end.rollback()

    def notes(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT note FROM orders ORDER BY id")).scalars())

    def close(self) -> None:
        self.engine.dispose()


@pytest.fixture(params=KINDS)
def app(request: pytest.FixtureRequest, db_url: str) -> Iterator[App]:
    a = App(db_url, str(request.param))
    yield a
    a.close()


@pytest.fixture
def broker(broker_url: str) -> Iterator[Connection]:
    conn = Connection(broker_url)
    conn.SimpleQueue(QUEUE).qsize()  # the tables exist before the app's transaction
    yield conn
    conn.release()


def messages(broker: Connection) -> list[Any]:
    """Every ready message of the queue, consumed and acked (what committed)."""
    queue = broker.SimpleQueue(QUEUE)
    found = []
    while True:
        try:
            message = queue.get(block=False)
        except queue.Empty:
            return found
        found.append(message)
        message.ack()


def waiting(broker: Connection) -> list[Any]:
    """The payloads of :func:`messages`."""
    return [m.payload for m in messages(broker)]


def test_an_enlisted_publish_commits_with_the_data_and_vanishes_on_rollback(
    app: App, broker: Connection
) -> None:
    queue = broker.SimpleQueue(QUEUE)
    with app.transaction() as (conn, insert):
        insert("rolled back")
        with enlist(conn):
            queue.put("rolled back")
        assert queue.qsize() == 0  # not visible before the commit
        app.rollback()
    assert waiting(broker) == [] and app.notes() == []

    with app.transaction() as (conn, insert):
        insert("committed")
        with enlist(conn):
            queue.put("committed")
        assert queue.qsize() == 0  # a consumer finds nothing yet
        app.commit()
    assert waiting(broker) == ["committed"] and app.notes() == ["committed"]


def test_a_savepoint_rolled_back_takes_its_publishes_and_keeps_the_outer_ones(
    app: App, broker: Connection
) -> None:
    queue = broker.SimpleQueue(QUEUE)
    with app.transaction() as (conn, _insert):
        with enlist(conn):
            queue.put("outer")
            if app.kind == "dbapi":
                cur = conn.cursor()
                cur.execute("SAVEPOINT inner_block")
                queue.put("inner")
                cur.execute("ROLLBACK TO SAVEPOINT inner_block")
                cur.close()
            else:
                nested = conn.begin_nested()
                queue.put("inner")
                nested.rollback()
            with enlist(conn):  # nested enlist blocks: the innermost is used
                queue.put("nested")
        app.commit()
    assert waiting(broker) == ["outer", "nested"]


def test_a_connection_to_another_database_is_refused_and_nothing_is_written(
    engine_name: str, db_url: str, broker: Connection, tmp_path: Path, request: Any
) -> None:
    if engine_name == "sqlite":
        other_url = f"sqlite:///{tmp_path / 'other.db'}"
    else:
        server = request.getfixturevalue("db_server")
        other_url = server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    other = App(other_url, "sqlalchemy")
    queue = broker.SimpleQueue(QUEUE)
    try:
        with other.transaction() as (conn, insert):
            insert("elsewhere")
            with enlist(conn), pytest.raises(WrongDatabase, match="not to the broker's"):
                queue.put("never")
            other.commit()
        assert other.notes() == ["elsewhere"]  # their transaction was theirs to commit
        with other.engine.connect() as c:
            assert "askr_jobs" not in sa.inspect(c).get_table_names()
    finally:
        other.close()
    assert waiting(broker) == []


def test_outside_a_transaction_a_publish_is_written_at_once(
    db_url: str, broker: Connection
) -> None:
    """A SQLAlchemy Connection with no ``begin()`` has no transaction to join: the publish
    is written as without enlist, at once."""
    app = App(db_url, "sqlalchemy")
    try:
        with app.engine.connect() as conn, enlist(conn):
            broker.SimpleQueue(QUEUE).put("now")
            assert not conn.in_transaction()
    finally:
        app.close()
    assert waiting(broker) == ["now"]


def test_another_threads_publish_is_never_captured(app: App, broker_url: str) -> None:
    """A thread publishing while this one is enlisted writes on its own: when this
    transaction rolls back, its message stays. (On SQLite it waits for this transaction's
    write lock, so it is written once the rollback frees it.)"""
    done = threading.Event()

    def publish_elsewhere() -> None:
        with Connection(broker_url) as own:
            own.SimpleQueue(QUEUE).put("other thread")
        done.set()

    with Connection(broker_url) as broker:
        queue = broker.SimpleQueue(QUEUE)
        thread = threading.Thread(target=publish_elsewhere)
        with app.transaction() as (conn, insert):
            insert("rolled back")
            with enlist(conn):
                queue.put("mine")
                thread.start()
                done.wait(2)  # SQLite: still waiting for the lock; servers: written
            app.rollback()
        thread.join(30)
        assert done.is_set()
        assert waiting(broker) == ["other thread"]


def test_enlist_refuses_what_is_no_connection() -> None:
    with pytest.raises(EnlistError, match="takes a SQLAlchemy Connection or Session"):
        enlist("sqlite:///not-a-connection.db").__enter__()


def test_an_enlisted_publish_keeps_priority_countdown_and_the_dedupe_window(
    engine_name: str, db_url: str, broker_url: str
) -> None:
    """Every feature of a publish holds in the caller's transaction: priority order, a
    delay, and enqueue-once decided inside it."""
    app = App(db_url, "sqlalchemy")
    options = {"dedupe_window": 3600}
    try:
        with Connection(broker_url, transport_options=options) as broker:
            broker.SimpleQueue(QUEUE).qsize()  # the queue's tables exist (a worker ran)
            producer = broker.Producer()
            with app.transaction() as (conn, _insert), enlist(conn):
                for body, priority in (("low", 1), ("high", 9)):
                    producer.publish(body, routing_key=QUEUE, priority=priority,
                                     headers={"dedupe_key": body})  # fmt: skip
                producer.publish("again", routing_key=QUEUE, headers={"dedupe_key": "low"})
                producer.publish("later", routing_key=QUEUE, headers={"dedupe_key": "later",
                                 "eta": "2999-01-01T00:00:00+00:00"})  # fmt: skip
                app.commit()
            assert broker.transport.deduplicated == 1
            assert waiting(broker) == ["high", "low"]  # "later" is delayed, "again" dropped
            assert broker.transport.store.backlog(QUEUE).total == 1
    finally:
        app.close()


def test_a_binding_stored_in_a_rolled_back_transaction_is_stored_again_when_needed(
    db_url: str, broker_url: str
) -> None:
    """On SQLite a queue first bound inside an enlisted transaction is bound in it (the
    store's own write would wait for that transaction's lock); rolled back, the binding
    is gone while Kombu remembers it as declared: the next publish stores it again and is
    routed, not dropped."""
    from kombu import Exchange, Queue

    app = App(db_url, "sqlalchemy")
    shop = Queue("shipping", Exchange("shop", "direct"), routing_key="ship")
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()  # the queue's tables exist (a worker ran)
            producer = broker.Producer()
            with app.transaction() as (conn, insert):
                insert("rolled back")
                with enlist(conn):
                    producer.publish("first", exchange="shop", routing_key="ship", declare=[shop])
                app.rollback()
            producer.publish("second", exchange="shop", routing_key="ship", declare=[shop])
            received = broker.SimpleQueue("shipping").get(timeout=5)
            assert received.payload == "second"
            received.ack()
            assert broker.transport.store.topology.bindings("shop") == [
                ("ship", "shipping", "direct")
            ]
    finally:
        app.close()


def test_on_sqlite_missing_tables_inside_an_enlisted_transaction_say_what_to_do(
    tmp_path: Path,
) -> None:
    """SQLite has one writer: tables created inside the caller's write transaction would
    wait for its lock (until the busy timeout). The publish says what to do instead."""
    path = tmp_path / "fresh.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode = WAL").close()  # as an app sets it
    app = App(f"sqlite:///{path}", "dbapi")
    try:
        with app.transaction() as (conn, insert):
            insert("holds the write lock")
            with (
                enlist(conn),
                Connection(f"sqlqueue+sqlite:///{path}") as broker,
                pytest.raises(Exception, match="create them first, with `kombu-sqlqueue"),
            ):
                broker.SimpleQueue(QUEUE).put("never")
    finally:
        app.close()


def test_celery_publishes_of_every_shape_are_enlisted(db_url: str, broker_url: str) -> None:
    """``delay``, ``apply_async`` with a countdown, ``send_task``, a chain's first task and
    a group's tasks all commit or roll back with the caller's transaction."""
    from celery import Celery, chain, group

    celery_app = Celery("enlisted", broker=broker_url)
    celery_app.conf.task_default_queue = QUEUE

    @celery_app.task(name="t.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    app = App(db_url, "session")
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()
            for outcome in ("rollback", "commit"):
                with app.transaction() as (session, insert):
                    insert(outcome)
                    with enlist(session):
                        add.delay(1, 2)
                        add.apply_async((3, 4), countdown=0, expires=3600)
                        celery_app.send_task("t.add", (5, 6))
                        chain(add.s(7, 8), add.s(9)).apply_async()
                        group(add.s(i, i) for i in range(3)).apply_async()
                    if outcome == "rollback":
                        app.rollback()
                    else:
                        app.commit()
                if outcome == "rollback":
                    assert waiting(broker) == []
            bodies = [args for args, _kwargs, _embed in waiting(broker)]
            assert sorted(bodies) == sorted(
                [[1, 2], [3, 4], [5, 6], [7, 8], [0, 0], [1, 1], [2, 2]]
            )
    finally:
        app.close()
        celery_app.close()


def test_a_celery_task_for_a_laravel_queue_is_enlisted_in_laravels_table(
    db_url: str, broker_url: str
) -> None:
    """A queue of the ``laravel`` format keeps its rows in Laravel's ``jobs`` table: a task
    sent there inside ``enlist`` commits or rolls back with the caller's transaction too."""
    from celery import Celery

    from laravel_bridge.laravel_tables import LaravelTableStore

    options = {"queue_formats": {"php": "laravel"}}
    celery_app = Celery("to-php", broker=broker_url, set_as_current=False)
    celery_app.conf.broker_transport_options = options
    jobs = LaravelTableStore(db_url)
    jobs.ensure_ready()
    app = App(db_url, "dbapi")
    try:
        celery_app.send_task("App\\Jobs\\Warm", kwargs={}, queue="php")  # tables and bindings
        warm = jobs.pop("php", 90)
        assert warm is not None and jobs.delete(warm)
        for outcome in ("rollback", "commit"):
            with app.transaction() as (conn, insert):
                insert(outcome)
                with enlist(conn):
                    celery_app.send_task("App\\Jobs\\Ship", kwargs={"note": outcome}, queue="php")
                assert jobs.size("php") == 0
                app.commit() if outcome == "commit" else app.rollback()
        row = jobs.pop("php", 90)
        assert row is not None and "commit" in str(row.payload) and jobs.pop("php", 90) is None
    finally:
        app.close()
        jobs.close()
        celery_app.close()


def test_bad_input_is_refused_before_anything_is_written_and_the_transaction_stays_yours(
    app: App, broker: Connection
) -> None:
    from kombu_sqlqueue.exceptions import InvalidQueueName

    producer = broker.Producer()
    with app.transaction() as (conn, insert):
        insert("kept")
        with enlist(conn), pytest.raises(InvalidQueueName):
            producer.publish("x", routing_key="bad\x00queue")
        with enlist(conn):
            broker.SimpleQueue(QUEUE).put("after the refusal")
        app.commit()
    assert app.notes() == ["kept"] and waiting(broker) == ["after the refusal"]


def test_celerys_own_transient_messages_are_never_enlisted(db_url: str, broker_url: str) -> None:
    """Control, event and reply messages (delivery_mode 1) are written at once on the
    broker's own connection, whatever the caller's transaction then does."""
    from celery import Celery

    app = App(db_url, "sqlalchemy")
    celery_app = Celery("events", broker=broker_url, set_as_current=False)
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()
            producer = broker.Producer()
            with app.transaction() as (conn, _insert):
                conn.execute(sa.text("SELECT 1"))  # open, nothing written (no SQLite lock)
                with enlist(conn):
                    producer.publish("transient", routing_key=QUEUE, delivery_mode=1)
                    celery_app.control.broadcast("ping")  # a fanout control message
                    if not broker.transport.store.single_writer:
                        assert broker.SimpleQueue(QUEUE).qsize() == 1  # there before a commit
                    # (SQLite: held for the writer thread, which writes once the caller's
                    # transaction lets go of the lock — never in it.)
                app.rollback()
            broker.transport.transient.flush()
            assert waiting(broker) == ["transient"]
    finally:
        app.close()
        celery_app.close()


def test_a_chord_is_enlisted_header_and_unlock_alike(
    db_url: str, broker_url: str, tmp_path: Path
) -> None:
    from celery import Celery, chord

    celery_app = Celery("chords", broker=broker_url, set_as_current=False,
                        backend=f"db+sqlite:///{tmp_path / 'results.db'}")  # fmt: skip
    celery_app.conf.task_default_queue = QUEUE

    @celery_app.task(name="t.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @celery_app.task(name="t.total", shared=False)
    def total(values: list[int]) -> int:
        return sum(values)

    app = App(db_url, "sqlalchemy")
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()
            for outcome in ("rollback", "commit"):
                with app.transaction() as (conn, _insert), enlist(conn):
                    chord(add.s(i, i) for i in range(3))(total.s())
                    app.rollback() if outcome == "rollback" else app.commit()
                if outcome == "rollback":
                    assert broker.transport.store.backlog(QUEUE).total == 0
            # The header's three tasks, ready; chord_unlock, delayed (it polls the results).
            assert broker.transport.store.backlog(QUEUE).total == 4
            names = sorted(m.headers["task"] for m in messages(broker))
            assert names == ["t.add", "t.add", "t.add"]
    finally:
        app.close()
        celery_app.close()


def test_a_retry_and_a_transient_task_are_told_apart_from_celerys_own_messages(
    db_url: str, broker_url: str
) -> None:
    """A task's retry (``retries`` > 0) is never enlisted — its delivery is settled whatever
    the task's transaction does; a task sent non-persistent is still a task, and is."""
    app = App(db_url, "sqlalchemy")
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()
            producer = broker.Producer()
            with app.transaction() as (conn, _insert), enlist(conn):
                producer.publish("retry", routing_key=QUEUE,
                                 headers={"task": "t.x", "id": "1", "retries": 1})  # fmt: skip
                producer.publish("transient task", routing_key=QUEUE, delivery_mode=1,
                                 headers={"task": "t.x", "id": "2", "retries": 0})  # fmt: skip
                app.rollback()
            assert waiting(broker) == ["retry"]
    finally:
        app.close()


def test_a_retry_behind_the_write_lock_of_its_own_transaction_is_refused_on_sqlite(
    engine_name: str, db_url: str, broker_url: str
) -> None:
    """After the caller's transaction wrote, a retry (never enlisted) is written on the
    broker's own connection: on PostgreSQL and MariaDB at once, on SQLite never — its one
    write lock is that transaction's — so there it is refused at once, nothing written,
    instead of waiting for the lock until the busy timeout runs out."""
    app = App(db_url, "sqlalchemy")
    try:
        with Connection(broker_url) as broker:
            broker.SimpleQueue(QUEUE).qsize()
            producer = broker.Producer()
            with app.transaction() as (conn, insert), enlist(conn):
                insert("written first")
                headers = {"task": "t.x", "id": "1", "retries": 1}
                if engine_name == "sqlite":
                    with pytest.raises(WriteLockHeld, match="retry of task t"):
                        producer.publish("retry", routing_key=QUEUE, headers=headers)
                else:
                    producer.publish("retry", routing_key=QUEUE, headers=headers)
                app.rollback()
            assert waiting(broker) == ([] if engine_name == "sqlite" else ["retry"])
    finally:
        app.close()


def test_an_unbound_queue_is_not_bound_again_by_a_publish_that_misses(broker_url: str) -> None:
    """Only bindings stored in a caller's transaction are stored again on a miss: one this
    process unbound stays unbound (the message is not routed, as before)."""
    from kombu import Exchange, Queue

    shop = Queue("gone", Exchange("shop2", "direct"), routing_key="k")
    with Connection(broker_url) as broker:
        channel = broker.default_channel
        shop(channel).declare()
        shop(channel).unbind_from(Exchange("shop2"), routing_key="k")
        broker.Producer().publish("lost", exchange="shop2", routing_key="k")
        assert broker.transport.store.topology.bindings("shop2") == []
        assert broker.SimpleQueue("gone").qsize() == 0


def test_a_context_copied_into_another_thread_does_not_carry_the_enlistment(
    app: App, broker_url: str
) -> None:
    """``asyncio.to_thread`` and ``copy_context().run`` carry the enlistment into another
    thread: there it is not used (a DB-API connection is not for two threads at once)."""
    import contextvars

    from kombu_sqlqueue.store.enlist import current

    seen: list[object] = []
    with app.transaction() as (conn, _insert), enlist(conn):
        copied = contextvars.copy_context()
        thread = threading.Thread(target=lambda: copied.run(lambda: seen.append(current())))
        thread.start()
        thread.join()
        app.rollback()
    assert seen == [None]


def test_a_connection_of_another_engines_driver_is_refused_without_a_statement(
    engine_name: str, broker_url: str, tmp_path: Path
) -> None:
    """A sqlite3 connection enlisted for a PostgreSQL or MariaDB broker (or the reverse is
    the same check): refused by its driver, before any statement of ours reaches it."""
    other = sqlite3.connect(tmp_path / "other.db") if engine_name != "sqlite" else None
    if other is None:
        import psycopg  # noqa: F401  - a psycopg connection object needs a server; use a fake

        class Conn:  # a DB-API-shaped object of another driver's module
            __module__ = "psycopg.connection"

            def cursor(self) -> Any:
                raise AssertionError("no statement may reach it")

            def commit(self) -> None: ...

        other = Conn()  # type: ignore[assignment]
    with Connection(broker_url) as broker:
        queue = broker.SimpleQueue(QUEUE)
        queue.qsize()
        with enlist(other), pytest.raises(WrongDatabase):
            queue.put("never")
        assert queue.qsize() == 0


@pytest.mark.parametrize("engine_name", ["mysql"], indirect=True)  # the one limit in reach
def test_a_payload_past_the_engines_limit_is_refused_before_anything_is_written(
    db_url: str, broker: Connection
) -> None:
    from kombu_sqlqueue.exceptions import MessageTooLarge

    app = App(db_url, "sqlalchemy")
    try:
        limit = broker.transport.store.engine.max_payload_bytes
        with app.transaction() as (conn, insert):
            insert("kept")
            with enlist(conn), pytest.raises(MessageTooLarge):
                broker.SimpleQueue(QUEUE).put("x" * (limit + 1), serializer="raw")
            app.commit()
        assert app.notes() == ["kept"] and waiting(broker) == []
    finally:
        app.close()
