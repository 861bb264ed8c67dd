"""Acks written in batches: many deliveries' deletions in one fenced statement and commit.

An ack written alone is a committed DELETE per message, and a consumer draining a backlog
waits for it before its prefetch slot refills: with a durable commit, the commit is most
of a message's cost. :class:`AckBatcher` writes the acks of the transport's own queues
together (``ack_many``: one statement per claim, each row fenced by its own reservation
token, so a stale ack among them changes nothing and fails none of the others).

An ack is held when it comes in a burst: made while ``drain_events`` delivers (the
messages of one claim), or within ``ack_flush_interval`` seconds of the last ack written
(a Celery worker's acks under load). A sporadic ack is written at once, before ``ack()``
returns. What is held is written when ``drain_events`` returns, with the consumer's next
claim (in the claim's own transaction, ``ack_many_and_claim``: one commit for both, the
acks first), within ``ack_flush_interval`` seconds by the batcher's thread, when
``ack_batch_size`` are held, when the transport closes and when the interpreter exits —
so a consumer that acks in its callbacks finds its acks written when ``drain_events``
returns, as if each had been written alone; only another process may see a row for those
few milliseconds.

What that costs, and only that: a process killed outright (kill -9, a power loss) loses
the acks it held, at most ``ack_batch_size`` and at most ``ack_flush_interval`` seconds'
worth; those messages are not lost but delivered again when their reservations lapse,
as any unacked delivery is (at least once; a task that completes in the application's
transaction, ``kombu_sqlqueue.complete``, is not even run twice for it).

A batch the database refuses (full disk, read-only, a connection lost past
``reconnect_timeout``) goes to :class:`~.qos.PendingSettlements` and is written again
from there; a settlement is never applied to another delivery (each is fenced by its own
token). Acks on a queue format's table (Laravel's ``jobs``) are written one by one: the
format's rules run with each. ``ack_flush_interval = 0``: every ack is written before
``ack()`` returns, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic

from .bursts import BurstWriter
from .exceptions import StoreError
from .formats import DeliveryStore
from .qos import PendingSettlements, Settlement
from .store import ClaimResult, JobContract, Receipt

logger = logging.getLogger(__name__)


class AckBatcher(BurstWriter):
    """Holds acks and writes them in batches (see the module docstring)."""

    thread_name = "kombu-sqlqueue-acks"

    def __init__(self, pending: PendingSettlements, interval: float, batch_size: int) -> None:
        self.pending = pending
        self.batch_size = batch_size
        #: Acks written in a batch of more than one (a measure of what batching saved).
        self.batched = 0
        super().__init__(interval)

    def _reset_held(self) -> None:
        self._held: list[Settlement] = []
        self._delivering = 0  # delivery rounds under way (see delivering())

    @contextmanager
    def delivering(self) -> Iterator[None]:
        """Acks made meanwhile (by the callbacks of one delivery round) are held, and
        written when it ends."""
        with self._lock:
            self._delivering += 1
        try:
            yield
        finally:
            with self._lock:
                self._delivering -= 1
            self.flush()

    def ack(self, settlement: Settlement) -> None:
        """Write ``settlement`` (an ack) with the next batch, or now when sporadic."""
        with self._lock:
            burst = self._held or self._delivering or monotonic() - self._last_write < self.interval
            batching = bool(burst) and self.interval > 0 and not self._stopped
            if batching:
                self._held.append(settlement)
                full = len(self._held) >= self.batch_size
                if not full:
                    self._write_soon()
        if not batching:
            with self._write_lock:
                self._last_write = monotonic()
                self.pending.settle(settlement)
        elif full:
            self.flush()

    def flush(self) -> None:
        """Write the held acks now (one statement per store and claim)."""
        with self._write_lock:
            with self._lock:
                batch, self._held = self._held, []
            if batch:
                self._last_write = monotonic()
                self._write(batch)

    def flush_and_claim(
        self,
        store: JobContract,
        queue: str,
        n: int,
        visibility: float,
        max_attempts: int | None,
    ) -> ClaimResult:
        """Claim up to ``n`` jobs of ``queue`` from ``store`` (contract v1's), writing the
        held acks first: ``store``'s in the claim's own transaction (one commit for both),
        any other store's before it. The claim's errors are the caller's; acks it could
        not write are kept (:class:`~.qos.PendingSettlements`), as a batch's are."""
        with self._write_lock:
            with self._lock:
                batch, self._held = self._held, []
            own: list[Settlement] = []
            others: list[Settlement] = []
            for settlement in batch:
                mine = settlement.store is None or settlement.store is store
                (own if mine else others).append(settlement)
            if others:
                self._write(others)
            combined = bool(own) and not len(self.pending)
            if combined:
                self._last_write = monotonic()
                try:
                    acked, claimed = store.ack_many_and_claim(
                        [s.held.receipt for s in own], queue, n, visibility, max_attempts
                    )
                except StoreError as exc:
                    self.pending.keep(own, exc)  # written again from there; the claim failed
                    raise
                except BaseException:
                    # Not the database refusing (a claim refused before any statement, an
                    # interrupt): the acks may be unwritten, so they are written on their
                    # own (a second write of a written one is stale, and changes nothing).
                    self._write(own)
                    raise
                self._settled(own, acked)
                return claimed
            if own:  # the database refuses writes: behind those kept, in order
                self._write(own)
        # Nothing to write with it: a claim alone, which other threads' acks need not wait for.
        return store.claim(queue, n, visibility, max_attempts)

    def __len__(self) -> int:
        return len(self._held)

    def _write(self, batch: list[Settlement]) -> None:
        if len(self.pending):  # the database refuses writes: behind those kept, in order
            for settlement in batch:
                self.pending.settle(settlement)
            return
        by_store: dict[int, tuple[DeliveryStore, list[Settlement]]] = {}
        for settlement in batch:
            store = settlement.store or self.pending.store
            by_store.setdefault(id(store), (store, []))[1].append(settlement)
        for store, group in by_store.values():
            try:
                acked = store.ack_many([s.held.receipt for s in group])
            except StoreError as exc:
                # Kept and written again (PendingSettlements.retry); never applied to
                # another delivery, each being fenced by its own reservation.
                self.pending.keep(group, exc)
                continue
            except Exception:  # a bug, not the database: one by one, as unbatched
                logger.exception("writing %d acks at once failed; writing each", len(group))
                for settlement in group:
                    self.pending.settle(settlement)
                continue
            self._settled(group, acked)

    def _settled(self, group: list[Settlement], acked: set[Receipt]) -> None:
        """After a batch was written: ``acked`` of ``group`` held; the rest were stale."""
        if len(group) > 1:
            self.batched += len(acked)
        for settlement in group:
            if settlement.held.receipt not in acked:
                self.pending.stale(settlement)
