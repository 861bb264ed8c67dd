"""Laravel's own database queue tables (``jobs``, ``failed_jobs``) with Laravel's semantics.

This is the SQL of ``laravel_bridge``'s ``laravel`` layout: a Python worker and
``php artisan queue:work`` share one ``jobs`` table, and failures land in
``failed_jobs`` where ``queue:failed`` and ``queue:retry`` find them. The rules
are those of ``Illuminate\\Queue\\DatabaseQueue`` (Laravel 8.83):

* a job is ready when ``reserved_at IS NULL AND available_at <= now``, or when
  its reservation is older than ``retry_after`` (``reserved_at <= now - retry_after``);
  the oldest id goes first; the row is locked ``FOR UPDATE SKIP LOCKED``;
* the reservation writes ``reserved_at = now`` and counts the attempt
  (``attempts + 1``);
* a release deletes the row and inserts the same payload and attempts again;
* a failure deletes the row and writes ``failed_jobs`` as Laravel's
  ``DatabaseUuidFailedJobProvider`` does.

One difference, on purpose: Laravel deletes and releases by id alone, so a
worker whose reservation lapsed and was taken over can delete the new holder's
job. Here every settlement also matches the ``attempts`` value its reservation
wrote — each reservation increments it, so a takeover changes it — and a stale
settlement writes nothing (seed 004's fencing). Laravel's own workers keep
Laravel's behaviour.

Table names are configurable (Laravel's ``queue.connections.database.table``
and ``queue.failed.table``), so statements are built per store with SQLAlchemy
Core; the ``Executor`` compiles each once.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from ..exceptions import ConfigurationError, SchemaMismatch
from .executor import Tx
from .names import validate_queue_name
from .store import StoreOptions, open_database

T = TypeVar("T")

#: Laravel's ``jobs.attempts`` is ``unsignedTinyInteger``: 255 is the most it holds.
MAX_LARAVEL_ATTEMPTS = 255

#: Rows per multi-row INSERT in a bulk push (5 parameters a row; far below every
#: engine's bind-parameter limit), and payload bytes per INSERT.
PUSH_CHUNK = 1000
PUSH_CHUNK_BYTES = 4 * 1024 * 1024

# Laravel's longText: TEXT elsewhere, LONGTEXT on MySQL (its TEXT stops at 64 KiB).
_LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Unsigned = sa.Integer().with_variant(mysql.INTEGER(unsigned=True), "mysql", "mariadb")
_Attempts = sa.SmallInteger().with_variant(mysql.TINYINT(unsigned=True), "mysql", "mariadb")


def laravel_tables(jobs: str = "jobs", failed: str = "failed_jobs") -> tuple[sa.Table, sa.Table]:
    """The two tables as Laravel 8's queue migrations create them (``queue:table``,
    ``queue:failed-table``)."""
    metadata = sa.MetaData()
    mysql_opts: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_unicode_ci"}
    jobs_table = sa.Table(
        jobs,
        metadata,
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(255), nullable=False, index=True),
        sa.Column("payload", _LongText, nullable=False),
        sa.Column("attempts", _Attempts, nullable=False),
        sa.Column("reserved_at", _Unsigned, nullable=True),
        sa.Column("available_at", _Unsigned, nullable=False),
        sa.Column("created_at", _Unsigned, nullable=False),
        sqlite_autoincrement=True,
        **mysql_opts,
    )
    failed_table = sa.Table(
        failed,
        metadata,
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(255), nullable=False, unique=True),
        sa.Column("connection", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", _LongText, nullable=False),
        sa.Column("exception", _LongText, nullable=False),
        sa.Column(
            "failed_at", sa.TIMESTAMP, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sqlite_autoincrement=True,
        **mysql_opts,
    )
    return jobs_table, failed_table


def laravel_timestamp(unix: float) -> str:
    """``failed_at`` as Laravel writes ``Date::now()`` with the default UTC app timezone."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class LaravelRow:
    """One reservation of a ``jobs`` row: ``attempts`` already counts it."""

    id: int
    queue: str
    #: The payload as stored: text, or the bytes of a SQLite value that is a BLOB or is not
    #: UTF-8 (see :class:`SQLiteLaravelQueries`). A release or failure writes it back as is.
    payload: str | bytes
    attempts: int
    reserved_at: int


class LaravelQueries:
    """Named statements over one pair of Laravel tables (names differ per app)."""

    def __init__(self, jobs: sa.Table, failed: sa.Table) -> None:
        j = jobs.c
        self.jobs, self.failed = jobs, failed
        ready = sa.or_(
            sa.and_(j.reserved_at.is_(None), j.available_at <= sa.bindparam("now")),
            j.reserved_at <= sa.bindparam("expired"),
        )
        # DatabaseQueue::getNextAvailableJob. SQLAlchemy renders FOR UPDATE SKIP
        # LOCKED on PostgreSQL and MySQL and nothing on SQLite, where BEGIN IMMEDIATE
        # already makes the claim transaction the only writer.
        self.job_pop_lock = (
            sa.select(j.id, j.attempts, j.payload)
            .where(j.queue == sa.bindparam("queue"), ready)
            .order_by(j.id)
            .limit(sa.bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        self.job_pop_mark = (
            sa.update(jobs)
            .where(j.id == sa.bindparam("job_id"))
            # A TINYINT holds 255: a row Laravel left there stays there (not an error that
            # would block every later pop of the queue).
            .values(
                reserved_at=sa.bindparam("now"),
                attempts=sa.case(
                    (j.attempts < MAX_LARAVEL_ATTEMPTS, j.attempts + 1),
                    else_=MAX_LARAVEL_ATTEMPTS,
                ),
            )
        )
        fence = sa.and_(j.id == sa.bindparam("job_id"), j.attempts == sa.bindparam("held"))
        self.job_delete = sa.delete(jobs).where(fence)
        self.job_insert = sa.insert(jobs).values(
            queue=sa.bindparam("queue"),
            attempts=sa.bindparam("attempts"),
            reserved_at=sa.null(),
            available_at=sa.bindparam("available_at"),
            created_at=sa.bindparam("created_at"),
            payload=sa.bindparam("payload"),
        )
        self.job_insert_id = self.job_insert.returning(j.id)
        self.failed_insert = sa.insert(failed).values(
            uuid=sa.bindparam("uuid"),
            connection=sa.bindparam("connection"),
            queue=sa.bindparam("queue"),
            payload=sa.bindparam("payload"),
            exception=sa.bindparam("exception"),
            failed_at=sa.bindparam("failed_at"),
        )
        # DatabaseQueue::size counts every row of the queue, reserved ones too.
        self.queue_size = (
            sa.select(sa.func.count()).select_from(jobs).where(j.queue == sa.bindparam("queue"))
        )
        self.failed_find = sa.select(failed).where(failed.c.uuid == sa.bindparam("uuid"))
        self.failed_forget = sa.delete(failed).where(failed.c.uuid == sa.bindparam("uuid"))
        self.failed_list = sa.select(failed).order_by(failed.c.id.desc())

    def stored_payload(self, found: Sequence[Any]) -> str | bytes:
        """The payload from the columns :attr:`job_pop_lock` selects after id and attempts."""
        (payload,) = found
        return payload if isinstance(payload, str) else bytes(payload)

    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        """Insert one row of ``jobs``; return its id."""
        return int(tx.execute(self.job_insert_id, row).fetchone()[0])

    def insert_jobs(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows of ``jobs`` with one statement."""
        tx.execute_values(self.job_insert, rows)


class SQLiteLaravelQueries(LaravelQueries):
    # SQLite stores whatever it is given: a TEXT column can hold a BLOB, or text that is
    # not UTF-8 (a PHP app writing raw bytes). Python's sqlite3 then fails the whole read
    # ("Could not decode to UTF-8 column 'payload'") before the worker sees the row, and
    # every pop of the queue stops there. So the pop reads the payload's bytes and its
    # storage class, and hands back text only for text that is UTF-8; anything else comes
    # back as bytes, for the worker to fail the row with the bytes as stored (a BLOB value
    # written back into failed_jobs.payload keeps them byte for byte).
    # PostgreSQL and MariaDB/MySQL (utf8mb4, strict mode) refuse invalid UTF-8 in a text
    # column at INSERT, and have no BLOB in a TEXT column, so they need no such read.
    def __init__(self, jobs: sa.Table, failed: sa.Table) -> None:
        super().__init__(jobs, failed)
        j = jobs.c
        self.job_pop_lock = self.job_pop_lock.with_only_columns(
            j.id,
            j.attempts,
            sa.cast(j.payload, sa.LargeBinary).label("payload"),
            sa.func.typeof(j.payload).label("payload_type"),
        )

    def stored_payload(self, found: Sequence[Any]) -> str | bytes:
        raw, kind = found
        raw = bytes(raw)
        if kind == "text":
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return raw


class PostgreSQLLaravelQueries(LaravelQueries):
    def __init__(self, jobs: sa.Table, failed: sa.Table) -> None:
        super().__init__(jobs, failed)
        # Bulk insert as ONE parameter, a JSON array of rows: psycopg re-parses the
        # placeholders of a long statement on every execute (its cache stops at 50
        # parameters) and escapes every element of a text[] array in Python (170 µs for
        # a payload full of quotes); json.dumps is C and PostgreSQL parses JSON fast.
        # The table name is a checked identifier (letters, digits, underscores), quoted.
        table = postgresql.dialect().identifier_preparer.quote(jobs.name)  # type: ignore[no-untyped-call]
        self.job_insert_json = sa.text(
            f"""
            INSERT INTO {table} (queue, payload, attempts, reserved_at, available_at, created_at)
            SELECT queue, payload, attempts, NULL, available_at, created_at
              FROM json_to_recordset(CAST(:rows AS json))
                   AS t(queue text, payload text, attempts integer,
                        available_at bigint, created_at bigint)
            """
        )

    def insert_jobs(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
        tx.execute(self.job_insert_json, {"rows": json.dumps(rows, ensure_ascii=False)})


class MySQLLaravelQueries(LaravelQueries):
    # MySQL 8 has no INSERT … RETURNING (MariaDB has): the connection's insert id.
    # (Bulk inserts stay multi-row VALUES: a JSON_TABLE of one JSON parameter, measured,
    # took 1.5-2x as long on MariaDB 10.11.)
    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        return int(tx.execute(self.job_insert, row).lastrowid)


LARAVEL_QUERIES: dict[str, type[LaravelQueries]] = {
    "sqlite": SQLiteLaravelQueries,
    "postgresql": PostgreSQLLaravelQueries,
    "mysql": MySQLLaravelQueries,
}


class LaravelTableStore:
    """Laravel's ``jobs``/``failed_jobs`` tables as a queue, on SQLite, PostgreSQL or MySQL.

    Thread-safe; every operation is one transaction through the store's executor.
    ``create_tables`` creates missing tables as Laravel's migrations would;
    existing tables are used as they are.
    """

    layout: ClassVar[str] = "laravel"

    def __init__(
        self,
        url: str,
        *,
        jobs_table: str = "jobs",
        failed_table: str = "failed_jobs",
        options: StoreOptions | None = None,
    ) -> None:
        for name in (jobs_table, failed_table):
            if not name or not name.replace("_", "").isalnum():
                raise ConfigurationError(
                    f"table name {name!r} must be letters, digits and underscores"
                )
        self.options = options or StoreOptions()
        self.engine, self.url, self._db, self._exec = open_database(url, self.options)
        self.jobs_table, self.failed_table = laravel_tables(jobs_table, failed_table)
        self.q = LARAVEL_QUERIES[self.engine.name](self.jobs_table, self.failed_table)
        #: Unix-seconds clock; every operation reads it once. Tests may replace it.
        self.clock: Callable[[], float] = time.time
        self._ready = False
        self._ready_lock = threading.Lock()

    # -- plumbing -----------------------------------------------------------------

    def _run(self, work: Callable[[Tx], T], *, read_only: bool = False, single: bool = False) -> T:
        if not self._ready:
            self.ensure_ready()
        return self._exec.run(work, write=not read_only, single=single)

    def ensure_ready(self) -> None:
        """Create the tables if missing (``create_tables``) and check their columns, once."""
        with self._ready_lock:
            if self._ready:
                return
            if self.options.create_tables:
                self.create_schema()
            self.verify_schema()
            self._ready = True

    def create_schema(self) -> None:
        """Create ``jobs`` and ``failed_jobs`` if absent (idempotent, safe across processes)."""
        self._exec.run_schema(
            lambda conn: self.jobs_table.metadata.create_all(conn, checkfirst=True)
        )

    def verify_schema(self) -> None:
        """Raise :class:`SchemaMismatch` unless both tables have Laravel's columns."""
        with self._exec.sa_errors(), self._db.connect() as conn:
            inspector = sa.inspect(conn)
            for table in (self.jobs_table, self.failed_table):
                if not inspector.has_table(table.name):
                    raise SchemaMismatch(
                        f"table {table.name} does not exist; run Laravel's migrations "
                        "(php artisan queue:table / queue:failed-table) or create_tables=True"
                    )
                present = {c["name"] for c in inspector.get_columns(table.name)}
                missing = [c.name for c in table.columns if c.name not in present]
                if missing:
                    raise SchemaMismatch(f"table {table.name} lacks columns: {', '.join(missing)}")

    def _row(
        self, queue: str, payload: str | bytes, delay: float, attempts: int, now: float
    ) -> dict[str, Any]:
        validate_queue_name(queue)
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        return {
            "queue": queue,
            "payload": payload,
            "attempts": int(attempts),
            # A delay is a floor: rounded up, never claimable early.
            "available_at": math.ceil(now + delay) if delay > 0 else int(now),
            "created_at": int(now),
        }

    # -- operations ---------------------------------------------------------------

    def push(self, queue: str, payload: str, delay: float = 0.0, attempts: int = 0) -> int:
        """Insert one job (``DatabaseQueue::pushToDatabase``); return its id."""
        row = self._row(queue, payload, delay, attempts, self.clock())
        return self._run(lambda tx: self.q.insert_job(tx, row), single=True)

    def push_many(self, jobs: Sequence[tuple[str, str, float]]) -> int:
        """Insert ``(queue, payload, delay)`` jobs with multi-row INSERTs in one transaction."""
        now = self.clock()
        rows = [self._row(q, p, d, 0, now) for q, p, d in jobs]
        if not rows:
            return 0

        chunks: list[list[dict[str, Any]]] = [[]]
        size = 0
        for row in rows:
            # Bounded in rows and in bytes: a statement over MySQL's max_allowed_packet
            # (16 MiB by default) makes the server drop the connection.
            if len(chunks[-1]) == PUSH_CHUNK or (chunks[-1] and size > PUSH_CHUNK_BYTES):
                chunks.append([])
                size = 0
            chunks[-1].append(row)
            size += len(row["payload"])

        def work(tx: Tx) -> int:
            for chunk in chunks:
                self.q.insert_jobs(tx, chunk)
            return len(rows)

        return self._run(work, single=len(chunks) == 1)

    def _pop_params(self, queue: str, retry_after: float) -> dict[str, Any]:
        validate_queue_name(queue)
        now = int(self.clock())
        return {"queue": queue, "now": now, "expired": now - int(retry_after), "limit": 1}

    def _pop_in(self, tx: Tx, params: dict[str, Any]) -> LaravelRow | None:
        found = tx.execute(self.q.job_pop_lock, params).fetchone()
        if found is None:
            return None
        job_id, attempts, *stored = found
        now = params["now"]
        tx.execute(self.q.job_pop_mark, {"job_id": job_id, "now": now})
        held = min(int(attempts) + 1, MAX_LARAVEL_ATTEMPTS)
        return LaravelRow(int(job_id), params["queue"], self.q.stored_payload(stored), held, now)

    def pop(self, queue: str, retry_after: float) -> LaravelRow | None:
        """Reserve the oldest ready job of ``queue`` (``DatabaseQueue::pop``), or None."""
        params = self._pop_params(queue, retry_after)
        return self._run(lambda tx: self._pop_in(tx, params))

    def delete(self, row: LaravelRow, then: Sequence[tuple[str, str, float]] = ()) -> bool:
        """Delete the reserved job and push ``then`` — ``(queue, payload, delay)`` jobs, the
        next job of a chain — in one transaction; False (nothing written) when the
        reservation is stale."""
        return self.delete_and_pop(row, then, (), 0)[0]

    def delete_and_pop(
        self,
        row: LaravelRow,
        then: Sequence[tuple[str, str, float]],
        queues: Sequence[str],
        retry_after: float,
    ) -> tuple[bool, LaravelRow | None]:
        """:meth:`delete` and then :meth:`pop` the first of ``queues`` with a job, in one
        transaction: a worker finishing a job and taking the next pays one commit instead
        of two (Laravel pays two, and a third for the pop's ``BEGIN``). Returns (deleted,
        next row)."""
        fence = {"job_id": row.id, "held": row.attempts}
        now = self.clock()
        rows = [self._row(q, p, d, 0, now) for q, p, d in then]
        pops = [self._pop_params(q, retry_after) for q in queues]

        def work(tx: Tx) -> tuple[bool, LaravelRow | None]:
            deleted = tx.execute(self.q.job_delete, fence).rowcount == 1
            if deleted:
                for again in rows:
                    self.q.insert_job(tx, again)
            for params in pops:
                found = self._pop_in(tx, params)
                if found is not None:
                    return deleted, found
            return deleted, None

        return self._run(work, single=not rows and not pops)

    def release(self, row: LaravelRow, delay: float = 0.0, attempts: int | None = None) -> bool:
        """Delete the reserved job and insert it again after ``delay`` seconds, with the same
        payload and ``attempts`` (default: the count this reservation made), as
        ``DatabaseQueue::deleteAndRelease`` does; fenced."""
        fence = {"job_id": row.id, "held": row.attempts}
        again = self._row(
            row.queue,
            row.payload,
            delay,
            row.attempts if attempts is None else attempts,
            self.clock(),
        )

        def work(tx: Tx) -> bool:
            if tx.execute(self.q.job_delete, fence).rowcount != 1:
                return False
            self.q.insert_job(tx, again)
            return True

        return self._run(work)

    def fail(self, row: LaravelRow, connection: str, uuid: str, exception: str) -> bool:
        """Delete the reserved job and log it in ``failed_jobs`` (Laravel's failer row:
        uuid, connection, queue, verbatim payload, exception text, failed_at); fenced."""
        fence = {"job_id": row.id, "held": row.attempts}
        failed = {
            "uuid": uuid,
            "connection": connection,
            "queue": row.queue,
            "payload": row.payload,
            "exception": exception,
            "failed_at": laravel_timestamp(self.clock()),
        }

        def work(tx: Tx) -> bool:
            if tx.execute(self.q.job_delete, fence).rowcount != 1:
                return False
            # failed_jobs.uuid is unique: a job that failed before (queue:retry pushes
            # before it forgets; a uuid dispatched twice) keeps one row, the latest.
            tx.execute(self.q.failed_forget, {"uuid": uuid})
            tx.execute(self.q.failed_insert, failed)
            return True

        return self._run(work)

    def size(self, queue: str) -> int:
        """Rows of ``queue``, reserved ones included (``DatabaseQueue::size``)."""
        validate_queue_name(queue)
        return int(
            self._run(
                lambda tx: tx.execute(self.q.queue_size, {"queue": queue}).fetchone()[0],
                read_only=True,
                single=True,
            )
        )

    def failed_jobs(self) -> list[dict[str, Any]]:
        """Rows of ``failed_jobs``, newest first (what ``queue:failed`` lists)."""

        def work(tx: Tx) -> list[dict[str, Any]]:
            tx.execute(self.q.failed_list)
            return tx.rows()

        return self._run(work, read_only=True, single=True)

    def close(self) -> None:
        """Close every pooled connection."""
        self._exec.close()


class ExceptionCounter:
    """Per-job exception counts for Laravel's ``maxExceptions``, shared by every worker.

    Laravel keeps them in its cache (``job-exceptions:<uuid>``, kept for a day);
    a Python worker keeps them in a small table of the queue's database, so
    workers on other hosts count together. Created on first use.
    """

    #: Laravel keeps a count for a day after it was first written.
    TTL = 86400

    def __init__(
        self, url: str, table: str = "laravel_job_exceptions", options: StoreOptions | None = None
    ) -> None:
        self.options = options or StoreOptions()
        self.engine, self.url, self._db, self._exec = open_database(url, self.options)
        metadata = sa.MetaData()
        self.table = sa.Table(
            table,
            metadata,
            sa.Column("uuid", sa.String(255), primary_key=True),
            sa.Column("exceptions", sa.Integer, nullable=False),
            sa.Column("expires_at", sa.BigInteger, nullable=False),
        )
        c = self.table.c
        self._bump = (
            sa.update(self.table)
            .where(c.uuid == sa.bindparam("id"), c.expires_at > sa.bindparam("now"))
            .values(exceptions=c.exceptions + 1)
        )
        self._expire = sa.delete(self.table).where(
            sa.or_(c.uuid == sa.bindparam("id"), c.expires_at <= sa.bindparam("now"))
        )
        self._insert = sa.insert(self.table).values(
            uuid=sa.bindparam("id"), exceptions=1, expires_at=sa.bindparam("expires_at")
        )
        self._read = sa.select(c.exceptions).where(c.uuid == sa.bindparam("id"))
        self._forget = sa.delete(self.table).where(c.uuid == sa.bindparam("id"))
        self.clock: Callable[[], float] = time.time
        self._ready = False

    def increment(self, uuid: str) -> int:
        """Count one more exception of job ``uuid``; return the count."""
        if not self._ready:
            self._exec.run_schema(
                lambda conn: self.table.metadata.create_all(conn, checkfirst=True)
            )
            self._ready = True
        now = int(self.clock())
        params = {"id": uuid, "now": now, "expires_at": now + self.TTL}

        def work(tx: Tx) -> int:
            if tx.execute(self._bump, params).rowcount != 1:
                # First exception (or an expired count): start afresh, sweeping old counts.
                tx.execute(self._expire, params)
                tx.execute(self._insert, params)
            return int(tx.execute(self._read, params).fetchone()[0])

        return self._exec.run(work)

    def forget(self, uuid: str) -> None:
        """Drop the count of job ``uuid`` (it failed, or it is done)."""
        if self._ready:
            self._exec.run(lambda tx: tx.execute(self._forget, {"id": uuid}), single=True)

    def close(self) -> None:
        self._exec.close()
