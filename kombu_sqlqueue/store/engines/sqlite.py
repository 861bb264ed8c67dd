"""SQLite: one file shared by many processes.

Overrides, each for a reason:

* connection setup: WAL (readers never block the writer), a busy timeout (a
  writer waits for the lock instead of failing), ``synchronous`` as the
  durability option;
* transactions: the driver runs in autocommit mode and we issue ``BEGIN
  IMMEDIATE`` for writes ourselves, because a deferred transaction that reads
  then writes can fail with "database is locked" at its first write with no
  busy wait at all (the lock upgrade would deadlock); reads use a plain
  ``BEGIN``;
* busy errors: "database is locked" is retried by the store;
* a text column a layout reads back comes as its bytes and storage class
  (``SQLiteQueries.text_read``): SQLite keeps a BLOB or non-UTF-8 bytes in one;
* a claim looks before it takes the write lock (``claim_peeks_first``), and idle
  consumers wake on the file's commit counter (``SQLiteListener``): SQLite has one
  write lock for the whole file, which an empty poll must not take from a producer.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL

from ...exceptions import (
    InvalidURL,
    StoreConditionError,
    StoreFullError,
    StorePermissionError,
    StoreReadOnlyError,
)
from .base import READ_ONLY, BaseEngine, Listener, Queries, check_choice

if TYPE_CHECKING:
    from ..executor import Tx

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
#: ``PRAGMA synchronous`` per mode, written out: a PRAGMA takes no bound parameter.
_SYNCHRONOUS_PRAGMA = {
    "OFF": "PRAGMA synchronous = OFF",
    "NORMAL": "PRAGMA synchronous = NORMAL",
    "FULL": "PRAGMA synchronous = FULL",
    "EXTRA": "PRAGMA synchronous = EXTRA",
}

#: SQLite primary result codes that are a condition of the file, not a lost connection.
#: (SQLITE_CANTOPEN is not one: too many open files or a full temp directory pass.)
_CONDITIONS: dict[int, type[StoreConditionError]] = {
    sqlite3.SQLITE_FULL: StoreFullError,  # "database or disk is full" (or max_page_count)
    sqlite3.SQLITE_READONLY: StoreReadOnlyError,  # "attempt to write a readonly database"
    sqlite3.SQLITE_PERM: StorePermissionError,  # "access permission denied"
}
#: Extended read-only codes that pass by themselves (another process is recovering the
#: WAL, or holds a lock a moment): retried as before, not reported as a read-only file.
_PASSING = frozenset(
    getattr(sqlite3, name, -1)
    for name in ("SQLITE_READONLY_RECOVERY", "SQLITE_READONLY_CANTLOCK", "SQLITE_READONLY_ROLLBACK")
)


class SQLiteQueries(Queries):
    now_sql: ClassVar[str] = "(unixepoch())"
    # The host's clock (SQLite has no server), to the millisecond.
    clock_us = sa.text("SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)")

    # A claim is a write transaction (BEGIN IMMEDIATE), and SQLite has one write lock for
    # the whole file: idle consumers polling an empty queue took it from the producer in
    # turn (measured: 0.75x huey, which reads first). A read (WAL: never waits for the
    # writer, never blocks it) says whether anything is ready; only then is the lock taken.
    claim_peeks_first: ClassVar[bool] = True

    # The file the connection's main database is, by device and inode: two paths to one
    # file (a symlink, a relative path) are the same database, a copy is not.
    database_identity = sa.text("PRAGMA database_list")

    @classmethod
    def identity_of(cls, tx: Tx) -> Hashable:
        rows = tx.execute(cls.database_identity).fetchall()
        path = next((r[2] for r in rows if r[1] == "main"), "")
        if not path:
            return ("sqlite", "temporary or in-memory", id(tx.cursor.connection))
        try:
            found = os.stat(path)
        except OSError:  # gone, or not ours to read: not a database we can prove is ours
            return ("sqlite", "unreadable", path)
        return ("sqlite", found.st_dev, found.st_ino)

    # SQLite stores whatever it is given: a TEXT column can hold a BLOB, or text that is
    # not UTF-8 (a PHP app writing raw bytes). Python's sqlite3 then fails the whole read
    # ("Could not decode to UTF-8 column 'payload'") before the reader sees the row, and
    # every claim of the queue stops there. So a text column is read as its bytes and its
    # storage class, and handed back as text only when it is UTF-8 text; anything else
    # comes back as bytes, for the reader to settle the row with the bytes as stored (a
    # BLOB value written back into a text column keeps them byte for byte).
    # PostgreSQL and MariaDB/MySQL (utf8mb4, strict mode) refuse invalid UTF-8 in a text
    # column at INSERT, and have no BLOB in a TEXT column, so they need no such read.
    @staticmethod
    def text_read(column: Any) -> list[Any]:
        return [
            sa.cast(column, sa.LargeBinary).label(column.name),
            sa.func.typeof(column).label(f"{column.name}_type"),
        ]

    @staticmethod
    def text_value(found: Sequence[Any]) -> str | bytes:
        raw, kind = found
        raw = bytes(raw)
        if kind == "text":
            try:
                return str(raw.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        return raw


class SQLiteEngine(BaseEngine):
    """The embedded default engine."""

    name: ClassVar[str] = "sqlite"
    default_driver: ClassVar[str] = "pysqlite"
    queries: ClassVar[type[Queries]] = SQLiteQueries
    # SQLite locks the whole file for a write: while an application's transaction holds
    # it, no other connection of ours can write.
    single_writer: ClassVar[bool] = True
    dbapi_modules: ClassVar[tuple[str, ...]] = ("sqlite3",)

    @classmethod
    def check_options(cls, options: Any) -> None:
        given = options.sqlite_synchronous
        check_choice("sqlite_synchronous", str(given).upper(), SYNCHRONOUS_MODES, given)

    def normalize_url(self, url: URL) -> URL:
        url = super().normalize_url(url)
        if url.host:  # sqlite://tmp/q.db: SQLAlchemy's own error would not say which was meant
            path = "/".join(p for p in (url.host, url.database) if p)
            raise InvalidURL(
                f"an SQLite URL names no host: 'sqlite://{path}' has {url.host!r} where "
                f"a third slash belongs; did you mean sqlqueue+sqlite:////{path} (absolute) or "
                f"sqlqueue+sqlite:///{path} (relative to the working directory)?"
            )
        if not url.database or url.database == ":memory:":
            raise InvalidURL(
                "an in-memory SQLite database cannot be shared between connections or "
                "processes; give a file path, e.g. sqlqueue+sqlite:///queue.db"
            )
        return url

    def create_engine(self, url: URL, options: Any) -> sa.Engine:
        synchronous = _SYNCHRONOUS_PRAGMA[str(options.sqlite_synchronous).upper()]
        engine = sa.create_engine(
            url,
            # sqlite3's timeout is SQLite's busy timeout, set as the file opens: switching
            # to WAL below needs a lock that another process creating the file may hold.
            connect_args={"timeout": options.busy_timeout, "check_same_thread": False},
            # The store keeps what it checks out; one connection per concurrent caller.
            pool_size=4,
            max_overflow=-1,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
            # Autocommit at the driver: we issue BEGIN ourselves (below).
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(synchronous)
            cursor.close()

        # Schema work goes through SQLAlchemy connections: serialize it too.
        @event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            # A schema read (``READ_ONLY``) takes no write lock: it must not wait for an
            # application whose open write transaction a publish is enlisted in.
            read_only = conn.get_execution_options().get(READ_ONLY)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine

    def begin(self, conn: Any, cursor: Any, write: bool, single: bool) -> None:
        # One statement (a publish, an ack, an empty-queue peek) is its own transaction:
        # SQLite runs a lone statement atomically, and a writing one takes the write lock
        # when it starts, as BEGIN IMMEDIATE would (a single statement cannot read first
        # and upgrade later, the deadlock IMMEDIATE exists to avoid). It saves two calls
        # into SQLite per message: a publish is a quarter cheaper in CPU.
        if write and self.wal_to_checkpoint:
            # Still full: the write says so, or gets through.
            with contextlib.suppress(sqlite3.Error):
                self.checkpoint_wal(cursor)
        if not single:
            cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self, conn: Any, cursor: Any, single: bool) -> None:
        if not single:
            cursor.execute("COMMIT")

    def rollback(self, conn: Any, cursor: Any, single: bool) -> None:
        if conn.in_transaction:
            cursor.execute("ROLLBACK")

    def listener(self, url: URL, options: Any) -> Listener | None:
        return SQLiteListener(url.database or "")

    # SQLite's own limit on a string or BLOB (SQLITE_MAX_LENGTH as compiled into Python's
    # sqlite3); read from the first connection.
    max_payload_bytes: int = 1_000_000_000

    def prepare_connection(self, conn: Any) -> None:
        driver = conn.driver_connection
        self.max_payload_bytes = int(driver.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)) - 1024

    def payload_limit_hint(self) -> str:
        return "SQLite's SQLITE_MAX_LENGTH, compiled into the sqlite3 library"

    #: The WAL may hold what a full disk left in it: checkpoint before the next write.
    #: True at start (a process may open a file left so) and after a refused write;
    #: cleared by a checkpoint that copied the whole WAL into the file.
    wal_to_checkpoint: bool = True
    #: A refused write: once the WAL is copied, give its space back (truncate it).
    wal_to_truncate: bool = False

    def make_room(self, conn: Any, cursor: Any) -> None:
        # Every write goes to the WAL first, and the WAL only shrinks at a checkpoint,
        # which SQLite runs by itself only at 1,000 pages (~4 MB). On a disk that filled,
        # the jobs may all be in the WAL; once space is freed, each write appends to the
        # WAL (a claim rewrites its rows) until the disk is full again, and then no
        # checkpoint fits either: measured, 372 refused claims in 180 s, 12 jobs unrun.
        # So after a refused write, and before the first write of a store, the WAL is
        # copied into the file first (``checkpoint_wal``): that needs room for the live
        # pages only, i.e. once as much as the WAL holds has been freed; then the WAL is
        # written from its start again instead of growing, and after a refusal it is
        # truncated too. The normal path pays one flag test per write.
        self.wal_to_checkpoint = self.wal_to_truncate = True
        self.checkpoint_wal(cursor)

    def checkpoint_wal(self, cursor: Any) -> None:
        """Copy the WAL into the file (PASSIVE: never waits for others' locks, copies what
        no reader still needs), then, after a refused write, truncate it (if no one is
        using it at that moment: the busy wait is turned off for it). A checkpoint that
        could not copy everything (still no room, a reader on old pages) is tried again
        before the next write."""
        busy, log, copied = cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or log != copied:
            return
        self.wal_to_checkpoint = False
        if self.wal_to_truncate:
            self.wal_to_truncate = False
            busy_ms = int(cursor.execute("PRAGMA busy_timeout").fetchone()[0])
            cursor.execute("PRAGMA busy_timeout = 0")
            try:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")

    def condition_error(self, exc: BaseException) -> type[StoreConditionError] | None:
        # By SQLite's primary result code (extended codes keep it in the low byte).
        code = getattr(exc, "sqlite_errorcode", None)
        if not isinstance(exc, sqlite3.Error) or code is None or code in _PASSING:
            return None
        return _CONDITIONS.get(code & 0xFF)

    def is_busy_error(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc)
        )

    def is_connection_error(self, exc: BaseException) -> bool:
        # "disk I/O error", "unable to open database file": the file is unusable
        # through this connection. (A corrupt file is a DatabaseError: not this.)
        return isinstance(exc, sqlite3.OperationalError)


#: A waiting consumer reads the commit counter this often at first, then less often
#: while nothing commits, up to :data:`WAKE_CHECK_MAX` (each read ~3 us: no lock, no I/O).
WAKE_CHECK_FIRST = 0.001
WAKE_CHECK_MAX = 0.010


class SQLiteListener(Listener):
    """Idle consumers' wake-up on SQLite: the file's commit counter.

    SQLite is one machine, and every commit to the file — a publish from any process —
    changes ``PRAGMA data_version`` as seen by every other connection (it is read from
    the WAL index in shared memory: no lock, no disk read). A waiting consumer reads it
    every few milliseconds and wakes when it moved, so consumers neither sleep through a
    burst nor poll the table (whose claim would need the write lock). It wakes on any
    commit (an ack, another table of the same file): the claim after it only looks
    (``claim_peeks_first``). The counter last seen is kept between waits, so a commit
    made between a consumer's empty claim and its next wait ends that wait at once.
    Nothing can be lost by it: a wait that sees no change still ends at its timeout and
    the consumer claims again, as when polled.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None
        #: Set by :meth:`interrupt`; taken by the wait it ends.
        self._interrupted = threading.Event()

    def _version(self) -> int | None:
        """The file's commit counter, or None when it cannot be read (then: a plain sleep)."""
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(
                    self.path, timeout=0.1, isolation_level=None, check_same_thread=False
                )
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self.close()
            return None

    def wait(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        deadline = time.monotonic() + seconds
        seen = self._version()
        if seen is None:
            self._sleep(seconds)
            return False
        if self._seen is not None and seen != self._seen:
            self._seen = seen
            return True
        self._seen = seen
        pause = WAKE_CHECK_FIRST
        while (left := deadline - time.monotonic()) > 0:
            if self._sleep(min(pause, left)):
                return False
            pause = min(pause * 2, WAKE_CHECK_MAX)
            now = self._version()
            if now is None:
                self._sleep(deadline - time.monotonic())
                return False
            if now != seen:
                self._seen = now
                return True
        return False

    def _sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True (the interrupt taken) when :meth:`interrupt` ended it."""
        if self._interrupted.wait(max(0.0, seconds)):
            self._interrupted.clear()
            return True
        return False

    def interrupt(self) -> None:
        self._interrupted.set()

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(sqlite3.Error):
                conn.close()
