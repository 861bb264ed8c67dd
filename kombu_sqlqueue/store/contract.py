"""The job store's interface, as its callers use it, and the one way to open a store.

:class:`DeliveryStore` holds the delivery verbs every table a consumer reads must have
(contract v1's, or another layout's); :class:`JobContract` extends it with the rest of
contract v1, and is what the Kombu transport and a layout package's worker need of a store;
:class:`~.store.JobStore` (SQL) and :class:`~.memory.MemoryJobStore` (this process's
memory) both satisfy it, and :func:`open_store` picks one by URL.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol, Self

import sqlalchemy
from sqlalchemy.engine import make_url

from .controls import QueueControl, Rate
from .database import StoreOptions
from .enlist import Enlistment
from .memory import MemoryJobStore, is_memory_url
from .model import (
    Backlog,
    ClaimedJob,
    ClaimResult,
    DeadLetter,
    Holding,
    NewJob,
    Receipt,
    Route,
)
from .store import JobStore


class TopologyContract(Protocol):
    """Exchange bindings and queue records (``store.topology``); see
    :class:`~.topology.Topology`."""

    def bind(self, exchange: str, exchange_type: str, routing_key: str, queue: str) -> None:
        """Store the binding of ``queue`` to ``exchange`` (idempotent)."""
        ...

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        """Remove one stored binding."""
        ...

    def bindings(self, exchange: str) -> list[tuple[str, str, str]]:
        """``(routing_key, queue, exchange_type)`` of every queue bound to ``exchange``."""
        ...

    def routes(self, exchange: str) -> list[Route]:
        """Every binding of ``exchange``, with its queue's message TTL."""
        ...

    def declare_queue(
        self, queue: str, expires: float | None, message_ttl: float | None = None
    ) -> None:
        """Record ``queue`` as used now, with its lifetime and message TTL."""
        ...

    def touch_queues(self, queues: Collection[str]) -> set[str]:
        """Mark ``queues`` as used now; return those that still exist."""
        ...

    def expired_queues(self) -> list[str]:
        """Queues unused for longer than their lifetime."""
        ...

    def discard_expired(self) -> dict[str, int]:
        """Delete unclaimed messages past their queue's TTL; return how many per queue."""
        ...

    def drop_queue(self, queue: str) -> int:
        """Delete ``queue`` with its jobs, bindings and record; return how many jobs went."""
        ...


class DeliveryStore(Protocol):
    """The delivery verbs: what a consumer asks of any table a queue's rows live in —
    contract v1's (:class:`JobContract` extends this) or a layout's a queue format opens
    (``kombu_sqlqueue.formats``). See :class:`~.store.JobStore` for each verb's rules.
    Settlements are fenced by the :class:`~.model.Receipt` of a claim and answer False,
    writing nothing, when it is stale."""

    def ensure_ready(self) -> None:
        """Connect and create (or verify) the tables, once."""
        ...

    def check_payload_size(self, size: int) -> None:
        """Raise :class:`~kombu_sqlqueue.exceptions.MessageTooLarge` for a payload too large."""
        ...

    def enqueue(self, job: NewJob) -> int:
        """Store one job; return its id."""
        ...

    def joined(self, enlistment: Enlistment) -> Self | None:
        """This table writing in ``enlistment``'s transaction (``enlist``); None: none."""
        ...

    def claim(
        self, queue: str, n: int, visibility: float, max_attempts: int | None = None
    ) -> ClaimResult:
        """Reserve up to ``n`` ready jobs of ``queue`` for ``visibility`` seconds."""
        ...

    def ack(self, receipt: Receipt) -> bool:
        """Delete the job if ``receipt`` still holds it."""
        ...

    def gone(self, job_ids: Collection[int]) -> set[int]:
        """Which of ``job_ids`` have no row any more: settled, not taken over."""
        ...

    def ack_and_enqueue(self, receipt: Receipt, jobs: Sequence[NewJob]) -> bool:
        """Ack and store ``jobs`` at once (nothing written when stale)."""
        ...

    def ack_many(self, receipts: Sequence[Receipt]) -> set[Receipt]:
        """Ack several deliveries at once, each fenced by its own reservation; return those
        that were still held (the rest changed nothing: stale)."""
        ...

    def release(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Make the job ready again after ``delay`` seconds, attempts unchanged."""
        ...

    def return_job(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Hand back an unstarted delivery, its attempt refunded."""
        ...

    def renew(self, receipts: Sequence[Receipt], visibility: float) -> set[Receipt]:
        """Extend the reservations still held; return the receipts that were."""
        ...

    def dead_letter(self, receipt: Receipt, reason: str) -> bool:
        """Settle the held job as failed with ``reason``."""
        ...

    def size(self, queue: str) -> int:
        """Jobs waiting on ``queue`` (contract v1: ready, delayed, or with a lapsed
        reservation; another layout by its own rule)."""
        ...

    def purge(self, queue: str) -> int:
        """Delete the unreserved jobs of ``queue``; return how many."""
        ...

    def delete_queue(self, queue: str) -> int:
        """Delete every job of ``queue``; return how many."""
        ...

    def close(self) -> None:
        """Release connections (the data stays)."""
        ...


class JobContract(DeliveryStore, Protocol):
    """Contract v1's job operations: the delivery verbs, and the rest of the contract (bulk
    and once-only enqueue, ack-and-claim, backlog, holders, dead letters, waiting); see
    :class:`~.store.JobStore` for each verb's rules."""

    #: Unix-seconds clock, read once per operation; tests replace it.
    clock: Callable[[], float]
    #: The name claims sign their reservations with (seed 001's consumer identity).
    holder: str | None

    @property
    def topology(self) -> TopologyContract:
        """Bindings and queue records, beside the jobs."""
        ...

    @property
    def single_writer(self) -> bool:
        """One writer at a time for the whole database (SQLite): see ``BaseEngine``."""
        ...

    def topology_in(self, enlistment: Enlistment | None) -> TopologyContract:
        """Where a binding made now is stored (see ``JobStore.topology_in``)."""
        ...

    def create_schema(self) -> None:
        """Create the tables if absent (idempotent)."""
        ...

    def verify_schema(self) -> None:
        """Raise :class:`~kombu_sqlqueue.exceptions.SchemaMismatch` unless the tables fit."""
        ...

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Store many jobs at once; return their ids in order."""
        ...

    def enqueue_once(self, job: NewJob, key: str, window: float) -> int | None:
        """Store ``job`` unless ``key`` was first written to its queue less than
        ``window`` seconds ago; its id, or None when nothing was written."""
        ...

    def ack_many_and_claim(
        self,
        receipts: Sequence[Receipt],
        queue: str,
        n: int,
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[set[Receipt], ClaimResult]:
        """:meth:`ack_many` then :meth:`claim`, in one transaction (one commit): the acks
        held since a consumer's last claim settled with its next. Returns (acked, claimed)."""
        ...

    def ack_and_claim(
        self,
        receipt: Receipt,
        then: Sequence[NewJob],
        queues: Sequence[str],
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[bool, ClaimedJob | None]:
        """Ack (storing ``then``) and claim the next job of the first of ``queues``, at once."""
        ...

    def dead_letter_message(self, job: NewJob, reason: str) -> None:
        """Keep a message that never became a job as a dead letter of ``job.queue``."""
        ...

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """Pause ``queue`` (for ``for_seconds``, or until resumed): claims hand out
        nothing of it; held jobs still settle and publishes are still stored. Returns when
        the pause ends by itself (unix seconds), None when it lasts until resumed."""
        ...

    def resume(self, queue: str) -> bool:
        """End a pause of ``queue``; False when it was not paused."""
        ...

    def limit(self, queue: str, concurrency: int | None) -> None:
        """At most ``concurrency`` jobs of ``queue`` held at once across every worker
        (None: no limit); the rest wait, uncharged."""
        ...

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """At most ``per_key`` jobs of one ``concurrency_key`` of ``queue`` held at once
        across every worker (None: no such limit); the rest wait, uncharged."""
        ...

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """At most ``rate`` jobs of ``queue`` handed out across every worker, spaced
        evenly (None: no rate limit); the rest wait, uncharged."""
        ...

    def controls(self) -> list[QueueControl]:
        """Every queue's controls as stored, by queue name."""
        ...

    def backlog(self, queue: str) -> Backlog:
        """Contract v1's backlog figures of ``queue``."""
        ...

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        """Who holds live reservations, per queue (of ``queues`` alone when given)."""
        ...

    def release_holder(
        self, holder: str, *, queue: str | None = None, instance: str | None = None
    ) -> int:
        """Hand back ``holder``'s reservations (of ``queue``; of process ``instance``)."""
        ...

    def sweep_dead_letters(self, retention: float) -> int:
        """Delete dead letters older than ``retention`` seconds; return how many."""
        ...

    def dead_letters(self, queue: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Read dead letters, oldest first."""
        ...

    def get_job(self, job_id: int) -> dict[str, Any] | None:
        """The raw row of one job; None if it is gone."""
        ...

    def wait_for_jobs(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        """Idle up to ``seconds``; True when woken early by a job on one of ``queues``
        (``private``: those only this consumer reads)."""
        ...

    def wakes_on_enqueue(self) -> bool:
        """True when an enqueue is sure to end some idle consumer's wait (no poll needed)."""
        ...

    def stop_waiting(self) -> None:
        """This consumer will not wait for a while: wake another idle one meanwhile."""
        ...

    def interrupt_wait(self) -> None:
        """End this store's idle wait now (from another thread), or the next one at once if
        none is under way: it returns False, as on a timeout. For room freed while waiting
        (an ack from a pool's result thread): the consumer can claim again."""
        ...


def open_store(url: str, options: StoreOptions | None = None) -> JobContract:
    """Open the job store at ``url``: :class:`~.memory.MemoryJobStore` for ``memory://…``
    (this process only: tests and examples), else :class:`~.store.JobStore` on the
    SQLAlchemy URL (``sqlite:///queue.db``, ``postgresql://…``, ``mysql://…``)."""
    if is_memory_url(url):
        return MemoryJobStore(url, options)
    return JobStore(url, options)


def render_url(url: str, *, include_password: bool = False) -> str:
    """``url`` as logs and ``Connection.as_uri`` show it: the password hidden unless asked."""
    if is_memory_url(url):  # not an SQLAlchemy URL, and holds no password
        return url
    return make_url(url).render_as_string(hide_password=not include_password)


def driver_version() -> str:
    """The version of the library under every SQL store (SQLAlchemy)."""
    return str(sqlalchemy.__version__)
