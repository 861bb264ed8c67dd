"""The in-memory job store: contract v1 in plain Python, for tests and examples.

:class:`MemoryJobStore` has :class:`~.store.JobStore`'s verbs and gives the same answers —
claim order, visibility timeout, fenced settlements, attempts and dead letters, time to
live, backlog and size, and the topology (bindings, queue records) — each verb mirroring
its statement in ``engines/base.py``. It is the conformance suite's fourth engine, and lets
the Kombu transport (``sqlqueue+memory://``) and a worker on contract v1's layout (the
bridge's ``open_table("memory://…", layout="askr")``) be tested without a database, as dramatiq's
``StubBroker`` or procrastinate's ``InMemoryConnector`` do.

**One process only.** The data lives in this interpreter, shared by every store opened on
the same name (``memory://`` or ``memory://name``: a module-level registry, as Kombu's
``memory://`` transport keeps), so two Kombu connections in one process see the same
queues. Nothing is durable, no other process sees it, and a forked child gets a copy.
No SQL here: one lock per name guards everything.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from ..exceptions import InvalidURL, MessageTooLarge, WrongDatabase
from ..limits import fit_utf8
from .claiming import MAX_CLAIM_ROUNDS, ClaimedRow, ClaimParams, exhausted_reason, screen
from .controls import (
    QueueControl,
    Rate,
    check_concurrency,
    check_concurrency_key,
    check_pause,
    check_rate,
    claim_allowance,
    rate_charged,
    rate_overdue,
)
from .database import StoreOptions
from .enlist import Enlistment
from .model import (
    Backlog,
    ClaimedJob,
    ClaimResult,
    DeadLetter,
    Holding,
    NewJob,
    Receipt,
    Route,
    dedupe_key,
    job_times,
    ready_at,
    reservation_deadline,
)
from .names import validate_queue_name

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: The URL scheme of the in-memory store (``memory://name``).
MEMORY_SCHEME = "memory"

#: The largest payload the memory store takes, as the SQL engines' default limit.
MAX_PAYLOAD_BYTES = 1_000_000_000


def is_memory_url(url: str) -> bool:
    """True when ``url`` names the in-memory store (``memory://…``)."""
    scheme, sep, _rest = url.partition("://")
    return bool(sep) and scheme.lower() == MEMORY_SCHEME


def memory_name(url: str) -> str:
    """The registry name in ``memory://name`` (``""`` for ``memory://``)."""
    if not is_memory_url(url):
        raise InvalidURL(f"{url!r} is not an in-memory store URL (memory:// or memory://name)")
    return url.partition("://")[2].strip("/")


@dataclass(slots=True)
class _Row:
    """A row of ``askr_jobs``, its fields in the order ``get_job`` returns them."""

    id: int
    queue: str
    payload: bytes
    priority: int
    available_at: int
    reserved_until: int | None
    attempts: int
    max_attempts: int
    created_at: int
    reserved_token: str | None
    uuid: str | None
    expires_at: int | None
    reserved_by: str | None = None
    reserved_instance: str | None = None
    concurrency_key: str | None = None

    def ready(self, now: int) -> bool:
        return self.available_at <= now and (
            self.reserved_until is None or self.reserved_until <= now
        )

    def order(self) -> tuple[int, int, int]:
        """The claim order (:meth:`ClaimedRow.order <.claiming.ClaimedRow.order>`)."""
        return (-self.priority, self.available_at, self.id)

    def claim(self, params: ClaimParams) -> ClaimedRow:
        """Reserve this row for ``params``' claim; the row as the claim read it."""
        lapsed = self.reserved_until is not None
        self.reserved_until, self.reserved_token = params.until, params.token
        self.reserved_by, self.reserved_instance = params.holder, params.instance
        self.attempts += 1
        return ClaimedRow(
            self.id,
            self.queue,
            self.payload,
            self.priority,
            self.available_at,
            self.attempts,
            self.max_attempts,
            self.uuid,
            self.expires_at,
            lapsed,
        )


@dataclass(slots=True)
class _Binding:
    exchange: str
    routing_key: str
    queue: str
    exchange_type: str
    created_at: int


@dataclass(slots=True)
class _QueueRecord:
    expires_seconds: int | None
    last_used_at: int
    message_ttl_ms: int | None


class _Space:
    """The data of one ``memory://`` name. Every field is guarded by :attr:`lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Notified when a job becomes ready now (wakes ``wait_for_jobs``).
        self.ready = threading.Condition(self.lock)
        self.jobs: dict[int, _Row] = {}
        #: queue -> its rows by id (the claim reads one queue, as the claim index does)
        self.by_queue: dict[str, dict[int, _Row]] = {}
        self.last_job_id = 0
        self.dead: dict[int, DeadLetter] = {}
        self.last_dead_id = 0
        self.bindings: dict[tuple[str, str, str], _Binding] = {}
        self.queues: dict[str, _QueueRecord] = {}
        #: What another package keeps beside this name's jobs (``MemoryJobStore.beside``).
        self.beside: dict[str, Any] = {}
        #: queue → its controls (``askr_queue_controls``).
        self.controls: dict[str, QueueControl] = {}
        #: (queue, dedupe key) → when first written (``askr_dedupe``).
        self.dedupe: dict[tuple[str, str], int] = {}
        #: Wake-ups so far, and the number of the last one per queue.
        self.wakeups = 0
        self.woken: dict[str, int] = {}

    def insert(self, row: _Row) -> int:
        self.last_job_id += 1
        row.id = self.last_job_id
        self.jobs[row.id] = row
        self.by_queue.setdefault(row.queue, {})[row.id] = row
        if row.available_at <= row.created_at:  # ready now, as PostgreSQL NOTIFYs
            self.wake(row.queue)
        return row.id

    def delete(self, row: _Row) -> None:
        del self.jobs[row.id]
        rows = self.by_queue[row.queue]
        del rows[row.id]
        if not rows:
            del self.by_queue[row.queue]

    def held(self, receipt: Receipt) -> _Row | None:
        """The row if ``receipt`` still holds it (``id = :id AND reserved_token = :token``)."""
        row = self.jobs.get(receipt.job_id)
        return row if row is not None and row.reserved_token == receipt.token else None

    def rows_of(self, queue: str) -> list[_Row]:
        return list(self.by_queue.get(queue, {}).values())

    def wake(self, queue: str) -> None:
        self.wakeups += 1
        self.woken[queue] = self.wakeups
        self.ready.notify_all()


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


def _space(name: str) -> _Space:
    with _SPACES_LOCK:
        space = _SPACES.get(name)
        if space is None:
            space = _SPACES[name] = _Space()
        return space


def reset(url: str | None = None) -> None:
    """Forget the data of the memory store at ``url`` (of every name when None); stores
    still open on it keep the old data, so reset between tests, not during one."""
    with _SPACES_LOCK:
        if url is None:
            _SPACES.clear()
        else:
            _SPACES.pop(memory_name(url), None)


class MemoryJobStore:
    """Contract-v1 job operations on this process's memory (see the module docstring).

    The same public interface and answers as :class:`~.store.JobStore`: settlements are
    fenced by :class:`~.model.Receipt`, time is :attr:`clock` (unix seconds, whole seconds
    stored, rounded as ``JobStore`` rounds), bad arguments raise the same exceptions.
    Thread-safe: one lock per name. ``options`` are accepted and not used (no database).
    """

    def __init__(self, url: str = "memory://", options: StoreOptions | None = None) -> None:
        #: The registry name: stores of the same name share their data.
        self.name = memory_name(url)
        self.url = f"{MEMORY_SCHEME}://{self.name}"
        self.options = options or StoreOptions()
        #: Unix-seconds clock; every operation reads it once. Tests may replace it.
        self.clock: Callable[[], float] = time.time
        #: The name claims sign their reservations with (``JobStore.holder``).
        self.holder: str | None = None
        #: The most bytes one payload may have (lower it to test ``MessageTooLarge``).
        self.max_payload_bytes = MAX_PAYLOAD_BYTES
        #: Bindings and queue records, beside this store's jobs.
        self.topology = MemoryTopology(self)
        self._space = _space(self.name)
        with self._space.lock:
            self._seen = self._space.wakeups
        #: Set by :meth:`interrupt_wait`, taken by the wait it ends.
        self._interrupted = False

    def _now(self) -> int:
        return int(self.clock())

    def beside(self, key: str, new: Callable[[], T]) -> tuple[threading.Lock, T]:
        """The value another package keeps under ``key`` beside this name's jobs (made
        with ``new`` the first time), shared by every store of the name, and the lock
        that guards it (a layout's own state, as a table beside the queue's would be)."""
        with self._space.lock:
            found = self._space.beside.get(key)
            if found is None:
                found = self._space.beside[key] = new()
            return self._space.lock, found

    # -- schema: nothing to create -------------------------------------------------------

    def ensure_ready(self) -> None:
        """Nothing to connect to or create: the data exists from the first use of its name."""

    def create_schema(self) -> None:
        """Nothing to create (kept for :class:`~.store.JobStore`'s interface)."""

    def verify_schema(self) -> None:
        """Nothing to verify: there is no schema that could lack a column."""

    def close(self) -> None:
        """Nothing to release; the data stays for other stores of this name (see :func:`reset`)."""

    # -- enqueue -------------------------------------------------------------------------

    def check_payload_size(self, size: int) -> None:
        """Raise :class:`MessageTooLarge` for a payload past :attr:`max_payload_bytes`."""
        if size > self.max_payload_bytes:
            raise MessageTooLarge(
                f"a message of {size:,} bytes is larger than {self.max_payload_bytes:,} bytes, "
                f"the most the in-memory store {self.url} takes in one message; nothing was stored"
            )

    def _new_row(self, job: NewJob, now: float) -> _Row:
        available_at, expires_at = job_times(job, now)
        self.check_payload_size(len(job.payload))
        return _Row(
            0,
            job.queue,
            bytes(job.payload),
            int(job.priority),
            available_at,
            None,
            int(job.attempts),
            int(job.max_attempts),
            int(now),
            None,
            job.uuid,
            expires_at,
            concurrency_key=check_concurrency_key(job.concurrency_key),
        )

    def enqueue(self, job: NewJob) -> int:
        """Store one job; return its id."""
        row = self._new_row(job, self.clock())
        with self._space.lock:
            return self._space.insert(row)

    def enqueue_once(self, job: NewJob, key: str, window: float) -> int | None:
        """Store ``job`` unless ``key`` was first written to its queue within ``window``
        seconds (``JobStore.enqueue_once``)."""
        now = self.clock()
        row = self._new_row(job, now)
        stored = (job.queue, dedupe_key(key, window))
        with self._space.lock:
            first = self._space.dedupe.get(stored)
            if first is not None and first > now - window:
                return None
            self._space.dedupe[stored] = int(now)
            return self._space.insert(row)

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Store many jobs at once; return their ids in order."""
        now = self.clock()
        rows = [self._new_row(job, now) for job in jobs]
        with self._space.lock:
            return [self._space.insert(row) for row in rows]

    # -- claim ---------------------------------------------------------------------------

    def claim(
        self, queue: str, n: int, visibility: float, max_attempts: int | None = None
    ) -> ClaimResult:
        """Reserve up to ``n`` ready jobs of ``queue`` for ``visibility`` seconds, as
        :meth:`JobStore.claim <.store.JobStore.claim>` does."""
        params = ClaimParams.of(queue, n, visibility, self.clock(), self.holder)
        if n <= 0:
            return ClaimResult([])
        with self._space.lock:
            result = self._claim_in(params, max_attempts)
        result.log(logger, queue)
        return result

    def _claim_in(self, params: ClaimParams, max_attempts: int | None) -> ClaimResult:
        s = self._space
        params = params.at_us(self.clock())  # inside the lock, as JobStore's row lock
        now, token = params.now, params.token
        control = s.controls.get(params.queue)
        if control is not None and control.paused and not control.paused_at(now):
            control = dataclasses.replace(control, paused=False, resume_at=None)
            s.controls[params.queue] = control  # a pause whose time ran out
            if not control.in_force(now):
                del s.controls[params.queue]  # control_drop_idle
                control = None
        held = 0
        if control is not None and control.concurrency is not None:
            held = sum(
                1 for r in s.rows_of(params.queue) if (r.reserved_until or 0) > now
            )  # control_held
        allowance = claim_allowance(control, now, params.n, held, params.now_us)
        params = params.more(allowance.rows)
        if params.n <= 0:
            self._spend_rate(params, control, 0)
            return ClaimResult([], retry_in=allowance.retry_in)
        jobs: list[ClaimedJob] = []
        dead = expired = 0
        # Rounds as JobStore's: a round that met expired rows and came up short claims again;
        # under a per-key limit each round takes one row, so the next counts it.
        key_limit = None if control is None else control.key_concurrency
        rounds = MAX_CLAIM_ROUNDS + (params.n if key_limit is not None else 0)
        for _round in range(rounds):
            ready = (r for r in s.rows_of(params.queue) if r.ready(now))
            if key_limit is None:
                taken = heapq.nsmallest(params.n - len(jobs), ready, key=_Row.order)
            else:
                taken = self._keyed_pick(params.queue, now, key_limit, ready)
            screened = screen([row.claim(params) for row in taken], now, token, max_attempts)
            jobs += screened.jobs
            by_id = {row.id: row for row in taken}
            for claimed, limit in screened.exhausted:
                self._dead_letter_in(by_id[claimed.id], exhausted_reason(limit), now, uncounted=1)
            dead += len(screened.exhausted)
            for claimed in screened.past_ttl:
                # Past its TTL: discarded unconsumed, as AMQP does (not a failure).
                s.delete(by_id[claimed.id])
            expired += len(screened.past_ttl)
            if len(jobs) >= params.n:
                break
            if key_limit is not None:
                if not taken:
                    break  # nothing left this claim may take
                continue
            if not screened.past_ttl:
                break
        self._spend_rate(params, control, len(jobs))
        # Held back only when the rate cut the claim and the queue had more to give.
        held_back = allowance.retry_in if len(jobs) + dead + expired >= params.n else None
        return ClaimResult(jobs, dead, expired, held_back)

    def _keyed_pick(
        self, queue: str, now: int, key_limit: int, ready: Iterable[_Row]
    ) -> list[_Row]:
        """The first of ``ready`` in claim order whose concurrency_key has room under
        ``key_limit``, counting the queue's held jobs (job_claim_keyed: one a round)."""
        held = Counter(
            r.concurrency_key
            for r in self._space.rows_of(queue)
            if r.concurrency_key is not None and (r.reserved_until or 0) > now
        )
        for row in sorted(ready, key=_Row.order):
            if row.concurrency_key is None or held[row.concurrency_key] < key_limit:
                return [row]
        return []

    def _spend_rate(self, params: ClaimParams, control: QueueControl | None, taken: int) -> None:
        """Spend ``taken`` claims of the queue's rate limit, as JobStore._spend_rate_in."""
        if control is None or control.rate is None:
            return
        rate, tat = control.rate, control.rate_tat_us
        if taken or rate_overdue(rate, tat, params.now_us):
            charged = rate_charged(rate, tat, params.now_us, taken)
            self._space.controls[params.queue] = dataclasses.replace(control, rate_tat_us=charged)

    def ack_and_claim(
        self,
        receipt: Receipt,
        then: Sequence[NewJob],
        queues: Sequence[str],
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[bool, ClaimedJob | None]:
        """Ack a delivery (storing ``then``) and claim the next job of the first of
        ``queues`` that has one, at once. Returns (acked, next job)."""
        now = self.clock()
        rows = [self._new_row(job, now) for job in then]
        claims = [ClaimParams.of(q, 1, visibility, self.clock(), self.holder) for q in queues]
        results: list[tuple[ClaimResult, str]] = []
        outcome: tuple[bool, ClaimedJob | None]
        with self._space.lock:
            acked = self._ack_in(receipt, rows)
            outcome = (acked, None)
            for params in claims:
                result = self._claim_in(params, max_attempts)
                results.append((result, params.queue))
                if result.jobs:
                    outcome = (acked, result.jobs[0])
                    break
        for result, queue in results:
            result.log(logger, queue)
        return outcome

    # -- settlements (fenced) ------------------------------------------------------------

    def _ack_in(self, receipt: Receipt, then: Sequence[_Row] = ()) -> bool:
        row = self._space.held(receipt)
        if row is None:
            return False
        self._space.delete(row)
        self._slot_freed(row.queue)
        for new in then:
            self._space.insert(new)
        return True

    def ack(self, receipt: Receipt) -> bool:
        """Delete the job if ``receipt`` still holds it; ``False`` means stale (nothing written)."""
        with self._space.lock:
            return self._ack_in(receipt)

    def ack_and_enqueue(self, receipt: Receipt, jobs: Sequence[NewJob]) -> bool:
        """Ack a delivery and store ``jobs`` at once; when the delivery is stale nothing
        is written and ``False`` is returned."""
        now = self.clock()
        rows = [self._new_row(job, now) for job in jobs]
        with self._space.lock:
            return self._ack_in(receipt, rows)

    def ack_many(self, receipts: Sequence[Receipt]) -> set[Receipt]:
        """Ack several deliveries at once; return those that were still held."""
        with self._space.lock:
            return {r for r in set(receipts) if self._ack_in(r)}

    def ack_many_and_claim(
        self,
        receipts: Sequence[Receipt],
        queue: str,
        n: int,
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[set[Receipt], ClaimResult]:
        """:meth:`ack_many` then :meth:`claim`, at once."""
        params = ClaimParams.of(queue, n, visibility, self.clock(), self.holder)
        with self._space.lock:
            acked = {r for r in set(receipts) if self._ack_in(r)}
            result = self._claim_in(params, max_attempts) if n > 0 else ClaimResult([])
        result.log(logger, queue)
        return acked, result

    # -- flow control ----------------------------------------------------------------

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """Pause ``queue``, as :meth:`JobStore.pause <.store.JobStore.pause>` does."""
        now = self.clock()
        resume_at = check_pause(queue, for_seconds, now)
        with self._space.lock:
            control = self._space.controls.get(queue, QueueControl(queue))
            self._space.controls[queue] = dataclasses.replace(
                control, paused=True, resume_at=resume_at
            )
        return resume_at

    def limit(self, queue: str, concurrency: int | None) -> None:
        """Limit ``queue``'s held jobs, as :meth:`JobStore.limit <.store.JobStore.limit>`."""
        if concurrency is not None:
            check_concurrency(queue, concurrency)
        validate_queue_name(queue)
        with self._space.lock:
            control = self._space.controls.get(queue, QueueControl(queue))
            self._settle_control(dataclasses.replace(control, concurrency=concurrency))

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """Limit ``queue``'s held jobs per concurrency_key, as :meth:`JobStore.key_limit
        <.store.JobStore.key_limit>` does."""
        if per_key is not None:
            check_concurrency(queue, per_key)
        validate_queue_name(queue)
        with self._space.lock:
            control = self._space.controls.get(queue, QueueControl(queue))
            self._settle_control(dataclasses.replace(control, key_concurrency=per_key))

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """Limit ``queue``'s claims per period, as :meth:`JobStore.rate_limit
        <.store.JobStore.rate_limit>` does."""
        validate_queue_name(queue)
        if rate is not None:
            rate = check_rate(rate)
        with self._space.lock:
            control = self._space.controls.get(queue, QueueControl(queue))
            tat = control.rate_tat_us if rate is not None and rate == control.rate else 0
            self._settle_control(dataclasses.replace(control, rate=rate, rate_tat_us=tat))

    def resume(self, queue: str) -> bool:
        """End a pause of ``queue``; False when it was not paused."""
        validate_queue_name(queue)
        with self._space.lock:
            control = self._space.controls.get(queue)
            if control is None or not control.paused:
                return False
            self._settle_control(dataclasses.replace(control, paused=False, resume_at=None))
            return True

    def _slot_freed(self, queue: str) -> None:
        """A held job of ``queue`` settled: when the queue has a concurrency limit, its idle
        consumers are woken (a slot is free), as the SQL store's _slots_freed_in does."""
        control = self._space.controls.get(queue)
        if control is not None and (
            control.concurrency is not None or control.key_concurrency is not None
        ):
            self._space.wake(queue)

    def _settle_control(self, control: QueueControl) -> None:
        """Store ``control`` (dropped when nothing is in force: control_drop_idle); wake
        the queue's idle consumers when it may hand out more than before."""
        s = self._space
        if control.in_force(0):
            s.controls[control.queue] = control
        else:
            s.controls.pop(control.queue, None)
        s.wake(control.queue)

    def controls(self) -> list[QueueControl]:
        """Every queue's controls, by queue name."""
        with self._space.lock:
            return [self._space.controls[q] for q in sorted(self._space.controls)]

    def release(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Make the job ready again after ``delay`` seconds (attempts unchanged); fenced."""
        return self._make_ready(receipt, delay, refund=False)

    def return_job(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Hand back a delivery that never started: ready after ``delay`` seconds, its
        attempt refunded; fenced."""
        return self._make_ready(receipt, delay, refund=True)

    def _make_ready(self, receipt: Receipt, delay: float, *, refund: bool) -> bool:
        available_at = ready_at(self.clock(), delay)
        s = self._space
        with s.lock:
            row = s.held(receipt)
            if row is None:
                return False
            row.reserved_until = row.reserved_token = None
            row.reserved_by = row.reserved_instance = None
            row.available_at = available_at
            if refund:
                row.attempts = max(row.attempts - 1, 0)
            if delay <= 0:  # ready now: wake idle consumers (the SQL engines poll for it)
                s.wake(row.queue)
            else:
                self._slot_freed(row.queue)
            return True

    def renew(self, receipts: Sequence[Receipt], visibility: float) -> set[Receipt]:
        """Extend the reservations still held; return the receipts that were."""
        if not receipts:
            return set()
        until = reservation_deadline(self.clock(), visibility)
        still: set[Receipt] = set()
        with self._space.lock:
            for receipt in set(receipts):
                row = self._space.held(receipt)
                if row is not None:
                    row.reserved_until = until
                    still.add(receipt)
        return still

    def _dead_letter_in(self, row: _Row, reason: str, now: int, uncounted: int = 0) -> None:
        s = self._space
        s.last_dead_id += 1
        s.dead[s.last_dead_id] = DeadLetter(
            s.last_dead_id,
            row.uuid,
            row.queue,
            row.payload,
            fit_utf8(reason),  # as JobStore: a huge reason is cut, the move goes through
            row.attempts - uncounted,  # deliveries made (a refusing claim counted one more)
            now,
        )
        s.delete(row)
        self._slot_freed(row.queue)

    def dead_letter(self, receipt: Receipt, reason: str) -> bool:
        """Move the held job to the dead letters with ``reason``, at once; fenced."""
        now = self._now()
        with self._space.lock:
            row = self._space.held(receipt)
            if row is None:
                return False
            self._dead_letter_in(row, reason, now)
            return True

    @property
    def single_writer(self) -> bool:
        """No database: no other writer to wait for."""
        return False

    def topology_in(self, enlistment: Enlistment | None) -> MemoryTopology:
        """This process's memory: there is no other writer to wait for."""
        return self.topology

    def joined(self, enlistment: Enlistment) -> Self | None:
        """No database here to share a transaction with: an enlisted publish to an
        in-memory broker is refused, as one to another database would be."""
        if enlistment.connection() is None:
            return None
        raise WrongDatabase(
            "an in-memory store (memory://) has no database to write in your transaction: "
            "publish outside enlist(), or use a database broker URL"
        )

    def dead_letter_message(self, job: NewJob, reason: str) -> None:
        """As :meth:`JobStore.dead_letter_message`: a dead letter of a message that never
        became a job."""
        validate_queue_name(job.queue)
        self.check_payload_size(len(job.payload))
        now = self._now()
        with self._space.lock:
            s = self._space
            s.last_dead_id += 1
            s.dead[s.last_dead_id] = DeadLetter(
                s.last_dead_id, job.uuid, job.queue, bytes(job.payload), fit_utf8(reason),
                job.attempts, now,
            )  # fmt: skip

    # -- queues --------------------------------------------------------------------------

    def backlog(self, queue: str) -> Backlog:
        """Contract v1's ``total``, ``ready`` and ``oldest_seconds`` for ``queue``."""
        validate_queue_name(queue)
        now = self._now()
        with self._space.lock:
            rows = self._space.rows_of(queue)
            ready = [r.available_at for r in rows if r.ready(now)]
        return Backlog(queue, len(rows), len(ready), now - min(ready) if ready else 0)

    def size(self, queue: str) -> int:
        """Jobs waiting on ``queue``: ready, delayed, or with a lapsed reservation."""
        validate_queue_name(queue)
        now = self._now()
        with self._space.lock:
            rows = self._space.rows_of(queue)
            return sum(r.reserved_until is None or r.reserved_until <= now for r in rows)

    def purge(self, queue: str) -> int:
        """Delete the unreserved jobs of ``queue`` (delayed ones too); return how many.
        A reservation, even a lapsed one, stays: its holder may still be running it."""
        validate_queue_name(queue)
        with self._space.lock:
            return self._delete_where(queue, lambda r: r.reserved_until is None)

    def delete_queue(self, queue: str) -> int:
        """Delete every job of ``queue``, held ones included; return how many."""
        validate_queue_name(queue)
        with self._space.lock:
            return self._delete_where(queue, lambda r: True)

    def _delete_where(self, queue: str, doomed: Callable[[_Row], bool]) -> int:
        rows = [r for r in self._space.rows_of(queue) if doomed(r)]
        for row in rows:
            self._space.delete(row)
        return len(rows)

    # -- dead letters --------------------------------------------------------------------

    def sweep_dead_letters(self, retention: float) -> int:
        """Delete dead letters older than ``retention`` seconds; return how many."""
        cutoff = self._now() - int(retention)
        with self._space.lock:
            dead = self._space.dead
            old = [i for i, d in dead.items() if d.failed_at < cutoff]
            for i in old:
                del dead[i]
        return len(old)

    def dead_letters(self, queue: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Read dead letters, oldest first (all queues when ``queue`` is None)."""
        if queue is not None:
            validate_queue_name(queue)
        with self._space.lock:
            found = [d for d in self._space.dead.values() if queue is None or d.queue == queue]
        return found[: max(0, int(limit))]

    # -- inspection and waiting ----------------------------------------------------------

    def gone(self, job_ids: Collection[int]) -> set[int]:
        """Which of ``job_ids`` have no row any more (``JobStore.gone``)."""
        with self._space.lock:
            return {i for i in job_ids if i not in self._space.jobs}

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        """Who holds live reservations (``JobStore.holders``)."""
        now = self._now()
        counts: dict[tuple[str, str | None, str | None], int] = {}
        wanted = None if queues is None else set(queues)
        with self._space.lock:
            for row in self._space.jobs.values():
                if wanted is not None and row.queue not in wanted:
                    continue
                if row.reserved_until is not None and row.reserved_until > now:
                    key = (row.queue, row.reserved_by, row.reserved_instance)
                    counts[key] = counts.get(key, 0) + 1
        found = [Holding(q, by, inst, n) for (q, by, inst), n in counts.items()]
        return sorted(found, key=lambda h: (h.queue, h.holder or "", h.instance or ""))

    def release_holder(
        self, holder: str, *, queue: str | None = None, instance: str | None = None
    ) -> int:
        """Hand back ``holder``'s reservations (``JobStore.release_holder``)."""
        if queue is not None:
            validate_queue_name(queue)
        now = self._now()
        released = 0
        with self._space.lock:
            for row in self._space.jobs.values():
                if row.reserved_until is None or row.reserved_until <= now:
                    continue
                if row.reserved_by != holder or (queue is not None and row.queue != queue):
                    continue
                if queue is None and instance is not None and row.reserved_instance != instance:
                    continue
                row.reserved_until = now  # lapsed now, as the SQL stores do it
                released += 1
                self._space.wake(row.queue)
        return released

    def get_job(self, job_id: int) -> dict[str, Any] | None:
        """The raw row of one job (``JobStore.get_job``'s columns), for inspection and
        tests; None if it is gone."""
        with self._space.lock:
            row = self._space.jobs.get(job_id)
            return None if row is None else dataclasses.asdict(row)

    def rows(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Every stored job (of ``queue``, or of all queues) as :meth:`get_job` returns it,
        in id order: what a test reads with ``SELECT * FROM askr_jobs`` on a database."""
        with self._space.lock:
            rows = self._space.jobs.values() if queue is None else self._space.rows_of(queue)
            return [dataclasses.asdict(r) for r in sorted(rows, key=lambda r: r.id)]

    def wait_for_jobs(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        """Idle wait: up to ``seconds``, returning early (True) when a job becomes ready on
        one of ``queues`` (any queue if None): enqueued ready, or released with no delay,
        since the last wait. (A delayed job coming due wakes nobody, as on PostgreSQL.)"""
        if seconds <= 0:
            return False
        s = self._space
        wanted = None if queues is None else set(queues)

        def woken() -> bool:
            if self._interrupted:
                return True
            if wanted is None:
                return s.wakeups > self._seen
            return any(s.woken.get(q, 0) > self._seen for q in wanted)

        with s.ready:
            found = s.ready.wait_for(woken, timeout=seconds)
            self._seen = s.wakeups
            if self._interrupted:
                self._interrupted = found = False
        return found

    def wakes_on_enqueue(self) -> bool:
        """Always: every enqueue (and release) of a ready job counts as a wake-up."""
        return True

    def stop_waiting(self) -> None:
        """Nothing to pass on: one process, every waiter is woken."""

    def interrupt_wait(self) -> None:
        """End this store's wait under way (or the next one) early, returning False."""
        s = self._space
        with s.ready:
            self._interrupted = True
            s.ready.notify_all()


class MemoryTopology:
    """Bindings and queue records of a :class:`MemoryJobStore`'s name, as
    :class:`~.topology.Topology` keeps them in ``askr_bindings`` and ``askr_queues``."""

    def __init__(self, store: MemoryJobStore) -> None:
        self._store = store

    # -- exchange bindings ---------------------------------------------------------------

    def bind(self, exchange: str, exchange_type: str, routing_key: str, queue: str) -> None:
        """Store the binding of ``queue`` to ``exchange`` (idempotent)."""
        validate_queue_name(queue)
        s = self._store
        binding = _Binding(exchange, routing_key, queue, exchange_type, s._now())
        with s._space.lock:
            s._space.bindings.setdefault((exchange, routing_key, queue), binding)

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        """Remove one stored binding."""
        with self._store._space.lock:
            self._store._space.bindings.pop((exchange, routing_key, queue), None)

    def bindings(self, exchange: str) -> list[tuple[str, str, str]]:
        """``(routing_key, queue, exchange_type)`` of every queue bound to ``exchange``."""
        return [(r.routing_key, r.queue, r.exchange_type) for r in self.routes(exchange)]

    def routes(self, exchange: str) -> list[Route]:
        """Every binding of ``exchange``, with its queue's message TTL, oldest first."""
        s = self._store._space
        with s.lock:
            found = sorted(
                (b for b in s.bindings.values() if b.exchange == exchange),
                key=lambda b: (b.created_at, b.queue),
            )
            routes = [(b, s.queues.get(b.queue)) for b in found]
        return [
            Route(b.routing_key, b.queue, b.exchange_type, _message_ttl(record))
            for b, record in routes
        ]

    # -- queue records: lifetime (x-expires) and message TTL (x-message-ttl) -------------

    def declare_queue(
        self, queue: str, expires: float | None, message_ttl: float | None = None
    ) -> None:
        """Record ``queue`` as used now, deleted after ``expires`` seconds unused (None:
        never); its messages live ``message_ttl`` seconds (None: until consumed)."""
        validate_queue_name(queue)
        record = _QueueRecord(
            None if expires is None else max(1, math.ceil(expires)),
            self._store._now(),
            None if message_ttl is None else max(0, round(message_ttl * 1000)),
        )
        with self._store._space.lock:
            self._store._space.queues[queue] = record

    def touch_queues(self, queues: Collection[str]) -> set[str]:
        """Mark ``queues`` as used now; return those that still exist (not swept)."""
        now = self._store._now()
        s = self._store._space
        with s.lock:
            present = {q for q in queues if q in s.queues}
            for name in present:
                s.queues[name].last_used_at = now
        return present

    def expired_queues(self) -> list[str]:
        """Queues unused for longer than their ``expires``."""
        now = self._store._now()
        with self._store._space.lock:
            return [
                name
                for name, r in self._store._space.queues.items()
                if r.expires_seconds is not None and r.last_used_at + r.expires_seconds <= now
            ]

    def discard_expired(self) -> dict[str, int]:
        """Delete unclaimed messages past their TTL in every queue that has a message TTL;
        return how many went per queue."""
        store = self._store
        now = store._now()
        discarded: dict[str, int] = {}
        with store._space.lock:
            for name, record in store._space.queues.items():
                if record.message_ttl_ms is None:
                    continue
                # As Topology: created_before rounds the TTL up and keeps a second's margin.
                created_before = now - math.ceil(record.message_ttl_ms / 1000.0) - 1

                def doomed(r: _Row, created_before: int = created_before) -> bool:
                    expired = r.expires_at is not None and r.expires_at <= now
                    return r.reserved_until is None and (expired or r.created_at <= created_before)

                count = store._delete_where(name, doomed)
                if count:
                    discarded[name] = count
        return discarded

    def drop_queue(self, queue: str) -> int:
        """Delete ``queue``: its jobs (held ones too), its bindings and its record, at
        once; return how many jobs went."""
        s = self._store._space
        with s.lock:
            for key in [k for k, b in s.bindings.items() if b.queue == queue]:
                del s.bindings[key]
            s.queues.pop(queue, None)
            return self._store._delete_where(queue, lambda r: True)


def _message_ttl(record: _QueueRecord | None) -> float | None:
    """A queue's message TTL in seconds (``binding_list``'s LEFT JOIN: None if unrecorded)."""
    if record is None or record.message_ttl_ms is None:
        return None
    return record.message_ttl_ms / 1000.0
