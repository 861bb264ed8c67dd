"""Acknowledgement emulation: delivery tag → reservation, fenced settlements, renewal.

Each delivery's tag maps to the :class:`~kombu_sqlqueue.store.Receipt` (row id
+ reservation token) of the claim that handed it out. ``ack`` deletes the row,
``reject(requeue=True)`` releases it, ready at once (as Redis and RabbitMQ requeue; its
attempt stays counted, so a message requeued forever is dead-lettered at
``max_attempts``), ``reject(requeue=False)`` dead-letters it, a delivery whose consumer
raised is released with backoff, and a clean channel close returns unstarted deliveries. All
of them are fenced: a settlement for a reservation another consumer took over
writes nothing and is logged as stale.

While the process lives, a daemon thread renews the reservations of every
message it holds, so a long task is never redelivered; when the process dies
they lapse after ``visibility_timeout`` and the message comes back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic
from typing import TYPE_CHECKING, Any

from kombu.transport import virtual

from .exceptions import StoreConditionError, StoreError
from .formats import DeliveryStore, Outcome, settle, tell_settled
from .store import JobContract, Receipt

if TYPE_CHECKING:
    from .options import TransportOptions

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Held:
    """A delivery this process holds: its receipt, queue, attempt number, and when
    (``time.monotonic``) its reservation was last known to be ours."""

    receipt: Receipt
    queue: str
    attempts: int
    claimed_at: float = field(default_factory=monotonic)


class HeldDeliveries:
    """Thread-safe map of delivery tag → :class:`Held`, shared by a transport's channels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tag: dict[str, Held] = {}
        #: Tags whose reservation the renewer found taken over (or gone).
        self._lost: set[str] = set()
        #: ``time.monotonic()`` when a renewal round last confirmed every held reservation.
        self.confirmed_at = monotonic()

    def add(self, tag: str, held: Held) -> None:
        with self._lock:
            self._by_tag[tag] = held

    def get(self, tag: str) -> Held | None:
        return self._by_tag.get(tag)

    def pop(self, tag: str) -> Held | None:
        with self._lock:
            self._lost.discard(tag)
            return self._by_tag.pop(tag, None)

    def snapshot(self) -> dict[str, Held]:
        with self._lock:
            return dict(self._by_tag)

    def mark_lost(self, tags: set[str]) -> None:
        with self._lock:
            self._lost.update(t for t in tags if t in self._by_tag)

    def is_lost(self, tag: str) -> bool:
        return tag in self._lost

    def __contains__(self, tag: object) -> bool:
        return tag in self._by_tag

    def __len__(self) -> int:
        return len(self._by_tag)


class RecentTags:
    """Delivery tags settled by their task itself (a queue format's failure, written from
    the task's thread), so that Kombu's ack or reject after it is expected, not a mistake.
    Bounded: a tag nobody settles again is forgotten after ``size`` newer ones."""

    def __init__(self, size: int = 1024) -> None:
        self._lock = threading.Lock()
        self._tags: dict[str, None] = {}
        self._size = size

    def add(self, tag: str) -> None:
        with self._lock:
            self._tags[tag] = None
            while len(self._tags) > self._size:
                del self._tags[next(iter(self._tags))]

    def take(self, tag: str) -> bool:
        """True (and forgotten) if ``tag`` was added."""
        with self._lock:
            return self._tags.pop(tag, False) is None


@dataclass(frozen=True, slots=True)
class Settlement:
    """One fenced write that settles a delivery: ``write(store)`` is ``False`` when stale."""

    held: Held
    verb: str  # "ack" or "reject": for the stale-settlement warning
    write: Callable[[DeliveryStore], bool]
    #: The table the delivery's queue lives in (None: the transport's own).
    store: DeliveryStore | None = None
    #: On a queue of a format whose task settles its own failure (a Laravel job), from
    #: another process: a stale settlement there is most likely that, and said quietly.
    maybe_settled: bool = False


class PendingSettlements:
    """Settlements the database refused for a condition (full disk, read-only, refused
    permission), kept and written again once it accepts writes.

    A consumer does not die because its ack cannot be written: Kombu's and Celery's
    callers ack from code that cannot handle a storage error. Until the write goes
    through, the delivery's reservation is not renewed, so if the condition outlasts
    ``visibility_timeout`` the message comes back and may run again (at least once,
    never lost). Written late, a settlement is fenced like any other: stale if another
    consumer took the message meanwhile.
    """

    def __init__(self, store: JobContract) -> None:
        self.store = store
        #: Settlements that changed nothing because their job was settled already (its
        #: task completed it in the application's transaction, ``kombu_sqlqueue.complete``).
        self.settled_elsewhere = 0
        #: Guards the list and the reported flag (held briefly, never across a write).
        self._lock = threading.Lock()
        #: One retrier at a time: the consumer between polls, or the renewer thread.
        self._retrying = threading.Lock()
        self._pending: list[Settlement] = []
        self._reported = False

    def settle(self, settlement: Settlement) -> None:
        """Write ``settlement`` now, or keep it when the database refuses writes."""
        with self._lock:
            if self._pending:  # behind those already waiting: the database refuses writes
                self._pending.append(settlement)
                return
        try:
            written = settlement.write(settlement.store or self.store)
        except StoreConditionError as exc:
            self.keep([settlement], exc)
            return
        if not written:
            self.stale(settlement)

    def stale(self, settlement: Settlement) -> None:
        """A settlement that wrote nothing. When the job's row is gone it was settled
        already — by its task, in the application's transaction (``complete()``), or by a
        consumer that took it over and finished it: counted, said at debug level (a
        takeover is warned of by the renewer when it happens). When the row is held by
        another consumer: the stale-settlement warning."""
        job_id = settlement.held.receipt.job_id
        try:
            gone = job_id in (settlement.store or self.store).gone([job_id])
        except StoreError:  # only to choose the log line: never raised out of an ack
            gone = False
        if not gone:
            _warn_stale(settlement)
            return
        self.settled_elsewhere += 1
        logger.debug(
            "%s of job %d on queue %r changed nothing: the job was settled already",
            settlement.verb,
            job_id,
            settlement.held.queue,
        )

    def keep(self, settlements: list[Settlement], exc: StoreError) -> None:
        """Keep ``settlements`` the database refused (``exc``), to write them again."""
        with self._lock:
            self._pending.extend(settlements)
            report = not self._reported
            self._reported = True
        if report:
            logger.error(
                "cannot settle deliveries: %s; the acks and rejects are kept and written once "
                "the database accepts writes (a delivery whose reservation lapses meanwhile "
                "comes back and may run again)",
                exc,
            )

    def retry(self) -> None:
        """Write the kept settlements, in order, until one is refused again.

        Called by the consumer between polls and by the renewer thread; a retry already
        under way in the other thread is not waited for. A settlement that fails for
        another reason is dropped, logged: its delivery comes back when its reservation
        lapses (kept, it would stop every later one).
        """
        if not self._pending or not self._retrying.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        break
                    settlement = self._pending[0]
                try:
                    written = settlement.write(settlement.store or self.store)
                except StoreConditionError:
                    return
                except Exception as exc:
                    written = True  # not stale: failed; said here
                    logger.error(
                        "could not settle job %d of queue %r (%s); it comes back when its "
                        "reservation lapses",
                        settlement.held.receipt.job_id,
                        settlement.held.queue,
                        exc,
                    )
                with self._lock:  # give_up may have cleared the list meanwhile
                    if self._pending and self._pending[0] is settlement:
                        self._pending.pop(0)
                if not written:
                    self.stale(settlement)
            with self._lock:
                cleared, self._reported = self._reported, False
            if cleared:
                logger.warning("settling deliveries again: the database accepts writes")
        finally:
            self._retrying.release()

    def __len__(self) -> int:
        return len(self._pending)

    def give_up(self, wait: float = 5.0) -> None:
        """At close: a last try; what is still refused comes back after its reservation
        lapses. Waits up to ``wait`` seconds for a retry under way in the renewer."""
        self.retry()
        waited = self._retrying.acquire(timeout=wait)
        try:
            with self._lock:
                left, self._pending = len(self._pending), []
                self._reported = False
        finally:
            if waited:
                self._retrying.release()
        if left:
            logger.error(
                "closing with %d unwritten settlement(s) (the database refuses writes); those "
                "deliveries come back when their reservations lapse",
                left,
            )


def _warn_stale(settlement: Settlement) -> None:
    held = settlement.held
    if settlement.maybe_settled:
        logger.info(
            "%s of job %d on queue %r changed nothing: its task settled it already (a failure, "
            "by the queue format's rules), or another consumer took it over",
            settlement.verb,
            held.receipt.job_id,
            held.queue,
        )
    elif settlement.verb == "ack":
        logger.warning(
            "stale ack: job %d on queue %r was taken over by another consumer after its "
            "reservation lapsed; the ack changed nothing",
            held.receipt.job_id,
            held.queue,
        )
    else:
        logger.warning(
            "stale reject: job %d on queue %r is no longer held by this consumer",
            held.receipt.job_id,
            held.queue,
        )


class Renewer:
    """Daemon thread that renews held reservations every ``interval`` seconds."""

    def __init__(
        self,
        store: JobContract,
        held: HeldDeliveries,
        options: TransportOptions,
        pending: PendingSettlements | None = None,
        store_for: Callable[[str], DeliveryStore] | None = None,
    ) -> None:
        self.store = store
        #: The table of a held delivery's queue (a queue format may keep its own).
        self.store_for: Callable[[str], DeliveryStore] = store_for or (lambda _queue: store)
        self.held = held
        self.pending = pending
        self.visibility = options.visibility_timeout
        self.interval = options.effective_renew_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def ensure_started(self) -> None:
        """Start the thread once (and again in a forked child, where threads do not survive)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._loop, name="kombu-sqlqueue-renewer", daemon=True
            )
            self._thread.start()

    def stop(self, wait: float = 5.0) -> None:
        """Stop renewing; wait up to ``wait`` seconds for a round under way, so that it
        does not open a connection of a store being closed."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    def renew_once(self) -> set[str]:
        """Renew every held reservation now; return the tags that were lost."""
        started = monotonic()
        # Those known lost already are neither renewed nor reported again.
        held = {t: h for t, h in self.held.snapshot().items() if not self.held.is_lost(t)}
        if not held:
            self.held.confirmed_at = started
            return set()
        by_store: dict[int, tuple[DeliveryStore, list[Receipt]]] = {}
        for h in held.values():
            store = self.store_for(h.queue)
            by_store.setdefault(id(store), (store, []))[1].append(h.receipt)
        still: set[Receipt] = set()
        for store, receipts in by_store.values():
            still |= store.renew(receipts, self.visibility)
        self.held.confirmed_at = started
        lost = {tag for tag, h in held.items() if h.receipt not in still}
        # A tag acked between the snapshot and the renewal is gone from the
        # table too; only warn about the ones we still think we hold.
        current = self.held.snapshot()
        lost_now = {t for t in lost if t in current}
        self.held.mark_lost(lost_now)
        settled = self._settled_elsewhere({t: current[t] for t in lost_now})
        for tag in lost_now - settled:
            h = current[tag]
            logger.warning(
                "reservation of job %d on queue %r was lost (it lapsed and another consumer "
                "took it, or it was deleted); it is not started here if it has not been yet, "
                "and this worker's settlement of it will be stale",
                h.receipt.job_id,
                h.queue,
            )
        return lost_now

    def _settled_elsewhere(self, lost: dict[str, Held]) -> set[str]:
        """Of the ``lost`` reservations, those whose row is gone from its table: settled
        already (by the task, in the application's transaction), not taken over — nothing
        to warn of."""
        by_store: dict[int, tuple[DeliveryStore, dict[str, Held]]] = {}
        for tag, h in lost.items():
            store = self.store_for(h.queue)
            by_store.setdefault(id(store), (store, {}))[1][tag] = h
        settled: set[str] = set()
        for store, held in by_store.values():
            try:
                gone = store.gone([h.receipt.job_id for h in held.values()])
            except StoreError:  # then each is warned of, as before
                continue
            settled |= {tag for tag, h in held.items() if h.receipt.job_id in gone}
        return settled

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.pending is not None:
                try:
                    self.pending.retry()
                except Exception:  # renewing below must not wait for it
                    logger.exception("writing kept settlements failed; will retry")
            try:
                self.renew_once()
            except Exception:  # keep renewing; a failed round is retried next interval
                logger.exception("renewing reservations failed; will retry")


class QoS(virtual.QoS):
    """Kombu QoS whose settlements are fenced writes to the job store."""

    channel: Any

    def _settle(self, delivery_tag: str) -> Held | None:
        connection = self.channel.connection
        held: Held | None = connection.held.pop(delivery_tag)
        if held is None and not connection.settled_by_task.take(delivery_tag):
            logger.warning(
                "delivery %s is not held by this process; nothing to settle", delivery_tag
            )
        return held

    def _settlement(
        self, held: Held, verb: str, write: Callable[[DeliveryStore], bool]
    ) -> Settlement:
        connection = self.channel.connection
        store = connection.store_for(held.queue)
        maybe = held.queue in connection.formats
        return Settlement(held, verb, write, store, maybe_settled=maybe)

    def ack(self, delivery_tag: str) -> None:
        """Delete the job, unless its reservation was taken over (then: stale, logged)."""
        held = self._settle(delivery_tag)
        if held is not None:
            receipt = held.receipt
            fmt = self.channel.connection.formats.get(held.queue)
            if fmt is None:
                settlement = self._settlement(held, "ack", lambda store: store.ack(receipt))
                self.channel.connection.acks.ack(settlement)  # in a batch (acks.py)
            else:
                queue, headers = held.queue, self._headers(delivery_tag)
                then = fmt.acked(queue, headers)

                def write(store: DeliveryStore) -> bool:
                    done = store.ack_and_enqueue(receipt, then) if then else store.ack(receipt)
                    return tell_settled(fmt, queue, headers, None, done)

                settlement = self._settlement(held, "ack", write)
                self.channel.connection.pending.settle(settlement)
        super().ack(delivery_tag)
        self.channel.connection.free_room()

    def room(self) -> int | None:
        """How many more deliveries the consumer's prefetch allows now (None: no limit)."""
        room: int | None = self.can_consume_max_estimate()
        return room

    def holds_unsettled(self) -> bool:
        """True while a delivery handed to the consumer awaits its ack or reject (Kombu
        keeps a settled one in ``_delivered`` until it flushes ``_dirty``)."""
        return len(self._delivered) > len(self._dirty)

    def _headers(self, delivery_tag: str) -> Any:
        message = self._delivered.get(delivery_tag)
        return getattr(message, "headers", None) or {}

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """``requeue=True``: release, ready at once (Celery's ``Reject(requeue=True)`` and
        ``task_reject_on_worker_lost``, Kombu's ``message.requeue()``; the attempt stays
        counted). ``requeue=False``: dead-letter with a reason."""
        self._reject(delivery_tag, requeue, backoff=False)

    def release_failed(self, delivery_tag: str, reason: str = "the consumer raised") -> None:
        """Release a delivery whose consumer raised, after the queue's backoff: the error
        may be transient (a database down), and a retry at once would likely meet it too.
        On a queue of another format, that format's rules for a failure apply."""
        self._reject(delivery_tag, True, backoff=True, reason=reason)

    def _reject(
        self, delivery_tag: str, requeue: bool, *, backoff: bool, reason: str | None = None
    ) -> None:
        fmt = self.channel.connection.formats.get(self._queue_of(delivery_tag))
        held = self._settle(delivery_tag)
        if held is not None and fmt is not None:
            headers = self._headers(delivery_tag)
            outcome: Outcome = (
                fmt.failed(held.queue, headers, reason, timed_out=False)
                if backoff and reason is not None
                else fmt.rejected(held.queue, headers, held.attempts, requeue)
            )
            receipt, queue = held.receipt, held.queue
            settlement = self._settlement(
                held,
                "reject",
                lambda store: tell_settled(
                    fmt, queue, headers, outcome, settle(store, receipt, outcome)
                ),
            )
            self.channel.connection.pending.settle(settlement)
        elif held is not None:
            receipt = held.receipt
            if requeue:
                policy = self.channel.options.for_queue(held.queue).backoff
                delay = policy.delay(held.attempts) if backoff else 0.0
                settlement = self._settlement(
                    held, "reject", lambda store: store.release(receipt, delay=delay)
                )
            else:
                why = f"rejected by the consumer without requeue (attempt {held.attempts})"
                settlement = self._settlement(
                    held, "reject", lambda store: store.dead_letter(receipt, why)
                )
            self.channel.connection.pending.settle(settlement)
        self._quick_ack(delivery_tag)
        self.channel.connection.free_room()

    def _queue_of(self, delivery_tag: str) -> str | None:
        held = self.channel.connection.held.get(delivery_tag)
        return None if held is None else held.queue

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Hand back every unsettled delivery: ready now, the unstarted attempt refunded."""
        self._flush()
        errors: list[tuple[BaseException, Any]] = []
        while self._delivered:
            tag, message = self._delivered.popitem()
            held = self.channel.connection.held.pop(tag)
            if held is None:
                continue
            try:
                self.channel.connection.store_for(held.queue).return_job(held.receipt)
            except Exception as exc:
                errors.append((exc, message))
        return errors
