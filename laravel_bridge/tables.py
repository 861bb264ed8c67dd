"""The two table layouts a Laravel job can live in, behind one interface.

* ``laravel`` — Laravel's own ``jobs``/``failed_jobs`` tables, with Laravel's
  database-queue rules (see :mod:`laravel_bridge.laravel_tables`), so
  ``php artisan queue:work``, ``queue:failed`` and ``queue:retry`` keep working.
* ``askr`` — contract v1's ``askr_jobs``/``askr_failed_jobs`` (the table the
  Kombu transport uses), with a Laravel payload in the ``payload`` column; also
  over the in-memory store (``memory://name``: one process, for tests).

The worker and :class:`~laravel_bridge.dispatch.LaravelQueue` only use
:class:`JobTable`; the SQL lives in :mod:`kombu_sqlqueue.store` (no Kombu there).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, Self, TypeVar

from kombu_sqlqueue.store import (
    ClaimedJob,
    JobContract,
    JobStore,
    NewJob,
    Receipt,
    StoreOptions,
    open_store,
)
from kombu_sqlqueue.store.controls import fit_concurrency_key
from kombu_sqlqueue.store.database import Database
from kombu_sqlqueue.store.enlist import (
    Enlistment,
    Joinable,
    current,
    joined_or_own,
    with_joined_store,
)
from kombu_sqlqueue.store.holders import recover_dead_holds
from kombu_sqlqueue.store.memory import MemoryJobStore, is_memory_url

from .exceptions import LaravelBridgeError, PayloadError
from .laravel_tables import (
    BatchCounts,
    CacheLocks,
    ExceptionCounter,
    JobBatches,
    LaravelRow,
    LaravelTableStore,
    QueuePauses,
)
from .payload import Payload
from .sql import MAX_LARAVEL_ATTEMPTS

__all__ = [
    "MAX_LARAVEL_ATTEMPTS",
    "BatchCounts",
    "CacheLocks",
    "JobBatches",
    "JobTable",
    "PushJob",
    "ReservedJob",
    "StoreOptions",
    "open_table",
]

Layout = Literal["laravel", "askr"]
_T = TypeVar("_T", CacheLocks, JobBatches)
LAYOUTS: tuple[Layout, ...] = ("laravel", "askr")


@dataclass(frozen=True, slots=True)
class ReservedJob:
    """One reservation of a job: ``attempts`` already counts it (Laravel's rule)."""

    id: int
    queue: str
    #: The stored payload: its text, or its bytes when they are not UTF-8 text (a BLOB in
    #: SQLite's TEXT column, or bytes in contract v1's BLOB column). The worker reads it;
    #: settlements write back what is stored, never this value re-encoded.
    payload: str | bytes
    attempts: int
    #: The layout's fence for settling this reservation.
    handle: object


@dataclass(frozen=True, slots=True)
class PushJob:
    """A payload to store: ``delay`` in seconds; ``uuid`` is the payload's."""

    queue: str
    payload: str
    delay: float = 0.0
    uuid: str | None = None


S = TypeVar("S", bound=Joinable)


def publishing(store: S) -> S:
    """Where a dispatch writes: inside ``kombu_sqlqueue.enlist`` the caller's transaction
    (as Laravel's database queue joins ``DB::transaction``), else the store's own."""
    return joined_or_own(store, current())


class JobTable(Protocol):
    """What the worker and the dispatcher need of a job table. Settlements are fenced:
    each returns False, writing nothing, when the reservation is no longer the holder's."""

    layout: Layout

    @property
    def attempts_limit(self) -> int:
        """The most attempts a row can record (Laravel's column: 255 in 8-12's TINYINT on
        MySQL, 65535 in 13's SMALLINT; 255 on contract v1's layout, as its rows say)."""
        ...

    def push(self, job: PushJob) -> int:
        """Store one job; return its id."""
        ...

    def push_many(self, jobs: Sequence[PushJob]) -> int:
        """Store jobs with multi-row INSERTs in one transaction; return how many."""
        ...

    def pop(
        self, queue: str, retry_after: float, classes: Collection[str] | None = None
    ) -> ReservedJob | None:
        """Reserve the next ready job of ``queue``, counting the attempt; None if none.

        ``classes``: reserve only a job whose payload names one of these classes (or is no
        Laravel payload at all: a bad row to settle), leaving every other job untouched for
        the workers that run it. Laravel's table only: contract v1's claim has no such
        filter, and reserves whatever is next."""
        ...

    def delete(self, job: ReservedJob, then: Sequence[PushJob] = ()) -> bool:
        """Settle as done, storing ``then`` (a chain's next job) in the same transaction."""
        ...

    def delete_and_pop(
        self,
        job: ReservedJob,
        then: Sequence[PushJob],
        queues: Sequence[str],
        retry_after: float,
        classes: Collection[str] | None = None,
    ) -> tuple[bool, ReservedJob | None]:
        """:meth:`delete`, then :meth:`pop` the first of ``queues`` with a job, in one
        transaction (one commit for a finished job and the next). (deleted, next job)."""
        ...

    def release(self, job: ReservedJob, delay: float, *, refund: bool = False) -> bool:
        """Make the job ready again after ``delay`` s; ``refund`` gives the attempt back."""
        ...

    def joined(self, enlistment: Enlistment) -> Self | None:
        """This table writing in ``enlistment``'s open transaction (a handler completing its
        job there, ``Job.complete``); None when the connection has none."""
        ...

    def gone(self, job: ReservedJob) -> bool:
        """True when the job's row is no more: settled (by a handler in its transaction,
        or by a worker that took it over); False while a reservation, any, holds it."""
        ...

    def fail(self, job: ReservedJob, connection: str, uuid: str, exception: str) -> bool:
        """Move the job to the failed table with ``exception`` as the reason."""
        ...

    def size(self, queue: str) -> int:
        """Jobs on ``queue`` (by the layout's own rule)."""
        ...

    def sign(self, name: str, *, recover: bool = True) -> int:
        """Sign this table's reservations with ``name`` and (``recover``) hand back the
        holds of an earlier process of this host under that name which is gone; return
        how many came back. Laravel's table records no holder: nothing to do there."""
        ...

    def wait(self, seconds: float, queues: Collection[str]) -> None:
        """Idle for up to ``seconds`` (less when the database can say a job arrived)."""
        ...

    def exception_counter(self) -> ExceptionCounts:
        """The shared ``maxExceptions`` counts (created on first use)."""
        ...

    def cache_locks(self, table: str) -> CacheLocks:
        """Laravel's database cache store's lock table ``table`` in this database (for
        ``ShouldBeUnique`` locks); opened once, on the same pool."""
        ...

    def job_batches(self, table: str) -> JobBatches:
        """Laravel's ``job_batches`` table ``table`` in this database (``Bus::batch``);
        opened once, on the same pool."""
        ...

    def queue_pauses(self, table: str, prefix: str) -> QueuePauses:
        """Laravel's database cache store's table ``table`` in this database, where
        ``queue:pause`` writes, its keys starting with ``prefix``; never created here."""
        ...

    def close(self) -> None:
        """Close the table's connections."""
        ...


class ExceptionCounts(Protocol):
    """Laravel's ``maxExceptions`` counts, shared by the workers of one store
    (``laravel_tables.ExceptionCounter``, ``MemoryExceptionCounter``)."""

    def increment(self, uuid: str) -> int:
        """Count one more exception of job ``uuid``; return the count."""
        ...

    def forget(self, uuid: str) -> None:
        """Drop the count of job ``uuid``."""
        ...

    def close(self) -> None:
        """Release what the counter holds."""
        ...


class MemoryExceptionCounter:
    """Laravel's ``maxExceptions`` counts beside a memory store's jobs, with
    ``laravel_tables.ExceptionCounter``'s rules (a count lasts a day from its first
    exception), read on the store's clock."""

    #: Laravel keeps a count for a day after it was first written.
    TTL = ExceptionCounter.TTL

    def __init__(self, store: MemoryJobStore) -> None:
        self._store = store
        #: uuid -> (count, expires_at), shared by every store of the memory name.
        self._lock, self._counts = store.beside(
            "laravel_exception_counts", dict[str, tuple[int, int]]
        )

    def increment(self, uuid: str) -> int:
        """Count one more exception of job ``uuid``; return the count."""
        now = int(self._store.clock())
        counts = self._counts
        with self._lock:
            count, expires_at = counts.get(uuid, (0, now))
            if count and expires_at > now:
                counts[uuid] = (count + 1, expires_at)
                return count + 1
            # First exception (or an expired count): start afresh, sweeping old counts.
            for key in [k for k, (_c, e) in counts.items() if e <= now]:
                del counts[key]
            counts[uuid] = (1, now + self.TTL)
            return 1

    def forget(self, uuid: str) -> None:
        """Drop the count of job ``uuid`` (it failed, or it is done)."""
        with self._lock:
            self._counts.pop(uuid, None)

    def close(self) -> None:
        """Nothing to release."""


class _CounterMixin:
    #: The job table's database: the counter and the cache locks open on it (one pool).
    _database: Database | None = None
    _counter: ExceptionCounts | None = None
    _locks: CacheLocks | None = None
    _batches: JobBatches | None = None

    def exception_counter(self) -> ExceptionCounts:
        if self._counter is None:
            assert self._database is not None  # the memory store has its own counter
            self._counter = ExceptionCounter(self._database)
        return self._counter

    def cache_locks(self, table: str) -> CacheLocks:
        self._locks = self._app_table(CacheLocks, self._locks, table, "cache locks")
        return self._locks

    def job_batches(self, table: str) -> JobBatches:
        self._batches = self._app_table(JobBatches, self._batches, table, "job batches")
        return self._batches

    def queue_pauses(self, table: str, prefix: str) -> QueuePauses:
        if self._database is None:
            raise LaravelBridgeError("queue pauses need a SQL database, not the memory store")
        return QueuePauses(self._database, table, prefix=prefix)

    def _app_table(self, kind: type[_T], opened: _T | None, table: str, what: str) -> _T:
        """``opened`` if it is ``table``, else ``kind`` opened on this table's database."""
        if self._database is None:
            raise LaravelBridgeError(f"{what} need a SQL database, not the memory store")
        if opened is None or opened.table.name != table:
            opened = kind(self._database, table)
        return opened

    def _close_counter(self) -> None:
        for store in (self._counter, self._locks, self._batches):
            if store is not None:
                store.close()


class DatabaseTables(_CounterMixin):
    """The app tables Laravel's rules write (``outcomes.AppTables``) on one database, for a
    consumer that has no :class:`JobTable` (the queue format)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def close(self) -> None:
        """Close the app tables opened here (the database is its opener's)."""
        self._close_counter()


class LaravelLayout(_CounterMixin):
    """Laravel's ``jobs``/``failed_jobs`` (names configurable)."""

    layout: Layout = "laravel"

    def __init__(
        self,
        url: str,
        *,
        jobs_table: str = "jobs",
        failed_table: str = "failed_jobs",
        options: StoreOptions | None = None,
    ) -> None:
        self.store = LaravelTableStore(
            url, jobs_table=jobs_table, failed_table=failed_table, options=options
        )
        self._database = self.store.database

    @property
    def attempts_limit(self) -> int:
        self.store.ensure_ready()
        return self.store.attempts_limit

    def push(self, job: PushJob) -> int:
        return publishing(self.store).push(job.queue, job.payload, job.delay)

    def push_many(self, jobs: Sequence[PushJob]) -> int:
        return publishing(self.store).push_many([(j.queue, j.payload, j.delay) for j in jobs])

    def pop(
        self, queue: str, retry_after: float, classes: Collection[str] | None = None
    ) -> ReservedJob | None:
        row = self.store.pop(queue, retry_after, classes)
        if row is None:
            return None
        return ReservedJob(row.id, row.queue, row.payload, row.attempts, row)

    def delete(self, job: ReservedJob, then: Sequence[PushJob] = ()) -> bool:
        return self.store.delete(_row(job), [(j.queue, j.payload, j.delay) for j in then])

    def delete_and_pop(
        self,
        job: ReservedJob,
        then: Sequence[PushJob],
        queues: Sequence[str],
        retry_after: float,
        classes: Collection[str] | None = None,
    ) -> tuple[bool, ReservedJob | None]:
        deleted, row = self.store.delete_and_pop(
            _row(job), [(j.queue, j.payload, j.delay) for j in then], queues, retry_after, classes
        )
        if row is None:
            return deleted, None
        return deleted, ReservedJob(row.id, row.queue, row.payload, row.attempts, row)

    def release(self, job: ReservedJob, delay: float, *, refund: bool = False) -> bool:
        row = _row(job)
        return self.store.release(row, delay, row.attempts - 1 if refund else None)

    def fail(self, job: ReservedJob, connection: str, uuid: str, exception: str) -> bool:
        return self.store.fail(_row(job), connection, uuid, exception)

    def joined(self, enlistment: Enlistment) -> Self | None:
        return with_joined_store(self, enlistment)

    def gone(self, job: ReservedJob) -> bool:
        return job.id in self.store.gone([job.id])

    def sign(self, name: str, *, recover: bool = True) -> int:
        return 0  # Laravel's jobs table has no column for a holder

    def size(self, queue: str) -> int:
        return self.store.size(queue)

    def wait(self, seconds: float, queues: Collection[str]) -> None:
        _sleep(seconds)

    def close(self) -> None:
        self._close_counter()
        self.store.close()


def overlap_key_of(payload: str) -> str | None:
    """The concurrency key of a Laravel job stored in contract v1's table: its
    ``WithoutOverlapping`` lock key when its payload carries one (so ``limit --per-key 1``
    holds one job per lock key at once, as the middleware means), fitted to the column;
    None for a job without one, an encrypted command, or a payload this cannot read (the
    key only limits; the job is stored either way)."""
    try:
        parsed = Payload.parse(payload)
        if parsed.is_encrypted:
            return None
        key = parsed.command().overlap_key
    except (PayloadError, ValueError):
        return None
    return None if key is None else fit_concurrency_key(key)


class AskrLayout(_CounterMixin):
    """Contract v1's ``askr_jobs``/``askr_failed_jobs`` holding Laravel payloads.

    Rows are stamped ``max_attempts`` 255 — the Laravel worker rules (tries,
    retryUntil) decide before that, and contract v1's claim dead-letters a row
    past it, so even a job released forever is bounded.
    """

    layout: Layout = "askr"

    def __init__(self, url: str, *, options: StoreOptions | None = None) -> None:
        self.store: JobContract = open_store(url, options)
        if isinstance(self.store, JobStore):
            self._database = self.store.database
        elif isinstance(self.store, MemoryJobStore):  # no database: counts kept beside the jobs
            self._counter = MemoryExceptionCounter(self.store)

    attempts_limit = MAX_LARAVEL_ATTEMPTS  # the max_attempts its rows are stamped with

    def sign(self, name: str, *, recover: bool = True) -> int:
        self.store.holder = name
        return recover_dead_holds(self.store, name) if recover else 0

    @staticmethod
    def _new(job: PushJob) -> NewJob:
        return NewJob(
            job.queue,
            job.payload.encode("utf-8", "surrogateescape"),
            delay=job.delay,
            max_attempts=MAX_LARAVEL_ATTEMPTS,
            uuid=job.uuid,
            concurrency_key=overlap_key_of(job.payload),
        )

    def push(self, job: PushJob) -> int:
        return publishing(self.store).enqueue(self._new(job))

    def push_many(self, jobs: Sequence[PushJob]) -> int:
        return len(publishing(self.store).enqueue_many([self._new(j) for j in jobs]))

    def pop(
        self, queue: str, retry_after: float, classes: Collection[str] | None = None
    ) -> ReservedJob | None:
        claimed = self.store.claim(queue, 1, retry_after).jobs
        if not claimed:
            return None
        return self._reserved(claimed[0])

    def delete(self, job: ReservedJob, then: Sequence[PushJob] = ()) -> bool:
        if not then:
            return self.store.ack(_receipt(job))
        return self.store.ack_and_enqueue(_receipt(job), [self._new(j) for j in then])

    def delete_and_pop(
        self,
        job: ReservedJob,
        then: Sequence[PushJob],
        queues: Sequence[str],
        retry_after: float,
        classes: Collection[str] | None = None,
    ) -> tuple[bool, ReservedJob | None]:
        acked, claimed = self.store.ack_and_claim(
            _receipt(job), [self._new(j) for j in then], queues, retry_after
        )
        return acked, None if claimed is None else self._reserved(claimed)

    @staticmethod
    def _reserved(job: ClaimedJob) -> ReservedJob:
        # askr_jobs.payload is a BLOB: text when it is UTF-8, else the bytes (the worker
        # fails such a row; dead_letter copies the stored bytes, not this value).
        payload: str | bytes
        try:
            payload = job.payload.decode("utf-8")
        except UnicodeDecodeError:
            payload = bytes(job.payload)
        return ReservedJob(job.id, job.queue, payload, job.attempts, job.receipt)

    def release(self, job: ReservedJob, delay: float, *, refund: bool = False) -> bool:
        if refund:
            return self.store.return_job(_receipt(job), delay)
        return self.store.release(_receipt(job), delay)

    def fail(self, job: ReservedJob, connection: str, uuid: str, exception: str) -> bool:
        # askr_failed_jobs has no connection column; its uuid is the row's own. The store
        # cuts a reason longer than its exception column holds.
        return self.store.dead_letter(_receipt(job), exception)

    def joined(self, enlistment: Enlistment) -> Self | None:
        return with_joined_store(self, enlistment)

    def gone(self, job: ReservedJob) -> bool:
        return job.id in self.store.gone([job.id])

    def size(self, queue: str) -> int:
        return self.store.size(queue)

    def wait(self, seconds: float, queues: Collection[str]) -> None:
        self.store.wait_for_jobs(seconds, queues)

    def close(self) -> None:
        self._close_counter()
        self.store.close()


def _row(job: ReservedJob) -> LaravelRow:
    assert isinstance(job.handle, LaravelRow), "a reservation of another layout"
    return job.handle


def _receipt(job: ReservedJob) -> Receipt:
    assert isinstance(job.handle, Receipt), "a reservation of another layout"
    return job.handle


def _sleep(seconds: float) -> None:
    import time

    if seconds > 0:
        time.sleep(seconds)


def open_table(
    url: str,
    layout: str = "laravel",
    *,
    jobs_table: str = "jobs",
    failed_table: str = "failed_jobs",
    create_tables: bool = True,
) -> JobTable:
    """Open the job table of ``layout`` at ``url`` (an SQLAlchemy URL: ``sqlite:///app.db``,
    ``postgresql://…``, ``mysql://…``; or, for the ``askr`` layout, ``memory://name``: the
    in-memory store, one process only, for tests)."""
    options = StoreOptions(create_tables=create_tables)
    if layout == "laravel" and is_memory_url(url):
        raise LaravelBridgeError(
            f"{url!r}: the laravel layout is Laravel's own tables in an SQL database; the "
            "in-memory store holds contract v1's only (use layout='askr')"
        )
    if layout == "laravel":
        return LaravelLayout(url, jobs_table=jobs_table, failed_table=failed_table, options=options)
    if layout == "askr":
        return AskrLayout(url, options=options)
    raise LaravelBridgeError(f"unknown layout {layout!r}; use one of: {', '.join(LAYOUTS)}")
