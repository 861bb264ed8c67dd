"""The one place SQL is executed: compiled statements on pooled DBAPI connections.

SQLAlchemy Core builds every statement and compiles it for the engine's
dialect (once, for the fixed named queries); this executor runs the compiled
text on a DBAPI connection taken from SQLAlchemy's pool, and owns the
transaction. Why not ``Connection.execute``: measured on SQLite, SQLAlchemy's
per-call machinery costs ~100 µs against ~45 µs for the whole
BEGIN/INSERT/COMMIT, and publish and ack are one transaction each, so that
overhead would halve the broker's throughput.

Driver errors are wrapped here into :mod:`kombu_sqlqueue.exceptions`.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa

from ..exceptions import (
    MessageTooLarge,
    StoreBusyError,
    StoreConditionError,
    StoreConnectionError,
    StoreError,
    StoreFullError,
    StorePermissionError,
    StoreReadOnlyError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Every statement is logged at DEBUG (its SQL, never its parameters).
_debug = partial(logger.isEnabledFor, logging.DEBUG)

_PYFORMAT = re.compile(r"%\((\w+)\)s")

#: How often a transaction that found the database locked (past the driver's
#: own busy wait) is tried again before :class:`StoreBusyError` is raised.
BUSY_RETRIES = 5

#: What an operator can do about each condition (MessageTooLarge: the engine says).
_CONDITION_ADVICE: dict[type[StoreConditionError], str] = {
    StoreFullError: (
        "the database is full: free space on the disk holding it (or raise its size "
        "limit); nothing was written, and consumers resume by themselves once there is room"
    ),
    StoreReadOnlyError: (
        "the database is read-only: make the file and its directory writable by this user, "
        "remount read-write, or point the URL at the primary rather than a replica"
    ),
    StorePermissionError: (
        "access was refused: check that the file and its directory exist and are writable by "
        "this user, or grant the database user the privilege"
    ),
}


class ConnectionHooks(Protocol):
    """What the executor asks of an engine (``store/engines/``): how to set up a
    connection and run a transaction on it, and what a driver error means."""

    def prepare_connection(self, conn: Any) -> None: ...
    def make_room(self, conn: Any, cursor: Any) -> None: ...
    def begin(self, conn: Any, cursor: Any, write: bool, single: bool) -> None: ...
    def commit(self, conn: Any, cursor: Any, single: bool) -> None: ...
    def rollback(self, conn: Any, cursor: Any, single: bool) -> None: ...
    def schema_lock(self, conn: sa.Connection) -> AbstractContextManager[None]: ...
    def condition_error(self, exc: BaseException) -> type[StoreConditionError] | None: ...
    def is_busy_error(self, exc: BaseException) -> bool: ...
    def is_connection_error(self, exc: BaseException) -> bool: ...
    def payload_limit_hint(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement compiled for one dialect: its SQL and how to order its parameters."""

    sql: str
    positional: tuple[str, ...] | None
    #: Values bound into the statement when it was built (a LIMIT's OFFSET 0 …).
    defaults: Mapping[str, Any]
    #: The statement compiled: kept alive while its id is a cache key.
    source: object = None

    def args(self, params: Mapping[str, Any]) -> Any:
        if self.defaults:
            params = {**self.defaults, **params}
        if self.positional is None:
            return dict(params)
        return tuple(params[name] for name in self.positional)


class Tx:
    """One open transaction; ``execute`` returns the DBAPI cursor."""

    def __init__(self, executor: Executor, cursor: Any) -> None:
        self._executor = executor
        self.cursor = cursor

    def execute(
        self,
        stmt: sa.Executable | Callable[[], sa.Executable],
        params: Mapping[str, Any] | None = None,
        *,
        key: Hashable | None = None,
    ) -> Any:
        """Run a named statement with ``params``, compiling it once per database.

        A statement built on demand is passed as a zero-argument builder
        together with the ``key`` its compiled form is cached under.
        """
        compiled = self._executor.compiled(stmt, key)
        if _debug():
            logger.debug("SQL %s", compiled.sql)
        self.cursor.execute(compiled.sql, compiled.args(params or {}))
        return self.cursor

    def execute_bound(self, stmt: sa.Executable, params: Mapping[str, Any]) -> Any:
        """Run ``stmt`` with ``params``, whose lists fill its expanding ``IN :name`` lists.

        The SQL is derived from the statement's cached compiled form once per list length
        (SQLAlchemy compiling it anew for every call cost ~200 µs per message on MariaDB,
        whose ack and claim each run one, measured with py-spy)."""
        one = self._executor.compiled(stmt)
        lists = {k: v for k, v in params.items() if isinstance(v, (list, tuple))}
        if not all(lists.values()):  # an empty IN list: SQLAlchemy's own rendering of it
            return self.execute_rendered(stmt.bindparams(**params))  # type: ignore[attr-defined]
        key = ("in", id(stmt), tuple((k, len(v)) for k, v in lists.items()))
        sql = self._executor.text_cache.get(key)
        if sql is None:
            sql = one.sql
            mark = self._executor.dialect.paramstyle
            for name, values in lists.items():
                if one.positional is None:  # pyformat: one named parameter per element
                    spelled = ", ".join(f"%({name}_{i})s" for i in range(len(values)))
                else:
                    spelled = ", ".join(["?" if mark == "qmark" else "%s"] * len(values))
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", spelled)
            self._executor.text_cache[key] = sql
        args: Any
        if one.positional is None:
            args = {**one.defaults, **{k: v for k, v in params.items() if k not in lists}}
            for name, values in lists.items():
                args.update({f"{name}_{i}": value for i, value in enumerate(values)})
        else:
            given = {**one.defaults, **params}
            args = tuple(
                value
                for name in one.positional
                for value in (given[name] if name in lists else (given[name],))
            )
        if _debug():
            logger.debug("SQL %s", sql)
        self.cursor.execute(sql, args)
        return self.cursor

    def execute_rendered(self, stmt: sa.Executable) -> Any:
        """Run a statement whose values are bound into it, compiled for this call."""
        compiled = stmt.compile(  # type: ignore[attr-defined]
            dialect=self._executor.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = compiled.params
        positiontup = getattr(compiled, "positiontup", None)
        args: Any = tuple(params[n] for n in positiontup) if positiontup else params
        if _debug():
            logger.debug("SQL %s", compiled.string)
        self.cursor.execute(compiled.string, args)
        return self.cursor

    def execute_values(self, stmt: sa.Executable, rows: Sequence[Mapping[str, Any]]) -> Any:
        """Run the one-row ``INSERT … VALUES (…)`` ``stmt`` for all ``rows`` as one multi-row
        INSERT (positional-parameter drivers: sqlite3, PyMySQL).

        Why not a Core multi-row ``values([...])``: compiling one of 1,000 rows takes
        SQLAlchemy ~70 ms, while its VALUES group is the one-row group repeated.
        """
        one = self._executor.compiled(stmt)
        head, sep, group = one.sql.rpartition(" VALUES ")
        if not sep:
            raise StoreError("execute_values needs a one-row INSERT … VALUES statement")
        key = ("values", id(stmt), len(rows))
        sql = self._executor.text_cache.get(key)
        args: Any
        if one.positional is not None:  # qmark/format: the same group, arguments in order
            if sql is None:
                sql = head + sep + ", ".join([group] * len(rows))
            names = one.positional
            args = tuple(row[name] for row in rows for name in names)
        else:  # pyformat: each row's group names its own parameters (%(queue_7)s)
            if sql is None:
                sql = (
                    head
                    + sep
                    + ", ".join(_PYFORMAT.sub(rf"%(\1_{i})s", group) for i in range(len(rows)))
                )
            args = {f"{k}_{i}": v for i, row in enumerate(rows) for k, v in row.items()}
        self._executor.text_cache[key] = sql
        if _debug():
            logger.debug("SQL %s … (%d rows)", one.sql, len(rows))
        self.cursor.execute(sql, args)
        return self.cursor

    def rows(self) -> list[dict[str, Any]]:
        """Fetch the remaining rows as dicts keyed by column name."""
        names = [d[0] for d in self.cursor.description]
        return [dict(zip(names, row, strict=True)) for row in self.cursor.fetchall()]


class Executor:
    """Owns the connections and transactions of one database (shared by the stores
    opened on it: see :class:`~.database.Database`).

    Thread-safe: a transaction takes an idle connection (or a new one from
    SQLAlchemy's pool) and gives it back afterwards.
    """

    def __init__(
        self, engine: ConnectionHooks, db: sa.Engine, describe: str, reconnect_timeout: float = 60.0
    ) -> None:
        self.engine = engine
        self.reconnect_timeout = reconnect_timeout
        self._connected_once = False
        self.db = db
        self.dialect = db.dialect
        #: The database as error messages name it (its URL, password hidden).
        self.describe = describe
        self._cache: dict[Hashable, Compiled] = {}
        #: SQL text derived from compiled statements (multi-row VALUES), by key.
        self.text_cache: dict[Hashable, str] = {}
        self._idle: list[tuple[Any, Any]] = []
        #: close() starts a new generation; a connection of an older one is not pooled again.
        self._generation = 0
        #: id of each open DBAPI connection -> the generation it was opened in.
        self._born: dict[int, int] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # Connections inherited over fork are never used, nor closed, by the child.
        self._orphans: list[tuple[Any, Any]] = []

    def compiled(
        self, stmt: sa.Executable | Callable[[], sa.Executable], key: Hashable | None = None
    ) -> Compiled:
        """The cached compiled form of ``stmt``.

        Keyed by the statement's id, and the entry keeps the statement alive: statements
        built per store (a layout's, per table pair) on a shared :class:`~.database.Database`
        must not hand their id, and so their SQL, to a later store's statement.
        """
        cache_key = id(stmt) if key is None else key
        found = self._cache.get(cache_key)
        if found is None:
            if key is not None and callable(stmt):
                stmt = stmt()
            c = stmt.compile(dialect=self.dialect)  # type: ignore[union-attr]
            positiontup = getattr(c, "positiontup", None)
            defaults = {k: v for k, v in c.params.items() if v is not None}
            found = Compiled(c.string, tuple(positiontup) if positiontup else None, defaults, stmt)
            self._cache[cache_key] = found
        return found

    def _checkout(self) -> tuple[Any, Any]:
        with self._lock:
            if self._pid != os.getpid():
                # Forked: the parent's connections (ours and the pool's) stay the parent's.
                self._orphans.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
                self.db.dispose(close=False)
            if self._idle:
                return self._idle.pop()
            generation = self._generation
        fairy = self.db.raw_connection()
        self.engine.prepare_connection(fairy)
        self._born[id(fairy)] = generation
        return fairy, fairy.cursor()

    def _checkin(self, conn: tuple[Any, Any]) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            if self._born.get(id(conn[0])) == self._generation:
                self._idle.append(conn)
                return
        # Checked out before close() (a renewal thread mid-transaction while the transport
        # closed): close it now, or it would be left open, pooled by nobody.
        self._close_connection(conn)

    def _close_connection(self, conn: tuple[Any, Any]) -> None:
        fairy, cursor = conn
        self._born.pop(id(fairy), None)
        try:
            cursor.close()
            fairy.close()
        except Exception:
            logger.debug("closing a connection failed", exc_info=True)

    def _discard(self, conn: tuple[Any, Any]) -> None:
        fairy, _cursor = conn
        self._born.pop(id(fairy), None)
        try:
            fairy.invalidate()
        except Exception:  # already broken; nothing more to release
            logger.debug("invalidating a broken connection failed", exc_info=True)

    @contextmanager
    def _wrapped(self) -> Iterator[None]:
        dbapi_error = self.dialect.loaded_dbapi.Error
        try:
            yield
        except dbapi_error as exc:
            raise self.wrap(exc) from exc
        except sa.exc.DBAPIError as exc:
            raise self.wrap(exc.orig or exc) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc}") from exc

    @contextmanager
    def sa_errors(self) -> Iterator[None]:
        """Wrap errors of the SQLAlchemy connections a store uses for schema work."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            raise self.wrap(exc.orig or exc) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc}") from exc

    def run_schema(self, work: Callable[[sa.Connection], None]) -> None:
        """Run schema work (``CREATE TABLE``…) in one SQLAlchemy transaction under the
        engine's schema lock, so processes starting at once do not collide; retried while
        the database is busy."""
        for attempt in range(BUSY_RETRIES + 1):
            try:
                with self.sa_errors(), self.db.begin() as conn, self.engine.schema_lock(conn):
                    work(conn)
                return
            except StoreBusyError:
                if attempt == BUSY_RETRIES:
                    raise
                time.sleep(0.05 * 2**attempt)

    def wrap(self, exc: BaseException) -> StoreError:
        """Our exception for a driver error."""
        condition = self.engine.condition_error(exc)
        if condition is not None:
            advice = _CONDITION_ADVICE.get(condition) or self.engine.payload_limit_hint()
            return condition(f"database {self.describe}: {exc} — {advice}")
        if self.engine.is_busy_error(exc):
            return StoreBusyError(f"database {self.describe} stayed locked: {exc}")
        if self.engine.is_connection_error(exc):
            return StoreConnectionError(f"database {self.describe} connection failed: {exc}")
        return StoreError(f"database error on {self.describe}: {exc}")

    def run(self, work: Callable[[Tx], T], *, write: bool = True, single: bool = False) -> T:
        """Run ``work`` in one transaction.

        ``single`` says ``work`` is one statement, which server engines run
        without BEGIN/COMMIT round trips. Retried when the database is busy
        (a bounded number of times), and when
        a connection that used to work is lost (a server restart, a failover):
        then for up to ``reconnect_timeout`` seconds, with back-off. A lost
        connection during COMMIT leaves the outcome unknown, so a retried
        enqueue may store a job twice — at-least-once, like any broker.
        """
        busy = 0
        reconnect_deadline: float | None = None
        pause = 0.1
        while True:
            try:
                result = self._run_once(work, write, single)
                self._connected_once = True
                return result
            except StoreBusyError:
                if busy == BUSY_RETRIES:
                    raise
                busy += 1
                # Routine under contention (a MySQL deadlock, a lock wait): not worth a warning
                # until it keeps happening.
                level = logging.WARNING if busy >= 3 else logging.DEBUG
                logger.log(level, "database busy; retrying (%d of %d)", busy, BUSY_RETRIES)
                time.sleep(min(0.05 * 2 ** (busy - 1), 1.0))
            except StoreConnectionError as exc:
                if not self._connected_once or self.reconnect_timeout <= 0:
                    raise
                now = time.monotonic()
                if reconnect_deadline is None:
                    reconnect_deadline = now + self.reconnect_timeout
                    logger.warning("database connection lost (%s); reconnecting", exc)
                if now >= reconnect_deadline:
                    raise
                self._drop_idle()
                time.sleep(min(pause, reconnect_deadline - now))
                pause = min(pause * 2, 2.0)

    def _drop_idle(self) -> None:
        """Forget idle connections: after one was lost, the rest likely were too."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)

    def _run_once(self, work: Callable[[Tx], T], write: bool, single: bool) -> T:
        with self._wrapped():
            conn = self._checkout()
        fairy, cursor = conn
        try:
            with self._wrapped():
                self.engine.begin(fairy, cursor, write, single)
                try:
                    result = work(Tx(self, cursor))
                    self.engine.commit(fairy, cursor, single)
                except BaseException:
                    self._rollback_quietly(fairy, cursor, single)
                    raise
        except StoreError as exc:
            # A connection error leaves the connection unusable; so does an oversized
            # statement on MySQL (the server drops the connection after refusing it).
            if isinstance(exc, MessageTooLarge) or (
                isinstance(exc, StoreConnectionError) and not isinstance(exc, StoreBusyError)
            ):
                self._discard(conn)
            else:
                if isinstance(exc, StoreFullError):
                    self._make_room(fairy, cursor)
                self._checkin(conn)
            raise
        except Exception:
            self._checkin(conn)
            raise
        except BaseException:
            # Interrupted mid-statement (KeyboardInterrupt, a job's timeout): the driver may
            # be half-way through a reply, so the connection is not reused.
            self._discard(conn)
            raise
        self._checkin(conn)
        return result

    def _make_room(self, fairy: Any, cursor: Any) -> None:
        """After a full disk refused a write: the engine frees what it can (SQLite: its WAL),
        so the space an operator frees is enough for the writes to go on."""
        try:
            self.engine.make_room(fairy, cursor)
        except Exception:  # still no room: the refused write's error is the one to raise
            logger.debug("making room after a full disk failed", exc_info=True)

    def _rollback_quietly(self, fairy: Any, cursor: Any, single: bool) -> None:
        try:
            self.engine.rollback(fairy, cursor, single)
        except Exception:  # the connection may be gone; the error that got us here matters
            logger.debug("rollback failed", exc_info=True)

    def close(self) -> None:
        """Close idle connections and the pool; connections in use are closed when they
        come back. The executor stays usable (a later transaction opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            self._close_connection(conn)
        self.db.dispose()
