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
and ``queue.failed.table``), so the statements (:mod:`laravel_bridge.sql`, built on
the engines' primitives) are built per store with SQLAlchemy Core; the ``Executor``
compiles each once.

This module and ``sql.py`` are the bridge's only SQL: they run on the job-table
store's machinery (:class:`~kombu_sqlqueue.store.Database`,
:class:`~kombu_sqlqueue.store.TableStore`, the engines), which knows nothing of Laravel.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kombu_sqlqueue.exceptions import ConfigurationError
from kombu_sqlqueue.store import ClaimedJob, ClaimResult, NewJob, Receipt
from kombu_sqlqueue.store.claiming import check_claim
from kombu_sqlqueue.store.database import Database, StoreOptions, TableStore
from kombu_sqlqueue.store.engines.base import READ_ONLY
from kombu_sqlqueue.store.enlist import Enlistment, with_joined_store
from kombu_sqlqueue.store.executor import Tx
from kombu_sqlqueue.store.names import validate_queue_name
from kombu_sqlqueue.store.schema import TableSpec

from .sql import (
    MAX_LARAVEL_ATTEMPTS,
    BatchQueries,
    CacheLockQueries,
    CacheQueries,
    ExceptionCountQueries,
    LaravelQueries,
    laravel_table_specs,
    laravel_timestamp,
)

__all__ = [
    "BatchCounts",
    "CacheLocks",
    "ExceptionCounter",
    "JobBatches",
    "LaravelDeliveries",
    "LaravelRow",
    "LaravelTableStore",
]

#: A window that holds every row (LIMIT takes a 64-bit value on every engine).
WHOLE_QUEUE = 2**62

#: Rows per multi-row INSERT in a bulk push (5 parameters a row; far below every
#: engine's bind-parameter limit), and payload bytes per INSERT.
PUSH_CHUNK = 1000
PUSH_CHUNK_BYTES = 4 * 1024 * 1024


def check_table_name(name: str) -> str:
    """``name`` if it can be a table's name here (a configurable name reaches SQLAlchemy's
    quoting, but is kept to what Laravel's migrations write)."""
    if not name or not name.replace("_", "").isalnum():
        raise ConfigurationError(f"table name {name!r} must be letters, digits and underscores")
    return name


def integer_limit(column_type: Any) -> int:
    """The largest value an integer column of ``column_type`` (as reflected) holds: Laravel's
    ``unsignedTinyInteger`` is a MySQL ``TINYINT UNSIGNED`` (255) but a PostgreSQL
    ``SMALLINT``; Laravel 13's ``unsignedSmallInteger`` a MySQL ``SMALLINT UNSIGNED`` (65535).
    Anything else, or unknown: 255, the limit every Laravel version's column holds."""
    name = type(column_type).__name__.upper() if column_type is not None else ""
    unsigned = bool(getattr(column_type, "unsigned", False))
    bits = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INTEGER": 32, "INT": 32}.get(name)
    if name == "BIGINT":
        bits = 64
    if bits is None:
        return MAX_LARAVEL_ATTEMPTS
    # Kept to what a 32-bit int and Laravel's own code handle.
    return int(min(2 ** (bits if unsigned else bits - 1) - 1, 2**31 - 1))


def class_filter(classes: Collection[str]) -> str:
    """The ``:names`` parameter of ``LaravelQueries.pop_lock_named``: the class names as a Laravel
    payload's JSON writes them (``\\`` doubled, ``/`` as ``\\/``, UTF-8 raw), between
    ``|`` (no PHP class name holds one). No class: ``"|"``, which nothing matches."""
    written = (
        json.dumps(name.lstrip("\\"), ensure_ascii=False)[1:-1].replace("/", "\\/")
        for name in classes
    )
    return "|" + "".join(f"{name}|" for name in written if name and "|" not in name)


@dataclass(frozen=True, slots=True)
class LaravelRow:
    """One reservation of a ``jobs`` row: ``attempts`` already counts it."""

    id: int
    queue: str
    #: The payload as stored: text, or the bytes of a SQLite value that is a BLOB or is not
    #: UTF-8 (see ``SQLiteQueries.text_read``). A release or failure writes it back as is.
    payload: str | bytes
    attempts: int
    reserved_at: int


class LaravelTableStore(TableStore):
    """Laravel's ``jobs``/``failed_jobs`` tables as a queue, on SQLite, PostgreSQL or MySQL.

    Thread-safe; every operation is one transaction through the database's executor.
    ``create_tables`` creates missing tables as Laravel's migrations would;
    existing tables are used as they are. The statements are :class:`~.sql.LaravelQueries`.
    """

    def __init__(
        self,
        database: str | Database,
        *,
        jobs_table: str = "jobs",
        failed_table: str = "failed_jobs",
        options: StoreOptions | None = None,
    ) -> None:
        for name in (jobs_table, failed_table):
            check_table_name(name)
        super().__init__(database, options)
        #: Every statement on the two tables (the bridge's ``sql.py``).
        self.q = LaravelQueries(self.engine.queries, jobs_table, failed_table)
        self.jobs_table, self.failed_table = self.q.jobs, self.q.failed

    #: The largest ``attempts`` the jobs table's column holds, read from the table when it is
    #: made ready (255 until then, what Laravel 8-12's TINYINT holds on MySQL).
    attempts_limit: int = MAX_LARAVEL_ATTEMPTS

    # -- schema -------------------------------------------------------------------

    def table_specs(self) -> Sequence[TableSpec]:
        return laravel_table_specs(self.jobs_table, self.failed_table)

    def verify_schema(self) -> None:
        super().verify_schema()
        with self._exec.sa_errors(), self._db.connect() as conn:
            inspector = sa.inspect(conn.execution_options(**{READ_ONLY: True}))
            columns = inspector.get_columns(self.jobs_table.name)
        found = next((c["type"] for c in columns if c["name"] == "attempts"), None)
        self.attempts_limit = integer_limit(found)

    def create_schema(self) -> None:
        """Create ``jobs`` and ``failed_jobs`` if absent (idempotent, safe across processes)."""
        self._exec.run_schema(
            lambda conn: self.jobs_table.metadata.create_all(conn, checkfirst=True)
        )
        self.verify_schema()

    def _row(
        self, queue: str, payload: str | bytes, delay: float, attempts: int, now: float
    ) -> dict[str, Any]:
        validate_queue_name(queue)
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        return {
            "queue": queue,
            "payload": payload,
            "attempts": min(int(attempts), self.attempts_limit),
            # A delay is a floor: rounded up, never claimable early.
            "available_at": math.ceil(now + delay) if delay > 0 else int(now),
            "created_at": int(now),
        }

    # -- operations ---------------------------------------------------------------

    def push(self, queue: str, payload: str, delay: float = 0.0, attempts: int = 0) -> int:
        """Insert one job (``DatabaseQueue::pushToDatabase``); return its id. ``attempts``
        is kept to what the table's column holds (:attr:`attempts_limit`)."""
        self.ensure_ready()  # the column's limit is read as the tables are made ready
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

    def _pop_params(
        self, queue: str, retry_after: float, classes: Collection[str] | None = None
    ) -> dict[str, Any]:
        validate_queue_name(queue)
        now = int(self.clock())
        params = {"queue": queue, "now": now, "expired": now - int(retry_after), "limit": 1}
        if classes is not None:
            params["names"] = class_filter(classes)
        return params

    def _pop_in(self, tx: Tx, params: dict[str, Any]) -> LaravelRow | None:
        rows = self._pop_rows_in(tx, params, 1)
        return rows[0] if rows else None

    def _pop_rows_in(self, tx: Tx, params: dict[str, Any], n: int) -> list[LaravelRow]:
        """Reserve up to ``n`` rows: one locking read of them, then each one marked."""
        params = {**params, "limit": n}
        if "names" in params:
            # The oldest few ready rows first; only when none of them is ours, all of them.
            pop = self.q.pop_lock_named
            found = tx.execute(pop, {**params, "window": self.q.WINDOW}).fetchall()
            if not found:
                found = tx.execute(pop, {**params, "window": WHOLE_QUEUE}).fetchall()
        else:
            found = tx.execute(self.q.pop_lock, params).fetchall()
        now = params["now"]
        cap = self.attempts_limit
        rows: list[LaravelRow] = []
        for job_id, attempts, *stored in found:
            tx.execute(self.q.pop_mark, {"job_id": job_id, "now": now, "cap": cap})
            held = min(int(attempts) + 1, cap)
            payload = self.q.stored_payload(stored)
            rows.append(LaravelRow(int(job_id), params["queue"], payload, held, now))
        return rows

    def pop(
        self, queue: str, retry_after: float, classes: Collection[str] | None = None
    ) -> LaravelRow | None:
        """Reserve the oldest ready job of ``queue`` (``DatabaseQueue::pop``), or None.

        With ``classes``, only a job whose payload names one of them (``displayName`` or
        ``data.commandName``), or whose payload is no Laravel payload at all, is reserved:
        the others are left to workers that run them, untouched."""
        params = self._pop_params(queue, retry_after, classes)
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
        classes: Collection[str] | None = None,
    ) -> tuple[bool, LaravelRow | None]:
        """:meth:`delete` and then :meth:`pop` the first of ``queues`` with a job, in one
        transaction: a worker finishing a job and taking the next pays one commit instead
        of two (Laravel pays two, and a third for the pop's ``BEGIN``). Returns (deleted,
        next row)."""
        fence = {"job_id": row.id, "held": row.attempts}
        now = self.clock()
        rows = [self._row(q, p, d, 0, now) for q, p, d in then]
        pops = [self._pop_params(q, retry_after, classes) for q in queues]

        def work(tx: Tx) -> tuple[bool, LaravelRow | None]:
            deleted = tx.execute(self.q.delete, fence).rowcount == 1
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
            if tx.execute(self.q.delete, fence).rowcount != 1:
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
            if tx.execute(self.q.delete, fence).rowcount != 1:
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
                lambda tx: tx.execute(self.q.size, {"queue": queue}).fetchone()[0],
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

    # -- by reservation alone (id, attempts): what the Kombu transport holds -------------

    def pop_many(
        self, queue: str, n: int, retry_after: float, classes: Collection[str] | None = None
    ) -> list[LaravelRow]:
        """Reserve up to ``n`` jobs of ``queue`` (:meth:`pop`'s rules) in one transaction:
        the oldest first, read (and locked) by one statement."""
        params = self._pop_params(queue, retry_after, classes)

        def work(tx: Tx) -> list[LaravelRow]:
            rows = self._pop_rows_in(tx, params, n)
            if rows and len(rows) < n and "names" in params:
                # The window held fewer of ours than asked: the rest from the whole queue.
                taken = {row.id for row in rows}
                more = self._pop_rows_in(tx, {**params}, n - len(rows))
                rows += [row for row in more if row.id not in taken]
            return rows

        return self._run(work)

    def _held_in(self, tx: Tx, job_id: int, held: int) -> LaravelRow | None:
        """The reservation's row, locked; None when it is no longer held (stale)."""
        found = tx.execute(self.q.held, {"job_id": job_id, "held": held}).fetchone()
        if found is None:
            return None
        queue, *stored = found
        return LaravelRow(job_id, str(queue), self.q.stored_payload(stored), held, 0)

    def delete_held(self, job_id: int, held: int) -> bool:
        """Delete the job this reservation holds; False when stale."""
        fence = {"job_id": job_id, "held": held}
        return bool(
            self._run(lambda tx: tx.execute(self.q.delete, fence).rowcount == 1, single=True)
        )

    def release_held(self, job_id: int, held: int, delay: float, attempts: int) -> bool:
        """:meth:`release` by reservation alone: the payload read back in the transaction."""
        now = self.clock()

        def work(tx: Tx) -> bool:
            row = self._held_in(tx, job_id, held)
            if row is None:
                return False
            tx.execute(self.q.delete, {"job_id": job_id, "held": held})
            self.q.insert_job(tx, self._row(row.queue, row.payload, delay, attempts, now))
            return True

        return self._run(work)

    def fail_held(
        self,
        job_id: int,
        held: int,
        connection: str,
        exception: str,
        uuid_of: Callable[[str | bytes], str],
    ) -> bool:
        """:meth:`fail` by reservation alone; ``uuid_of`` reads the failed row's uuid from
        the stored payload."""
        now = laravel_timestamp(self.clock())

        def work(tx: Tx) -> bool:
            row = self._held_in(tx, job_id, held)
            if row is None:
                return False
            uuid = uuid_of(row.payload)
            tx.execute(self.q.delete, {"job_id": job_id, "held": held})
            tx.execute(self.q.failed_forget, {"uuid": uuid})
            tx.execute(
                self.q.failed_insert,
                {
                    "uuid": uuid,
                    "connection": connection,
                    "queue": row.queue,
                    "payload": row.payload,
                    "exception": exception,
                    "failed_at": now,
                },
            )
            return True

        return self._run(work)

    def touch(self, held: Sequence[tuple[int, int]]) -> set[tuple[int, int]]:
        """Renew the reservations ``(id, attempts)`` still held (``reserved_at`` = now);
        return those that were."""
        now = self._now()

        def work(tx: Tx) -> set[tuple[int, int]]:
            kept: set[tuple[int, int]] = set()
            for job_id, attempts in held:
                fence = {"job_id": job_id, "held": attempts, "now": now}
                if tx.execute(self.q.touch, fence).rowcount == 1:
                    kept.add((job_id, attempts))
            return kept

        return self._run(work) if held else set()

    def gone(self, job_ids: Collection[int]) -> set[int]:
        """Which of ``job_ids`` have no row any more: settled (deleted, failed, or completed
        in an application's transaction) — a row another worker took over is still there.
        (A row Laravel released is gone too: its release re-inserts it under a new id.)"""
        ids = sorted(set(job_ids))
        if not ids:
            return set()
        query = self.q.existing(ids)
        rows = self._run(
            lambda tx: tx.execute_rendered(query).fetchall(), read_only=True, single=True
        )
        return set(ids) - {int(r[0]) for r in rows}

    def purge(self, queue: str) -> int:
        """Delete the unreserved jobs of ``queue``; return how many."""
        validate_queue_name(queue)
        return int(
            self._run(lambda tx: tx.execute(self.q.purge, {"queue": queue}).rowcount, single=True)
        )

    def clear(self, queue: str) -> int:
        """Delete every job of ``queue`` (``DatabaseQueue::clear``); return how many."""
        validate_queue_name(queue)
        return int(
            self._run(lambda tx: tx.execute(self.q.clear, {"queue": queue}).rowcount, single=True)
        )


class LaravelDeliveries:
    """Laravel's ``jobs`` table as the Kombu transport's deliveries: what
    ``kombu_sqlqueue.store.DeliveryStore`` asks, over a :class:`LaravelTableStore`.

    A reservation's receipt is the row's id and the ``attempts`` value its pop wrote
    (token ``"L<attempts>"``: the fence every settlement here matches). The transport's
    visibility timeout is the ``retry_after`` of its pops, and its renewals keep a held
    row's ``reserved_at`` fresh, so a PHP worker (whose own ``retry_after`` should be at
    least the same) does not take a long job back. ``classes`` (called at each claim)
    names the only job classes a claim reserves (None: every job). A failed job goes to
    ``failed_jobs`` under the payload's uuid, with ``connection`` as its connection.
    """

    TOKEN_PREFIX = "L"

    def __init__(
        self,
        store: LaravelTableStore,
        *,
        connection: str = "database",
        classes: Callable[[], Collection[str] | None] = lambda: None,
        uuid_of: Callable[[str | bytes], str],
        paused: Callable[[Sequence[str]], set[str]] = lambda _queues: set(),
    ) -> None:
        self.store = store
        self.connection = connection
        self.classes = classes
        self.uuid_of = uuid_of
        #: Which of the queues given ``queue:pause`` paused (``pauses.PausedQueues.of``).
        self.paused = paused

    def _held(self, receipt: Receipt) -> tuple[int, int] | None:
        token = receipt.token
        if not token.startswith(self.TOKEN_PREFIX) or not token[1:].isdigit():
            return None  # not a reservation of this table: nothing to settle
        return receipt.job_id, int(token[1:])

    def ensure_ready(self) -> None:
        self.store.ensure_ready()

    def check_payload_size(self, size: int) -> None:
        self.store.check_payload_size(size)

    def joined(self, enlistment: Enlistment) -> LaravelDeliveries | None:
        return with_joined_store(self, enlistment)

    def enqueue(self, job: NewJob) -> int:
        payload = job.payload.decode("utf-8", "surrogateescape")
        self.check_payload_size(len(job.payload))
        return self.store.push(job.queue, payload, job.delay, job.attempts)

    def claim(
        self, queue: str, n: int, visibility: float, max_attempts: int | None = None
    ) -> ClaimResult:
        check_claim(queue, n)
        if n <= 0 or self.paused([queue]):
            return ClaimResult([])
        # Not through kombu_sqlqueue's claim screen: Laravel's rows have no time to live,
        # and a job past its tries is failed by Laravel's rules after the pop
        # (MaxAttemptsExceeded, outcomes.py), as Laravel's worker does, not by the claim.
        rows = self.store.pop_many(queue, n, visibility, self.classes())
        limit = self.store.attempts_limit
        return ClaimResult(
            [
                ClaimedJob(
                    row.id,
                    row.queue,
                    row.payload.encode("utf-8", "surrogateescape")
                    if isinstance(row.payload, str)
                    else row.payload,
                    0,
                    row.attempts,
                    limit,
                    f"{self.TOKEN_PREFIX}{row.attempts}",
                    None,
                )
                for row in rows
            ]
        )

    def ack(self, receipt: Receipt) -> bool:
        held = self._held(receipt)
        return held is not None and self.store.delete_held(*held)

    def ack_and_enqueue(self, receipt: Receipt, jobs: Sequence[NewJob]) -> bool:
        held = self._held(receipt)
        if held is None:
            return False
        for job in jobs:
            self.check_payload_size(len(job.payload))
        then = [(j.queue, j.payload.decode("utf-8", "surrogateescape"), j.delay) for j in jobs]
        return self.store.delete(LaravelRow(held[0], "", "", held[1], 0), then)

    def ack_many(self, receipts: Sequence[Receipt]) -> set[Receipt]:
        return {r for r in receipts if self.ack(r)}

    def release(self, receipt: Receipt, delay: float = 0.0) -> bool:
        held = self._held(receipt)
        return held is not None and self.store.release_held(*held, delay, held[1])

    def return_job(self, receipt: Receipt, delay: float = 0.0) -> bool:
        held = self._held(receipt)
        return held is not None and self.store.release_held(*held, delay, max(0, held[1] - 1))

    def renew(self, receipts: Sequence[Receipt], visibility: float) -> set[Receipt]:
        by_held = {h: r for r in receipts if (h := self._held(r)) is not None}
        kept = self.store.touch(list(by_held))
        return {by_held[h] for h in kept}

    def dead_letter(self, receipt: Receipt, reason: str) -> bool:
        held = self._held(receipt)
        return held is not None and self.store.fail_held(
            *held, self.connection, reason, self.uuid_of
        )

    def gone(self, job_ids: Collection[int]) -> set[int]:
        return self.store.gone(job_ids)

    def size(self, queue: str) -> int:
        return self.store.size(queue)

    def purge(self, queue: str) -> int:
        return self.store.purge(queue)

    def delete_queue(self, queue: str) -> int:
        return self.store.clear(queue)

    def close(self) -> None:
        self.store.close()


class ExceptionCounter(TableStore):
    """Per-job exception counts for Laravel's ``maxExceptions``, shared by every worker.

    Laravel keeps them in its cache (``job-exceptions:<uuid>``, kept for a day);
    a Python worker keeps them in a small table of the queue's database, so
    workers on other hosts count together. Created on first use, whatever
    ``create_tables`` says (it is ours, like Laravel's cache). Open it on the job
    table's :class:`Database` to share its pool.
    """

    #: Laravel keeps a count for a day after it was first written.
    TTL = 86400

    def __init__(
        self,
        database: str | Database,
        table: str = "laravel_job_exceptions",
        options: StoreOptions | None = None,
    ) -> None:
        super().__init__(database, options)
        self.q = ExceptionCountQueries(table)
        self.table = self.q.table

    def table_specs(self) -> Sequence[TableSpec]:
        hint = "it is created on first use"
        return (TableSpec(self.table.name, tuple(col.name for col in self.table.columns), hint),)

    def ensure_ready(self) -> None:
        """Create the table if absent (always: see the class), once."""
        if self._ready:
            return
        with self._ready_lock:
            if not self._ready:
                self.create_schema()
                self._ready = True

    def create_schema(self) -> None:
        """Create the counts table if absent."""
        self._exec.run_schema(lambda conn: self.table.metadata.create_all(conn, checkfirst=True))

    def increment(self, uuid: str) -> int:
        """Count one more exception of job ``uuid``; return the count."""
        now = self._now()
        params = {"id": uuid, "now": now, "expires_at": now + self.TTL}

        def work(tx: Tx) -> int:
            if tx.execute(self.q.bump, params).rowcount != 1:
                # First exception (or an expired count): start afresh, sweeping old counts.
                tx.execute(self.q.expire, params)
                tx.execute(self.q.insert, params)
            return int(tx.execute(self.q.read, params).fetchone()[0])

        return self._run(work)

    def forget(self, uuid: str) -> None:
        """Drop the count of job ``uuid`` (it failed, or it is done)."""
        if self._ready:  # never counted: no table to forget from
            self._run(lambda tx: tx.execute(self.q.forget, {"id": uuid}), single=True)


class LaravelAppTable(TableStore):
    """A table of the Laravel app that a worker writes but does not own (Laravel's migration
    creates it): ``table`` is set by the subclass, ``create_hint`` names the migration."""

    table: sa.Table
    create_hint: str

    def table_specs(self) -> Sequence[TableSpec]:
        columns = tuple(col.name for col in self.table.columns)
        return (TableSpec(self.table.name, columns, self.create_hint),)

    def create_schema(self) -> None:
        """Create the table as Laravel's migration would, if absent (tests; apps migrate)."""
        self._exec.run_schema(lambda conn: self.table.metadata.create_all(conn, checkfirst=True))
        self.verify_schema()


class CacheLocks(LaravelAppTable):
    """The lock table of Laravel's ``database`` cache store (``cache_locks``: key, owner,
    expiration; ``php artisan cache:table`` creates it), for the one thing a worker does
    with it: ``DatabaseLock::forceRelease``, which Laravel's ``CallQueuedHandler`` calls on
    a ``ShouldBeUnique`` job's lock once the job is done or failed. Open it on the job
    table's :class:`Database` (one pool) or on the cache connection's URL.
    """

    def __init__(
        self,
        database: str | Database,
        table: str = "cache_locks",
        options: StoreOptions | None = None,
    ) -> None:
        check_table_name(table)  # before a URL is opened
        super().__init__(database, options)
        self.create_hint = "Laravel's `php artisan cache:table` migration creates it"
        self.q = CacheLockQueries(self.engine.queries, table)
        self.table = self.q.table

    def acquire(self, key: str, seconds: int, owner: str | None = None) -> bool:
        """``DatabaseLock::acquire``: take the lock ``key`` (the cache prefix included) for
        ``seconds`` (0: a day, as Laravel's ``expiresAt``), unless another owner holds it
        unexpired; True when taken."""
        now = self._now()
        params = {
            "key": key,
            "owner": owner or secrets.token_urlsafe(12)[:16],
            "now": now,
            "expiration": now + seconds if seconds > 0 else now + 86400,
        }

        def work(tx: Tx) -> bool:
            if tx.execute(self.q.insert, params).rowcount == 1:
                return True
            return bool(tx.execute(self.q.take_over, params).rowcount >= 1)

        return bool(self._run(work))

    def force_release(self, key: str) -> bool:
        """Delete the lock ``key`` (the cache prefix included), whoever owns it; True if one
        was held."""
        return bool(
            self._run(
                lambda tx: tx.execute(self.q.release, {"key": key}).rowcount == 1, single=True
            )
        )


_NO_CREATE = StoreOptions(create_tables=False)

#: The cache key of a paused queue, after the cache prefix: ``QueueManager::pause``'s
#: (Laravel 12.40+; ``queue:pause connection:queue``).
PAUSE_KEY = "illuminate:queue:paused:{connection}:{queue}"
#: Laravel 13.25+'s ``queue:pause --all`` (``pauseAll``): every queue of every connection.
PAUSE_ALL_KEY = "illuminate:queues:paused"
#: What ``pause`` stores there: PHP's ``serialize(true)``.
PAUSE_VALUE = "b:1;"
#: ``Repository::forever`` as ``DatabaseStore`` writes it: ten years from now.
FOREVER_SECONDS = 315_360_000


#: Laravel's ``cache.prefix`` for an app named Laravel (the slug of ``APP_NAME``), by the
#: skeleton the app was made from: 8.x ``laravel_cache``; 9.x to 12.0 ``laravel_cache_``;
#: 12.x from skeleton v12.1.0, and 13.x, ``laravel-cache-``. The bridge's default prefix is
#: the first; a pause is read (and resumed) under all three while the prefix is that default.
DEFAULT_CACHE_PREFIX = "laravel_cache"
DEFAULT_CACHE_PREFIXES = ("laravel_cache", "laravel_cache_", "laravel-cache-")


class QueuePauses(LaravelAppTable):
    """The table of Laravel's ``database`` cache store (``cache``: key, value, expiration;
    ``php artisan cache:table`` creates it), for the keys ``php artisan queue:pause`` and
    ``queue:resume`` write and ``queue:work`` reads each loop (Laravel 12.40+):
    ``<cache prefix>illuminate:queue:paused:<connection>:<queue>``, holding ``true``
    (``b:1;``), forever (ten years, as ``DatabaseStore::forever``) or for a time
    (``QueueManager::pauseFor``). ``prefix`` is the app's ``config('cache.prefix')``; left
    at :data:`DEFAULT_CACHE_PREFIX`, a pause under any default of
    :data:`DEFAULT_CACHE_PREFIXES` is read (and ended by :meth:`resume`): an app named
    Laravel, whatever skeleton it came from. :meth:`pause` writes under ``prefix`` alone.
    Laravel reads the app's default cache store: this table must be it. Never created here.
    """

    def __init__(
        self,
        database: str | Database,
        table: str = "cache",
        *,
        prefix: str = DEFAULT_CACHE_PREFIX,
    ) -> None:
        check_table_name(table)  # before a URL is opened
        if not isinstance(prefix, str):
            raise ConfigurationError(f"the cache prefix is a string, got {prefix!r}")
        super().__init__(database, None if isinstance(database, Database) else _NO_CREATE)
        self.create_hint = "Laravel's `php artisan cache:table` migration creates it"
        self.q = CacheQueries(self.engine.queries, table)
        self.table = self.q.table
        self.prefixes = DEFAULT_CACHE_PREFIXES if prefix == DEFAULT_CACHE_PREFIX else (prefix,)

    def ensure_ready(self) -> None:
        """Verify the table, once: it is the app's cache, never created here (a missing
        one is :class:`~kombu_sqlqueue.exceptions.SchemaMismatch`, whatever the database's
        ``create_tables``)."""
        if not self._ready:
            with self._ready_lock:
                self.verify_schema()
                self._ready = True

    def keys(self, connection: str, queue: str) -> list[str]:
        """The stored keys of ``queue`` of ``connection`` paused, one per prefix."""
        key = PAUSE_KEY.format(connection=connection, queue=queue)
        return [prefix + key for prefix in self.prefixes]

    def paused(self, connection: str, queues: Sequence[str]) -> set[str]:
        """Those of ``queues`` (of ``connection``) paused now — every one while Laravel 13's
        ``pauseAll`` key is set —: one read, as Laravel 13's ``getPausedQueues``
        (``DatabaseStore::many``; an expired key is absent)."""
        by_key = {key: q for q in queues for key in self.keys(connection, q)}
        every = {prefix + PAUSE_ALL_KEY for prefix in self.prefixes}
        params = {"keys": sorted([*by_key, *every]), "now": self._now()}
        rows = self._run(
            lambda tx: tx.execute_bound(self.q.live, params).fetchall(),
            read_only=True,
            single=True,
        )
        found = {str(key) for key, _expiration in rows}
        if found & every:
            return set(queues)
        return {by_key[key] for key in found if key in by_key}

    def pauses(self, connection: str) -> dict[str, int]:
        """Every queue of ``connection`` paused now → when its key expires (unix seconds;
        ten years out for a pause until resumed)."""
        found: dict[str, int] = {}
        now = self._now()
        for prefix in self.prefixes:
            start = prefix + PAUSE_KEY.format(connection=connection, queue="")
            params = {"start": start, "now": now}
            rows = self._run(
                lambda tx, params=params: tx.execute(self.q.live_from, params).fetchall(),  # type: ignore[misc]
                read_only=True,
                single=True,
            )
            for key, expiration in rows:
                queue = str(key)[len(start) :]
                found[queue] = max(found.get(queue, 0), int(expiration))
        return found

    def pause(self, connection: str, queue: str, seconds: int | None = None) -> int:
        """``QueueManager::pause`` (``pauseFor`` with ``seconds``): the key written under the
        prefix given (one key: ``queue:resume`` forgets one), forever or for ``seconds``;
        returns when it expires."""
        validate_queue_name(queue)
        now = self._now()
        expiration = now + (FOREVER_SECONDS if seconds is None else seconds)
        key = self.prefixes[0] + PAUSE_KEY.format(connection=connection, queue=queue)
        rows = [{"key": key, "value": PAUSE_VALUE, "expiration": expiration}]

        def work(tx: Tx) -> None:
            for row in rows:
                tx.execute(self.q.forget, row)
                tx.execute(self.q.put, row)

        self._run(work)
        return expiration

    def resume(self, connection: str, queue: str) -> bool:
        """``QueueManager::resume``: the key forgotten (under each prefix); True when the
        queue was paused."""
        validate_queue_name(queue)
        now = self._now()
        keys = self.keys(connection, queue)

        def work(tx: Tx) -> bool:
            paused = False
            for key in keys:
                params = {"key": key, "now": now}
                paused |= bool(tx.execute(self.q.forget_live, params).rowcount == 1)
                tx.execute(self.q.forget, params)  # an expired row too, as forget() does
            return paused

        return bool(self._run(work))


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """A batch's counts after a job was recorded (``UpdatedBatchJobCounts``), and what the
    recording did."""

    pending_jobs: int
    failed_jobs: int
    #: This recording set ``finished_at`` (the last pending job succeeded).
    finished: bool
    #: This recording cancelled the batch (its first failure, failures not allowed).
    cancelled: bool

    @property
    def all_ran_once(self) -> bool:
        """``allJobsHaveRanExactlyOnce``: every job succeeded or failed."""
        return self.pending_jobs - self.failed_jobs == 0


class JobBatches(LaravelAppTable):
    """Laravel's ``job_batches`` (``php artisan queue:batches-table``), kept as
    ``Illuminate\\Bus\\DatabaseBatchRepository`` keeps it when a batched job succeeds or
    fails: the counts, ``failed_job_ids``, ``finished_at`` and, on a first failure the batch
    does not allow, ``cancelled_at`` — each recording one transaction with the batch's row
    locked (``updateAtomicValues``). ``options`` (the PHP-serialized callbacks) is handed
    back as stored: the store reads no PHP.
    """

    def __init__(
        self,
        database: str | Database,
        table: str = "job_batches",
        options: StoreOptions | None = None,
    ) -> None:
        check_table_name(table)  # before a URL is opened
        super().__init__(database, options)
        self.create_hint = "Laravel's `php artisan queue:batches-table` migration creates it"
        self.q = BatchQueries(table)
        self.table = self.q.table

    def find(self, batch_id: str) -> dict[str, Any] | None:
        """The batch's row (``options`` as stored), or None."""

        def work(tx: Tx) -> dict[str, Any] | None:
            tx.execute(self.q.find, {"id": batch_id})
            found = tx.rows()
            return found[0] if found else None

        return self._run(work, read_only=True, single=True)

    def record(
        self, batch_id: str, job_uuid: str, *, succeeded: bool, allow_failures: bool = False
    ) -> BatchCounts | None:
        """``recordSuccessfulJob`` / ``recordFailedJob``'s writes for job ``job_uuid``: the
        counts (``decrementPendingJobs`` / ``incrementFailedJobs``), then ``markAsFinished``
        when nothing is pending, or ``cancel`` on a first failure not allowed. None when
        the batch does not exist (pruned, or never stored)."""
        now = self._now()

        def work(tx: Tx) -> BatchCounts | None:
            row = tx.execute(self.q.lock, {"id": batch_id}).fetchone()
            if row is None:
                return None
            pending, failed, raw_ids = int(row[0]), int(row[1]), row[2]
            try:
                ids = json.loads(raw_ids) if raw_ids else []
            except ValueError:
                ids = []
            ids = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
            if succeeded:
                pending -= 1
                ids = [i for i in ids if i != job_uuid]
            else:
                failed += 1
                ids = ids if job_uuid in ids else [*ids, job_uuid]
            params = {
                "id": batch_id,
                "pending": pending,
                "failed": failed,
                # json_encode(array_values(...)): PHP escapes "/" as "\/".
                "failed_ids": json.dumps(ids, separators=(",", ":")).replace("/", "\\/"),
                "now": now,
            }
            tx.execute(self.q.counts, params)
            finished = succeeded and pending == 0
            cancelled = not succeeded and failed == 1 and not allow_failures
            if finished:
                tx.execute(self.q.finish, params)
            if cancelled:
                tx.execute(self.q.cancel, params)
            return BatchCounts(pending, failed, finished, cancelled)

        return self._run(work)
