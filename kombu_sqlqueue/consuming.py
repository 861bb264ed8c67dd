"""The consume half of a channel: claim, read, hold, deliver — or hand back.

A :class:`ChannelConsumer` belongs to one :class:`~.transport.Channel`, which keeps the
Kombu verbs (``_get``, ``_get_and_deliver``, ``basic_consume`` …) and hands them here. One
path for every message a channel consumes, of Kombu's format or another's:

1. **claim** a batch sized by the consumer's free prefetch room (``_batch_size``); a
   redelivered message is delivered alone (isolation.py), the rest handed back;
2. **hold** each claimed delivery (``HeldDeliveries``: renewed while this process lives)
   before reading it, so a failure half-way hands back what was not delivered;
3. **read** it — Kombu's envelope, or its queue's format — and dead-letter what cannot be
   read, once, with the reason (nothing a row holds stops the consumer);
4. **deliver** in claim order, skipping a delivery this process knows it lost; a consumer
   that raises releases the message it raised on and hands back the rest.

No SQL here: the store (or a format's store) does every write.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from queue import Empty
from time import monotonic
from typing import Any, Protocol

from kombu.transport import virtual

from .acks import AckBatcher
from .envelope import delivery, delivery_tag, read_message, receipt_of
from .exceptions import MalformedMessage, StoreConditionError, StoreError
from .formats import DeliveryStore, QueueFormat, Undeliverable
from .isolation import RedeliveryIsolation
from .options import TransportOptions
from .qos import Held, HeldDeliveries, QoS, Renewer
from .store import ClaimedJob, JobContract, Receipt

logger = logging.getLogger(__name__)


class ConsumingTransport(Protocol):
    """What the consume half uses of its transport (``transport.Transport``)."""

    formats: dict[str, QueueFormat]
    held: HeldDeliveries
    renewer: Renewer
    acks: AckBatcher
    store: JobContract  # the transport's own table (contract v1's)

    @property
    def channels(self) -> Sequence[Any]: ...  # the channels, each with its .consumer

    def store_for(self, queue: str) -> DeliveryStore: ...

    def report_condition(self, exc: StoreConditionError) -> None: ...

    def condition_cleared(self) -> None: ...

    def wakes_on_enqueue(self, queue: str) -> bool: ...

    def claim_again_within(self, seconds: float) -> None: ...

    def _deliver(self, message: Any, queue: str) -> Any: ...


class ChannelConsumer:
    """What one channel consumes, and how (see the module docstring)."""

    def __init__(
        self, channel: virtual.Channel, transport: ConsumingTransport, options: TransportOptions
    ) -> None:
        #: Kombu's side of the channel: its QoS, codecs, consumed queues and bindings.
        self.channel = channel
        self.transport = transport
        self.options = options
        #: Queues consumed with no_ack (settled on receipt: Celery's pidbox, events).
        self.noack_queues: set[str] = set()
        #: no_ack queue -> messages claimed (and so settled) but not yet delivered.
        self.noack_buffer: dict[str, deque[dict[str, Any]]] = {}
        #: A redelivered message is delivered alone.
        self.isolation = RedeliveryIsolation(self.options.visibility_timeout)
        #: Queues whose last claim came back short (drained) since the last idle wait.
        self.drained: set[str] = set()

    @property
    def qos(self) -> QoS:
        qos: QoS = self.channel.qos
        return qos

    def start(self, queue: str, no_ack: bool) -> None:
        """A consumer of ``queue`` starts (``basic_consume``)."""
        if no_ack:
            self.noack_queues.add(queue)

    def stop(self, queue: str) -> None:
        """The consumer of ``queue`` stops (``basic_cancel``): as from a broker, no_ack
        messages handed over and not yet consumed are gone."""
        self.noack_queues.discard(queue)
        self.noack_buffer.pop(queue, None)

    # -- claim and read ---------------------------------------------------------------

    def decode(self, job: ClaimedJob, store: DeliveryStore) -> dict[str, Any] | None:
        """The delivery of ``job``, or None after dead-lettering an unreadable row (or one
        its queue's format will not hand out)."""
        fmt = self.transport.formats.get(job.queue)
        try:
            if fmt is None:
                return delivery(job, read_message(job.payload, self.channel.codecs))
            return delivery(job, fmt.read(job))
        except Undeliverable as exc:
            reason = str(exc)
        except MalformedMessage as exc:
            reason = f"malformed stored message: {exc}"
        except Exception as exc:  # a check that itself failed: still the row's fault
            reason = f"malformed stored message: {type(exc).__name__}: {exc}"
        where = "askr_failed_jobs" if fmt is None else f"the failed table of format {fmt.name}"
        logger.error("job %d on queue %r: %s; moved to %s", job.id, job.queue, reason, where)
        store.dead_letter(job.receipt, reason)
        return None

    def claim(self, queue: str, n: int, *, isolate: bool = False) -> list[dict[str, Any]]:
        """Claim up to ``n`` jobs of ``queue`` and read them; unreadable rows are dead-lettered.

        A storage condition (full disk, read-only database) claims nothing: it is reported
        once and the consumer polls on. If anything fails half-way, what was claimed and
        not settled is handed back, so no row stays reserved by this process for nothing.
        """
        if n <= 0:
            return []
        connection = self.transport
        limit = self.options.for_queue(queue).max_attempts
        store = connection.store_for(queue)
        visibility = self.options.visibility_timeout
        try:
            if queue in connection.formats:
                connection.acks.flush()  # the held acks first: the rows they free are settled
                claimed = store.claim(queue, n, visibility, limit)
            else:
                # The held acks go first, in the claim's own transaction: a consumer
                # draining a backlog pays one commit per round for both (acks.py).
                claimed = connection.acks.flush_and_claim(
                    connection.store, queue, n, visibility, limit
                )
        except StoreConditionError as exc:
            connection.report_condition(exc)
            return []
        jobs = claimed.jobs
        if claimed.retry_in is not None:
            # A rate limit cut the claim: the queue has more, due then (not drained: no
            # enqueue will say so).
            connection.claim_again_within(claimed.retry_in)
            self.drained.discard(queue)
        elif len(jobs) + claimed.dead_lettered + claimed.expired < n:
            self.drained.add(queue)
        else:
            self.drained.discard(queue)
        connection.condition_cleared()
        noack = queue in self.noack_queues
        held = connection.held
        messages: list[dict[str, Any]] = []
        try:
            if isolate:
                jobs = self.isolate_redelivered(jobs, queue)
            for job in jobs:
                if not noack:  # held first: a failure below hands it back
                    held.add(delivery_tag(job.receipt), Held(job.receipt, queue, job.attempts))
                message = self.decode(job, store)
                if message is None:
                    held.pop(delivery_tag(job.receipt))
                else:
                    messages.append(message)
            if noack and messages:
                # no_ack consumers (Celery's pidbox, events) settle on receipt: one statement.
                store.ack_many([receipt_of(m["properties"]["delivery_tag"]) for m in messages])
        except BaseException:
            self.hand_back([job.receipt for job in jobs], queue)
            raise
        if messages and not noack:
            connection.renewer.ensure_started()
        return messages

    def batch_size(self) -> int:
        """How many to claim now: the consumer's free prefetch room, at most
        ``claim_batch_size``; none while a redelivered message is isolated."""
        if self.isolating():
            return 0
        room = self.qos.room()
        limit = self.options.claim_batch_size
        return limit if room is None else max(0, min(room, limit))

    def isolate_redelivered(self, jobs: list[ClaimedJob], queue: str) -> list[ClaimedJob]:
        """The jobs of a claim to deliver (a redelivered one alone: see isolation.py);
        the others are handed back, attempts refunded."""
        deliver, back = self.isolation.select(jobs, self.qos.holds_unsettled())
        if back:
            self.hand_back([job.receipt for job in back], queue)
        return deliver

    def isolating(self) -> bool:
        """True while claims pause for a redelivered message (see isolation.py)."""
        return self.isolation.pausing(self.transport.held, self.qos.holds_unsettled())

    # -- deliver ----------------------------------------------------------------------

    def get(self, queue: str) -> dict[str, Any]:
        """One message of ``queue`` (``basic_get``), or :class:`queue.Empty`."""
        messages = self.claim(queue, 1)
        if not messages:
            raise Empty()
        return messages[0]

    def get_and_deliver(self, queue: str, callback: Callable[[Any, str], Any]) -> None:
        """Claim a batch for the consumer's free prefetch room, and deliver each message.

        A no_ack queue (a reply queue, a monitor's events) delivers one message per call,
        as from a broker, the rest of its batch kept here: Kombu's pidbox collects
        ``limit`` replies with one ``drain_events`` each, and would wait out its whole
        timeout for a reply it was handed already.
        """
        if queue in self.noack_queues:
            buffered = self.noack_buffer.get(queue)
            if not buffered:
                buffered = self.noack_buffer[queue] = deque(
                    self.claim(queue, self.options.claim_batch_size)
                )
            if not buffered:
                raise Empty()
            callback(buffered.popleft(), queue)
            return
        if queue in self.drained and self.transport.wakes_on_enqueue(queue):
            # Drained at the last claim, and a job enqueued since wakes an idle consumer
            # (this one, or the one whose turn it is): no claim before the idle wait.
            raise Empty()
        messages = self.claim(queue, self.batch_size(), isolate=True)
        if not messages:
            raise Empty()
        self.deliver_broadcasts_first()
        self.deliver_batch(queue, messages, callback)

    def deliver_broadcasts_first(self) -> None:
        """Before handing over claimed messages, deliver what waits on this connection's
        broadcast queues (no_ack queues bound to a fanout exchange: Celery's pidbox).

        A ``revoke`` published before its task is then seen first, as on Redis, whose
        one BRPOP reads every queue at once; polled in turn, the task could be claimed
        from its queue just after the pidbox queue was found empty. Costs one read per
        non-empty claim while the broadcast queues are empty.
        """
        transport = self.transport
        for channel in list(transport.channels):
            consumer = channel.consumer
            for queue in consumer.broadcast_queues():
                for _ in range(self.options.claim_batch_size):
                    if not consumer.noack_buffer.get(queue) and not channel._size(queue):
                        break
                    try:
                        consumer.get_and_deliver(queue, transport._deliver)
                    except Empty:
                        break

    def broadcast_queues(self) -> list[str]:
        """This channel's consumed no_ack queues bound to a fanout exchange."""
        channel = self.channel
        return [
            queue
            for queue in self.noack_queues
            if queue in channel._active_queues
            and any(
                channel.state.exchanges.get(b.exchange, {}).get("type") == "fanout"
                for b in channel.state.queue_bindings(queue)
            )
        ]

    def deliver_batch(
        self, queue: str, messages: list[dict[str, Any]], callback: Callable[[Any, str], Any]
    ) -> None:
        """Hand the claimed messages to the consumer, in order.

        A message whose reservation this process knows it lost is not handed over: its
        new holder runs it. If the consumer raises on a message, that message keeps its
        attempt (released with backoff: it is the one that failed), the messages after
        it — claimed, never handed over — go back with their attempts refunded, and the
        error goes on up.
        """
        tags = [m["properties"]["delivery_tag"] for m in messages]
        for index, (tag, message) in enumerate(zip(tags, messages, strict=True)):
            try:
                if not self.still_ours(tag):
                    continue
            except BaseException:
                self.hand_back([receipt_of(t) for t in tags[index:]], queue)
                raise
            try:
                callback(message, queue)
            except BaseException as exc:
                self.hand_back([receipt_of(t) for t in tags[index + 1 :]], queue)
                if isinstance(exc, Exception) and tag in self.transport.held:
                    logger.error(
                        "the consumer raised on delivery %s of queue %r (%s: %s); "
                        "released with its attempt counted",
                        tag,
                        queue,
                        type(exc).__name__,
                        exc,
                    )
                    self.qos.release_failed(tag, f"{type(exc).__name__}: {exc}")
                raise

    def still_ours(self, tag: str) -> bool:
        """False (and the delivery dropped) when this process knows it lost the reservation
        of ``tag``; checked with the database when no renewal has confirmed it for a
        visibility timeout (the process was stopped, or stalled)."""
        connection = self.transport
        held = connection.held
        entry = held.get(tag)
        if entry is None:
            return False
        lost = held.is_lost(tag)
        if not lost:
            visibility = self.options.visibility_timeout
            if monotonic() - max(entry.claimed_at, held.confirmed_at) < visibility:
                return True
            store = connection.store_for(entry.queue)
            lost = entry.receipt not in store.renew([entry.receipt], visibility)
        if lost:
            held.pop(tag)
            logger.warning(
                "not starting job %d of queue %r: its reservation lapsed while this process "
                "held it unstarted, and another consumer has it now",
                entry.receipt.job_id,
                entry.queue,
            )
            return False
        return True

    def hand_back(self, receipts: list[Receipt], queue: str) -> None:
        """Return claimed messages never handed to the consumer: ready now, attempt refunded.

        Best effort: they leave this process's held set first (so nobody renews them), and
        if the database refuses the return they come back when their reservation lapses.
        """
        connection = self.transport
        held = connection.held
        for receipt in receipts:
            held.pop(delivery_tag(receipt))
        store = connection.store_for(queue)
        for receipt in receipts:
            try:
                store.return_job(receipt)
            except StoreError as exc:
                logger.warning(
                    "could not hand back claimed messages (%s); they come back when their "
                    "reservation lapses",
                    exc,
                )
                return
