"""Publishing in the caller's transaction: :func:`enlist`.

Inside ``with enlist(connection):`` a publish of this thread (or asyncio task) to a queue
in the same database is written *on that connection*, in its open transaction, instead of
on the store's own pooled connection in a transaction of its own: the row commits with the
caller's data, and a rollback (to a savepoint, too) takes it away with them. Until the
commit no worker sees it (PostgreSQL's wake-up NOTIFY is delivered by that commit).

The invariant: **a job enlisted in a transaction exists exactly when that transaction
commits.** What keeps it:

* the enqueue statements are the store's own named statements, compiled for its engine,
  run on a cursor of the caller's DB-API connection, with no BEGIN and no COMMIT of ours
  (:class:`CallerExecutor`);
* the caller's connection must be to the store's database: its identity (the SQLite
  file's device and inode; PostgreSQL's database, cluster start time and port; MariaDB's
  database, host, port and data directory) is compared with the store's before anything is
  written, and :class:`~kombu_sqlqueue.exceptions.WrongDatabase` is raised otherwise;
* the enlistment is a :class:`~contextvars.ContextVar`, so another thread's publish (a
  new thread starts with an empty context) is never captured;
* which publishes are enlisted is the caller's decision (the transport enlists a Celery
  task's message, never its control, event or reply messages); this module only keeps the
  current enlistment and runs what it is given.

Failure cases: the process dies before the commit — the database rolls the transaction
back, data and job together; the caller rolls back — both gone; the enqueue fails (a
payload too large, a bad queue name) — a named error before anything is written, the
caller's transaction still theirs to roll back.

No Kombu and no Laravel here; the store's verbs read :func:`current` only through
``TableStore.joined``.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from ..exceptions import EnlistError, SqlQueueError, StoreError, WrongDatabase
from .executor import Tx

if TYPE_CHECKING:
    from .executor import Executor

T = TypeVar("T")


@dataclass(eq=False)
class Enlistment:
    """One ``with enlist(...)`` block: what the caller gave, resolved at each publish (a
    SQLAlchemy ``Session`` may begin its transaction inside the block)."""

    #: A SQLAlchemy ``Connection`` or ``Session``, a DB-API connection, or None (Django's).
    source: Any
    #: The Django database alias, when ``source`` is None.
    using: str = "default"
    #: Set when the block ends: a task the block started and that publishes later is
    #: not enlisted in a transaction that is over.
    closed: bool = False
    #: id(DB-API connection) → (the connection, its database identity).
    _identities: dict[int, tuple[Any, Hashable]] = field(default_factory=dict)
    #: The thread the block runs in: a context copied into another thread
    #: (``asyncio.to_thread``, ``copy_context().run``) carries the enlistment there, but a
    #: DB-API connection is not for two threads at once, so it is not enlisted there.
    thread: int = field(default_factory=threading.get_ident)

    def connection(self) -> Any | None:
        """The DB-API connection to write on, or None when there is no transaction to join
        (a SQLAlchemy ``Connection`` outside ``begin()``, Django outside ``atomic()``):
        then the publish is written at once, as without ``enlist``."""
        if self.closed:
            return None
        return dbapi_connection(self.source, self.using)

    def identity(
        self, connection: Any, read: Callable[[Any], Hashable], *, lasting: bool
    ) -> Hashable:
        """The database identity of ``connection`` (``read`` runs on it): once per block,
        or — ``lasting``, an engine where a connection cannot change database — once per
        connection, for as long as it lives (a round trip saved per publish)."""
        if lasting:
            with _lasting_lock, contextlib.suppress(TypeError):  # TypeError: no weakref
                found = _lasting.get(connection)
                if found is not None:
                    return found
        known = self._identities.get(id(connection))
        if known is None or known[0] is not connection:
            known = (connection, read(connection))
            self._identities[id(connection)] = known
        if lasting:
            with _lasting_lock, contextlib.suppress(TypeError):
                _lasting[connection] = known[1]
        return known[1]


#: DB-API connection → its database's identity, on engines where a connection stays on
#: one database (not MariaDB: ``USE`` switches it). Weak: a closed connection drops out.
_lasting: weakref.WeakKeyDictionary[Any, Hashable] = weakref.WeakKeyDictionary()
_lasting_lock = threading.Lock()


_current: ContextVar[Enlistment | None] = ContextVar("kombu_sqlqueue_enlistment", default=None)


@contextlib.contextmanager
def enlist(connection: Any = None, *, using: str = "default") -> Iterator[Enlistment]:
    """Write this thread's publishes to the broker's database in ``connection``'s open
    transaction: they commit with it and vanish on its rollback (a savepoint's too).

    ``connection``: a SQLAlchemy ``Connection`` (in a transaction) or ``Session``, a DB-API
    connection (sqlite3, psycopg 3 or 2, PyMySQL, mysqlclient), or None for Django's
    connection ``using`` (inside ``transaction.atomic()``). A connection to another
    database than the broker's is refused at the publish
    (:class:`~kombu_sqlqueue.exceptions.WrongDatabase`), nothing written. Blocks nest: the
    innermost one is used.
    """
    if connection is not None:
        dbapi_connection(connection, using)  # a wrong kind of object: said now, not later
    enlistment = Enlistment(connection, using)
    token = _current.set(enlistment)
    try:
        yield enlistment
    finally:
        enlistment.closed = True
        _current.reset(token)


#: The DB-API connection this thread's task completed a delivery on
#: (``kombu_sqlqueue.complete``), resolved then: its transaction may still be open, holding
#: SQLite's write lock (see :func:`holds_write_lock`). A strong reference (sqlite3's
#: connections take no weak one): one per thread, a pooled connection anyway.
_completed_on: ContextVar[tuple[int, Any] | None] = ContextVar(
    "kombu_sqlqueue_completed_on", default=None
)


def note_completed(enlistment: Enlistment) -> None:
    """Remember the connection this thread completed a delivery on (``enlistment``'s)."""
    connection = enlistment.connection()
    if connection is not None:
        _completed_on.set((threading.get_ident(), connection))


def holds_write_lock(store: Joinable, enlistment: Enlistment | None) -> bool:
    """Whether this thread has a transaction open on ``store``'s database that has written
    there — ``enlistment``'s (an ``enlist`` block) or the one it completed a delivery in —
    so that on a one-writer engine (SQLite) a write on another connection would wait for it
    until the busy timeout ran out. Reads ``in_transaction`` (sqlite3's: true once the
    transaction wrote); a connection closed since is not holding anything."""
    candidates: list[Any] = []
    if enlistment is not None and not enlistment.closed:
        with contextlib.suppress(Exception):  # a source closed since: nothing held
            candidates.append(enlistment.connection())
    completed = _completed_on.get()
    if completed is not None and completed[0] == threading.get_ident():
        candidates.append(completed[1])
    for connection in candidates:
        try:
            if not connection.in_transaction:
                continue
            if store.joined(Enlistment(connection)) is not None:  # else WrongDatabase
                return True
        except WrongDatabase:
            continue
        except Exception:  # closed, or no such attribute (another driver): not held here
            continue
    return False


def current() -> Enlistment | None:
    """The innermost open enlistment of this thread or task, if any."""
    found = _current.get()
    if found is None or found.closed or found.thread != threading.get_ident():
        return None
    return found


J = TypeVar("J", bound="Joinable")


class Joinable(Protocol):
    def joined(self, enlistment: Enlistment) -> Any: ...


def joined_or_own(store: J, enlistment: Enlistment | None) -> J:
    """``store`` writing in ``enlistment``'s transaction, or ``store`` itself when there is
    none to join. A store that cannot join one (a third-party queue format's) is refused."""
    if enlistment is None:
        return store
    joined = getattr(store, "joined", None)
    if joined is None:
        raise EnlistError(
            f"{type(store).__name__} cannot write in your transaction (it has no joined()): "
            "publish to this queue outside enlist()"
        )
    view = joined(enlistment)
    return store if view is None else cast("J", view)


class HasStore(Protocol):
    store: Any


H = TypeVar("H", bound=HasStore)


def with_joined_store(owner: H, enlistment: Enlistment) -> H | None:
    """A copy of ``owner`` whose ``store`` writes in ``enlistment``'s transaction (a table
    wrapping a store, joined as the store is); None when there is none to join."""
    store = owner.store.joined(enlistment)
    if store is None:
        return None
    view = copy.copy(owner)
    view.store = store
    return view


def active(django_atomic: str | None) -> Enlistment | None:
    """The enlistment a publish made now joins: the innermost ``enlist`` block, else —
    with ``django_atomic`` (a Django database alias) — Django's ``atomic()`` block."""
    return current() or (django_enlistment(django_atomic) if django_atomic else None)


def django_enlistment(using: str) -> Enlistment | None:
    """Django's connection ``using`` as an enlistment while it is inside
    ``transaction.atomic()`` (the transport option ``django_atomic``); None when Django is
    not loaded or not configured, or the connection is in autocommit."""
    db = sys.modules.get("django.db")
    if db is None:
        return None
    try:
        conn = db.connections[using]
        in_atomic = bool(conn.in_atomic_block)
    except Exception:  # not configured, unknown alias: nothing to join
        return None
    return Enlistment(None, using) if in_atomic else None


def dbapi_connection(source: Any, using: str = "default") -> Any | None:
    """The DB-API connection under ``source`` whose transaction a publish joins, or None
    when ``source`` has no transaction open to join."""
    if source is None:
        return _django_connection(using)
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session  # here: the ORM is loaded only by those who enlist

    if isinstance(source, Session):
        source = source.connection()  # the session's transaction begins here if not yet
    if isinstance(source, Connection):
        if not source.in_transaction():
            return None
        return source.connection.dbapi_connection
    if callable(getattr(source, "cursor", None)) and callable(getattr(source, "commit", None)):
        return source  # a DB-API connection: its own autocommit setting decides
    raise EnlistError(
        f"enlist() takes a SQLAlchemy Connection or Session, a DB-API connection (sqlite3, "
        f"psycopg, PyMySQL, mysqlclient) or None for Django's; got {type(source).__name__}"
    )


def _django_connection(using: str) -> Any | None:
    try:
        from django.db import connections
    except ImportError as exc:
        raise EnlistError(
            "enlist() with no connection joins Django's: Django is not installed; pass your "
            "SQLAlchemy Connection or Session, or a DB-API connection"
        ) from exc
    conn = connections[using]
    if not conn.in_atomic_block:
        return None  # Django's autocommit: written at once, as without enlist
    conn.ensure_connection()
    return conn.connection


class CallerExecutor:
    """Runs a store's work on the caller's DB-API connection, in the caller's transaction:
    the store's compiled statements, no BEGIN or COMMIT of ours. Errors of the caller's
    driver (which may not be ours) are wrapped into :class:`StoreError`."""

    def __init__(self, executor: Executor, connection: Any) -> None:
        self._executor = executor  # compiles for the store's engine
        self._connection = connection

    def run(self, work: Callable[[Tx], T], *, write: bool = True, single: bool = False) -> T:
        cursor = self._connection.cursor()
        try:
            return work(Tx(self._executor, cursor))
        except SqlQueueError:
            raise
        except Exception as exc:
            raise StoreError(
                f"writing in your transaction failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                cursor.close()


__all__ = [
    "CallerExecutor",
    "Enlistment",
    "active",
    "current",
    "django_enlistment",
    "enlist",
]
