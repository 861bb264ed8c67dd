"""What operators read and steer: every queue's figures, the next jobs, the dead letters
(list, show, retry, forget, flush) and purges — on contract v1's tables here
(:class:`ContractAdmin`), on a registered layout's in its package (:mod:`.layouts`);
both satisfy :class:`QueueAdmin`, which the operator CLI and the metrics exporter use.

Not part of the job contract: a worker never calls it. Reads are cheap by design (one
grouped query per table for every queue's figures: a metrics scrape runs them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .controls import QueueControl, Rate, claim_allowance
from .database import QueryRunner, StoreRunner
from .executor import Tx
from .model import DEFAULT_MAX_ATTEMPTS, Holding
from .names import validate_queue_name

#: Dead letters one retry or forget transaction moves (a large ``--all`` runs in steps).
ADMIN_CHUNK = 500


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's figures: ``total`` = ``ready`` + ``reserved`` + ``delayed``.

    ``ready`` counts lapsed reservations too (they are claimable); ``oldest_seconds`` is
    the age of the oldest ready job (contract v1's backlog figure, 0 when none is ready).
    """

    queue: str
    total: int = 0
    ready: int = 0
    reserved: int = 0
    delayed: int = 0
    oldest_seconds: int = 0
    dead_letters: int = 0
    #: attempts used → jobs (filled by :meth:`QueueAdmin.attempts` for ``stats``).
    attempts: dict[int, int] = field(default_factory=dict)
    #: holder name (``-``: unsigned) → live reservations (from :meth:`QueueAdmin.holders`).
    holders: dict[str, int] = field(default_factory=dict)
    #: Paused now (flow control): claims hand out nothing of it.
    paused: bool = False
    #: When a pause for a time ends (unix seconds); None: until resumed, or not paused.
    resume_at: int | None = None
    #: At most this many jobs held at once across every worker; None: no limit.
    concurrency: int | None = None
    #: At most so many jobs handed out per period across every worker; None: no limit.
    rate: Rate | None = None
    #: At most this many jobs of one concurrency key held at once; None: no such limit.
    key_concurrency: int | None = None
    #: Concurrency keys at that limit now, with ready jobs waiting on them.
    keys_at_limit: int = 0
    #: Ready jobs a limit (concurrency, rate) holds back now (waiting, not failed).
    waiting_on_limit: int = 0


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A job no one holds, as :meth:`QueueAdmin.peek` shows it."""

    id: int
    queue: str
    payload: bytes | str
    attempts: int
    available_at: int
    created_at: int
    priority: int = 0
    uuid: str | None = None
    #: For a held job (``peek --held``): when its reservation lapses, who holds it.
    reserved_until: int | None = None
    holder: str | None = None
    instance: str | None = None


@dataclass(frozen=True, slots=True)
class PeekAfter:
    """Where a page of :meth:`QueueAdmin.peek` starts: after this job, in claim order (a
    keyset: the next page is read from the index, not by counting past the first ones).
    Spelled ``r.<priority>.<available_at>.<id>`` after a ready job, ``d.<available_at>.<id>``
    after a delayed one (what a page's "more" link carries)."""

    delayed: bool
    priority: int
    available_at: int
    id: int

    @classmethod
    def of(cls, job: WaitingJob, now: int) -> PeekAfter:
        return cls(job.available_at > now, job.priority, job.available_at, job.id)

    @classmethod
    def parse(cls, text: str) -> PeekAfter:
        """The cursor ``text`` spells; :class:`ValueError` when it spells none."""
        kind, *numbers = text.split(".")
        if not all(n.lstrip("-").isascii() and n.lstrip("-").isdigit() for n in numbers) or any(
            len(n) > 19 for n in numbers
        ):
            raise ValueError(f"not a position in a queue: {text!r}")
        values = [int(n) for n in numbers]
        if kind == "r" and len(values) == 3:
            return cls(False, *values)
        if kind == "d" and len(values) == 2:
            return cls(True, 0, *values)
        raise ValueError(f"not a position in a queue: {text!r}")

    def __str__(self) -> str:
        if self.delayed:
            return f"d.{self.available_at}.{self.id}"
        return f"r.{self.priority}.{self.available_at}.{self.id}"

    def params(self) -> dict[str, int]:
        return {"priority": self.priority, "available_at": self.available_at, "id": self.id}


@dataclass(frozen=True, slots=True)
class FailedJob:
    """A dead letter (``askr_failed_jobs``) or a row of another layout's failed-jobs table."""

    id: int
    uuid: str | None
    queue: str
    payload: bytes | str
    exception: str | None
    #: Unix seconds.
    failed_at: int
    #: Deliveries made (contract v1 records them; Laravel's table does not: None).
    attempts: int | None = None
    #: Laravel's connection name (None on contract v1's table).
    connection: str | None = None


class QueueAdmin(Protocol):
    """The operator's verbs on one table layout (contract v1's ``askr``, or a registered one)."""

    #: ``askr`` (contract v1) or a registered layout's name.
    layout: str
    #: The jobs table and the failed table, as named in this database.
    tables: tuple[str, str]

    def stats(self) -> list[QueueStats]:
        """Every queue holding a job or a dead letter, by name: one grouped query per table."""
        ...

    def issued(self) -> tuple[int, int]:
        """How many ids the jobs table and the failed table have handed out (rows ever
        inserted, deleted ones included; 0 before the first): two cheap reads a
        throughput is counted from."""
        ...

    def attempts(self) -> dict[str, dict[int, int]]:
        """Per queue, how many of its jobs have used how many attempts."""
        ...

    def is_known(self, queue: str) -> bool:
        """True when ``queue`` holds a job or a dead letter (or, on contract v1, a binding)."""
        ...

    def peek(self, queue: str, n: int, after: PeekAfter | None = None) -> list[WaitingJob]:
        """The next ``n`` unheld jobs of ``queue`` in the order claims take them (the
        ready ones first, then the delayed ones by when they become ready); after
        ``after`` when given (the next page)."""
        ...

    def job(self, queue: str, job_id: int) -> WaitingJob | None:
        """Job ``job_id`` of ``queue``, held or not (with its holder where the layout records
        one); None when no such job is there (done, or never was)."""
        ...

    def held(self, queue: str, n: int) -> list[WaitingJob]:
        """The live reservations of ``queue``, the soonest to lapse first, with holders
        (:class:`~kombu_sqlqueue.exceptions.ConfigurationError` from a layout whose table
        records no holder)."""
        ...

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        """Who holds live reservations, per queue (empty where the layout records none);
        of ``queues`` alone when given — those :meth:`stats` says hold jobs
        (``held_queues``): on a large table, much cheaper than every queue's."""
        ...

    def release_holder(self, holder: str, queue: str | None = None) -> int:
        """Hand back every reservation signed ``holder`` (of ``queue``); how many."""
        ...

    def failed(
        self, queue: str | None = None, limit: int = 50, before: int | None = None
    ) -> list[FailedJob]:
        """The newest ``limit`` dead letters (of ``queue``, or of every queue); ``before``:
        only rows of a smaller id (the next page: keyset, no OFFSET)."""
        ...

    def find_failed(self, ref: str) -> list[FailedJob]:
        """Dead letters whose row id or uuid is ``ref`` (a Celery task id, Laravel's ID)."""
        ...

    def failed_ids(self, queue: str | None = None) -> list[int]:
        """The ids of every dead letter (of ``queue``), oldest first — no payload read."""
        ...

    def retry_failed(self, ids: Sequence[int]) -> int:
        """Put the dead letters ``ids`` back on their queues as new jobs, ready now with
        their attempts reset (Laravel's ``queue:retry``), and forget them; return how many."""
        ...

    def forget_failed(self, ids: Sequence[int]) -> int:
        """Delete the dead letters ``ids``; return how many."""
        ...

    def flush_failed(self, older_than: float | None = None, queue: str | None = None) -> int:
        """Delete dead letters (older than ``older_than`` seconds; of ``queue``); how many."""
        ...

    def purge(self, queue: str) -> int:
        """Delete the jobs of ``queue`` no one holds (seed 004's clear); return how many."""
        ...

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """Pause ``queue`` for every worker of the layout (for ``for_seconds``, or until
        resumed); a queue no one has used yet may be paused. Returns when the pause ends
        by itself (unix seconds), None when it lasts until resumed."""
        ...

    def resume(self, queue: str) -> bool:
        """End a pause of ``queue``; False when it was not paused."""
        ...

    def limit(self, queue: str, concurrency: int | None) -> None:
        """At most ``concurrency`` jobs of ``queue`` held at once (None: no limit), where
        the layout's workers honour one (else a named error)."""
        ...

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """At most ``rate`` jobs of ``queue`` handed out (None: no rate limit), where the
        layout's workers honour one (else a named error)."""
        ...

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """At most ``per_key`` jobs of one concurrency key of ``queue`` held at once (None:
        no such limit), where the layout's workers honour one (else a named error)."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...


class _Host(QueryRunner, Protocol):
    """What :class:`ContractAdmin` uses of its store (a :class:`~.store.JobStore`)."""

    clock: Callable[[], float]

    def purge(self, queue: str) -> int: ...

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]: ...

    def release_holder(
        self, holder: str, *, queue: str | None = None, instance: str | None = None
    ) -> int: ...

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None: ...

    def resume(self, queue: str) -> bool: ...

    def limit(self, queue: str, concurrency: int | None) -> None: ...

    def rate_limit(self, queue: str, rate: Rate | None) -> None: ...

    def key_limit(self, queue: str, per_key: int | None) -> None: ...

    def controls(self) -> list[QueueControl]: ...

    def close(self) -> None: ...


def merge_stats(
    now: int, jobs: Sequence[Sequence[Any]], dead: Sequence[Sequence[Any]]
) -> list[QueueStats]:
    """:class:`QueueStats` from the rows of a ``*_stats`` query (queue, total, ready,
    reserved, delayed, oldest ready ``available_at``) and a dead-letter count query
    (queue, count), sorted by queue name."""
    found: dict[str, QueueStats] = {}
    for queue, total, ready, reserved, delayed, oldest_at in jobs:
        oldest = max(0, now - int(oldest_at)) if oldest_at is not None else 0
        found[str(queue)] = QueueStats(
            str(queue), int(total), int(ready), int(reserved), int(delayed), oldest
        )
    for queue, count in dead:
        found[str(queue)] = replace(
            found.get(str(queue), QueueStats(str(queue))), dead_letters=int(count)
        )
    return [found[name] for name in sorted(found)]


def with_control(row: QueueStats, control: QueueControl, now: int, now_us: int) -> QueueStats:
    """``row`` with what ``control`` says of it at ``now`` (``now_us``, to the
    microsecond): paused, limited, and how many ready jobs the limits hold back (what a
    claim of every ready job could not take now — under a rate limit spacing jobs one at a
    time, all but one while the queue drains at the rate)."""
    paused = control.paused_at(now)
    waiting = 0
    if control.concurrency is not None or control.rate is not None:
        # What the limits alone hold back (a pause holds back everything, said apart).
        unpaused = replace(control, paused=False)
        allowed = claim_allowance(unpaused, now, row.ready, row.reserved, now_us)
        waiting = row.ready - allowed.rows
    return replace(
        row,
        paused=paused,
        resume_at=control.resume_at if paused else None,
        concurrency=control.concurrency,
        rate=control.rate,
        key_concurrency=control.key_concurrency,
        waiting_on_limit=waiting,
    )


def held_queues(stats: Sequence[QueueStats]) -> list[str]:
    """The queues ``stats`` says have held jobs: what :meth:`QueueAdmin.holders` reads."""
    return [row.queue for row in stats if row.reserved]


def holders_by_queue(holdings: Sequence[Holding]) -> dict[str, dict[str, int]]:
    """Queue → holder name (``-``: unsigned) → live reservations: what
    :attr:`QueueStats.holders` shows, from :meth:`QueueAdmin.holders`."""
    held: dict[str, dict[str, int]] = {}
    for h in holdings:
        by = held.setdefault(h.queue, {})
        by[h.holder or "-"] = by.get(h.holder or "-", 0) + h.jobs
    return held


def group_attempts(rows: Sequence[Sequence[Any]]) -> dict[str, dict[int, int]]:
    """(queue, attempts, count) rows as queue → {attempts: count}."""
    grouped: dict[str, dict[int, int]] = {}
    for queue, attempts, count in rows:
        grouped.setdefault(str(queue), {})[int(attempts)] = int(count)
    return {q: dict(sorted(h.items())) for q, h in grouped.items()}


def cutoff(now: float, older_than: float | None) -> float:
    """The time before which a flush deletes (everything up to now when ``older_than`` is
    None)."""
    return now + 1 if older_than is None else now - older_than


#: Above every row id: ``failed(before=None)``'s bound (one statement for every page).
NO_ID_BOUND = 2**62


def below(before: int | None) -> int:
    """The ``:before`` bound of a page of failed jobs (None: the first page)."""
    return NO_ID_BOUND if before is None else int(before)


def row_ref(ref: str) -> dict[str, Any]:
    """The parameters of a ``*_find`` query for ``ref``: a row id when it is one, and the
    uuid always."""
    return {"id": int(ref) if ref.isdigit() and len(ref) < 19 else -1, "uuid": ref}


def read_rows(store: StoreRunner, query: Any, params: Mapping[str, Any] | None = None) -> list[Any]:
    """Every row of one read-only statement."""
    return store._run(
        lambda tx: list(tx.execute(query, params).fetchall()), read_only=True, single=True
    )


def ids_issued(
    store: StoreRunner, statement: Callable[[str], Any], tables: tuple[str, str]
) -> tuple[int, int]:
    """:meth:`QueueAdmin.issued` of a layout's two tables, by ``statement`` (the engine's
    ``ids_issued``)."""

    def work(tx: Tx) -> tuple[int, int]:
        jobs, failed = (tx.execute(statement(table)).fetchone() for table in tables)
        return int((jobs or [0])[0] or 0), int((failed or [0])[0] or 0)

    return store._run(work, read_only=True)


def per_row(store: StoreRunner, ids: Sequence[int], settle: Callable[[Tx, int, int], bool]) -> int:
    """``settle(tx, id, now)`` for each of ``ids``, :data:`ADMIN_CHUNK` ids a transaction
    (a retry of thousands neither holds one long transaction nor pays a commit each);
    return how many it settled."""
    done = 0
    for start in range(0, len(ids), ADMIN_CHUNK):
        chunk, now = ids[start : start + ADMIN_CHUNK], store._now()
        done += store._run(
            lambda tx, chunk=chunk, now=now: sum(settle(tx, i, now) for i in chunk)  # type: ignore[misc]
        )
    return done


class ContractAdmin:
    """:class:`QueueAdmin` over contract v1's tables of one :class:`~.store.JobStore`
    (``store.admin``)."""

    layout = "askr"
    tables = ("askr_jobs", "askr_failed_jobs")

    def __init__(self, store: _Host) -> None:
        self._store = store

    def stats(self) -> list[QueueStats]:
        s = self._store
        now = s._now()

        def work(tx: Tx) -> tuple[list[Any], list[Any]]:
            jobs = tx.execute(s.q.queue_stats, {"now": now}).fetchall()
            return jobs, tx.execute(s.q.dead_letter_counts, {}).fetchall()

        jobs, dead = s._run(work, read_only=True)
        found = {row.queue: row for row in merge_stats(now, jobs, dead)}
        for control in s.controls():
            if control.in_force(now):
                row = with_control(
                    found.get(control.queue, QueueStats(control.queue)),
                    control,
                    now,
                    int(s.clock() * 1_000_000),
                )
                if control.key_concurrency is not None:
                    row = self._with_key_waits(row, control.key_concurrency, now)
                found[control.queue] = row
        return [found[name] for name in sorted(found)]

    def limit(self, queue: str, concurrency: int | None) -> None:
        """At most ``concurrency`` jobs of ``queue`` held at once (``JobStore.limit``)."""
        self._store.limit(queue, concurrency)

    def _with_key_waits(self, row: QueueStats, per_key: int, now: int) -> QueueStats:
        """``row`` counting the ready jobs of keys at the per-key limit as waiting on a
        limit (a job of a busy key waits behind it), and how many keys are at it."""
        params = {"queue": row.queue, "now": now, "per_key": per_key}
        waiting, keys = self._store._run(
            lambda tx: tx.execute(self._store.q.control_key_waiting, params).fetchone(),
            read_only=True,
            single=True,
        )
        return replace(
            row, waiting_on_limit=row.waiting_on_limit + int(waiting), keys_at_limit=int(keys)
        )

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """At most ``rate`` jobs of ``queue`` handed out (``JobStore.rate_limit``)."""
        self._store.rate_limit(queue, rate)

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """At most ``per_key`` jobs of one key held at once (``JobStore.key_limit``)."""
        self._store.key_limit(queue, per_key)

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """Pause ``queue`` fleet-wide (``JobStore.pause``); when it ends, None: resumed."""
        return self._store.pause(queue, for_seconds)

    def resume(self, queue: str) -> bool:
        """End a pause of ``queue``; False when it was not paused (``JobStore.resume``)."""
        return self._store.resume(queue)

    def issued(self) -> tuple[int, int]:
        return ids_issued(self._store, self._store.q.ids_issued, self.tables)

    def attempts(self) -> dict[str, dict[int, int]]:
        return group_attempts(read_rows(self._store, self._store.q.queue_attempts))

    def is_known(self, queue: str) -> bool:
        validate_queue_name(queue)
        ((found,),) = read_rows(self._store, self._store.q.queue_known, {"queue": queue})
        return bool(found)

    def peek(self, queue: str, n: int, after: PeekAfter | None = None) -> list[WaitingJob]:
        # The two ready halves in claim order (priority, then age), then the delayed ones;
        # after a ready job, the ready ones past it; after a delayed one, delayed ones only.
        q, past = self._store.q, {} if after is None else after.params()
        ready: list[WaitingJob] = []
        if after is None or not after.delayed:
            ready = sorted(
                self._waiting(
                    q.queue_peek if after is None else q.queue_peek_after, queue, n, **past
                ),
                key=lambda job: (-job.priority, job.available_at, job.id),
            )[: max(0, n)]
        if len(ready) < n:
            if after is not None and after.delayed:
                ready += self._waiting(q.queue_peek_delayed_after, queue, n - len(ready), **past)
            else:
                ready += self._waiting(q.queue_peek_delayed, queue, n - len(ready))
        return ready

    def held(self, queue: str, n: int) -> list[WaitingJob]:
        return self._waiting(self._store.q.queue_held, queue, n)

    def job(self, queue: str, job_id: int) -> WaitingJob | None:
        found = self._waiting(self._store.q.queue_job, queue, 1, id=int(job_id))
        return found[0] if found else None

    def _waiting(self, query: Any, queue: str, n: int, **more: Any) -> list[WaitingJob]:
        """The rows of ``queue_peek`` / ``queue_held`` / ``queue_job`` (the last two add
        the reservation)."""
        validate_queue_name(queue)
        s = self._store
        params = {"queue": queue, "now": s._now(), "n": max(0, int(n)), **more}
        found = []
        for i, q, p, pr, at, a, _limit, u, c, *held in read_rows(s, query, params):
            until, by, instance = held or (None, None, None)
            found.append(
                WaitingJob(
                    id=int(i),
                    queue=str(q),
                    payload=bytes(p),
                    attempts=int(a),
                    available_at=int(at),
                    created_at=int(c),
                    priority=int(pr),
                    uuid=u,
                    reserved_until=None if until is None else int(until),
                    holder=by,
                    instance=instance,
                )
            )
        return found

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        return self._store.holders(queues)

    def release_holder(self, holder: str, queue: str | None = None) -> int:
        return self._store.release_holder(holder, queue=queue)

    @staticmethod
    def _failed(rows: Sequence[Sequence[Any]]) -> list[FailedJob]:
        return [
            FailedJob(int(i), u, str(q), bytes(p), e, int(f), int(a))
            for i, u, q, p, e, a, f in rows
        ]

    def failed(
        self, queue: str | None = None, limit: int = 50, before: int | None = None
    ) -> list[FailedJob]:
        s = self._store
        if queue is not None:
            validate_queue_name(queue)
        query = s.q.dead_letter_recent if queue is None else s.q.dead_letter_recent_queue
        params = {"queue": queue, "limit": max(0, int(limit)), "before": below(before)}
        rows = s._run(lambda tx: tx.execute(query, params).fetchall(), read_only=True, single=True)
        return self._failed(rows)

    def find_failed(self, ref: str) -> list[FailedJob]:
        return self._failed(read_rows(self._store, self._store.q.dead_letter_find, row_ref(ref)))

    def failed_ids(self, queue: str | None = None) -> list[int]:
        s = self._store
        if queue is not None:
            validate_queue_name(queue)
        query = s.q.dead_letter_ids if queue is None else s.q.dead_letter_ids_queue
        return [int(i) for (i,) in read_rows(s, query, {"queue": queue})]

    def retry_failed(self, ids: Sequence[int]) -> int:
        s = self._store

        def retry(tx: Tx, job_id: int, now: int) -> bool:
            params = {"id": job_id, "now": now, "max_attempts": DEFAULT_MAX_ATTEMPTS}
            if tx.execute(s.q.dead_letter_retry_copy, params).rowcount != 1:
                return False
            tx.execute(s.q.dead_letter_forget, params)
            return True

        return per_row(s, ids, retry)

    def forget_failed(self, ids: Sequence[int]) -> int:
        s = self._store
        return per_row(
            s, ids, lambda tx, i, _now: tx.execute(s.q.dead_letter_forget, {"id": i}).rowcount == 1
        )

    def flush_failed(self, older_than: float | None = None, queue: str | None = None) -> int:
        s = self._store
        params: dict[str, Any] = {"cutoff": math.ceil(cutoff(s._now(), older_than))}
        query = s.q.dead_letter_sweep
        if queue is not None:
            validate_queue_name(queue)
            params["queue"] = queue
            query = s.q.dead_letter_sweep_queue
        return int(s._run(lambda tx: tx.execute(query, params).rowcount, single=True))

    def purge(self, queue: str) -> int:
        return self._store.purge(queue)

    def close(self) -> None:
        self._store.close()
