"""Kombu transport over a durable SQL job table (durable queue contract v1).

Features
========
* Type: Virtual
* Supports Direct: Yes
* Supports Topic: Yes (bindings stored in ``askr_bindings``: every process routes alike)
* Supports Fanout: Yes (Celery's ``celery.pidbox`` broadcast; same table)
* Supports Priority: Yes (0–9; higher first, or Redis-style with ``priority_order``)
* Supports TTL: Yes (per message ``expiration``, per queue ``x-message-ttl``, queue
  ``x-expires``)
* Native delayed delivery: Yes (Celery ``eta``/``countdown`` set ``available_at``)
* Acknowledgements: fenced (row id + reservation token); reservations renewed while
  the consumer lives, lapsing after ``visibility_timeout`` when it dies.

Connection String
=================
.. code-block::

    sqlqueue+sqlite:///relative/path/queue.db
    sqlqueue+sqlite:////absolute/path/queue.db
    sqlqueue+memory://name

Everything after ``sqlqueue+`` is an SQLAlchemy URL, or ``memory://`` / ``memory://name``:
the in-memory store, shared by the connections of one process only (tests, examples).

Transport Options
=================
See :class:`kombu_sqlqueue.options.TransportOptions` (and ``docs/configuration.md``):
``visibility_timeout``, ``renew_interval``, ``polling_interval``, ``max_polling_interval``,
``max_attempts``, ``backoff_base``, ``backoff_cap``, ``queue_options``,
``priority_order``, ``claim_batch_size``, ``sqlite_synchronous``,
``busy_timeout``, ``create_tables``, ``bindings_cache_seconds``, ``ack_flush_interval``,
``ack_batch_size`` …

This module holds no SQL: it turns Kombu calls into job-store calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from . import holders, lifecycle
from ._version import __version__
from .acks import AckBatcher
from .consuming import ChannelConsumer
from .envelope import (
    dedupe_identity,
    eta_delay,
    is_transient,
    new_job,
    receipt_of,
)
from .exceptions import (
    ConfigurationError,
    DeliveryLost,
    NotCompletable,
    SqlQueueError,
    StoreConditionError,
    StoreConnectionError,
    StoreError,
    WriteLockHeld,
)
from .expiry import QueueKeeper
from .formats import (
    DeliveryStore,
    QueueFormat,
    load_formats,
    settle,
    tell_settled,
)
from .options import TransportOptions
from .qos import HeldDeliveries, PendingSettlements, QoS, RecentTags, Renewer
from .registration import database_url, register
from .routing import RoutingCache
from .store import JobContract, NewJob, TopologyContract, open_store
from .store.claiming import is_claim_token
from .store.contract import driver_version, render_url
from .store.enlist import Enlistment, active, holds_write_lock, joined_or_own
from .store.holders import recover_dead_holds
from .store.names import validate_queue_name
from .transient import TransientWriter

logger = logging.getLogger(__name__)

#: Bounds on the rounds one ``drain_events`` delivers back to back while its callbacks
#: ack (``Transport._deliver_while_acking``).
DRAIN_ROUNDS = 64
DRAIN_SECONDS = 0.05

register()  # the sqlqueue+<scheme> aliases a failover switch() looks up


class Channel(virtual.Channel):
    """A virtual channel whose queues are rows of ``askr_jobs``."""

    QoS = QoS
    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.store: JobContract = connection.store
        self.options: TransportOptions = connection.options
        #: What this channel remembers of askr_bindings.
        self.routes = RoutingCache(self.options.bindings_cache_seconds)
        #: Queues this channel declared auto_delete: deleted when it stops consuming them.
        self._auto_delete: set[str] = set()
        #: The consume half: claim, hold, read, deliver (consuming.py).
        self.consumer = ChannelConsumer(self, connection, self.options)
        #: (exchange, key, queue) this channel bound in a caller's transaction (SQLite,
        #: enlisted): stored again by ``_lookup`` if that transaction rolled back.
        self._bound_in_transaction: set[tuple[str, str, str]] = set()

    # -- publishing -------------------------------------------------------------------

    def _new_job(self, queue: str, message: dict[str, Any]) -> NewJob:
        return new_job(
            queue,
            message,
            max_attempts=self.options.for_queue(queue).max_attempts,
            queue_ttl=self.routes.message_ttl(queue),
            priority_order=self.options.priority_order,
        )

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish: one INSERT; the job is stored when this returns.

        Except a transient message (delivery_mode 1: Celery's events and control
        messages) in a burst, which is written with the burst a moment later.
        """
        self._store(queue, message, hold_transient=True)

    def _store(self, queue: str, message: dict[str, Any], *, hold_transient: bool) -> None:
        validate_queue_name(queue)  # here, not in the writer's thread a moment later
        enlistment = self._enlistment(message)
        if enlistment is None and self.store.single_writer and not is_transient(message):
            self._refuse_behind_own_lock(queue, message)
        fmt = self.connection.formats.get(queue)
        if fmt is not None:  # another format's row, in its table: written now
            table = joined_or_own(self.connection.store_for(queue), enlistment)
            table.enqueue(fmt.write(queue, message))
            return
        job = self._new_job(queue, message)
        window = self.options.dedupe_window_for(queue)
        identity = dedupe_identity(message) if window is not None else None
        joined = joined_or_own(self.store, enlistment)
        enlisted = joined is not self.store  # the caller's transaction: no burst, no other writer
        if identity is not None and window is not None:
            # Enqueue once: written now, whatever its delivery mode (a held burst could not
            # say it wrote nothing).
            if enlisted:
                written = joined.enqueue_once(job, identity, window) is not None
            else:
                written = self.connection.transient.write_through(job, (identity, window))
            if not written:
                self.connection.deduplicated += 1
                logger.debug(
                    "not written to queue %r: %r was first written less than %gs ago",
                    queue,
                    identity,
                    window,
                )
        elif enlisted:
            joined.enqueue(job)
        elif hold_transient and is_transient(message) and self.options.transient_flush_interval:
            self.store.check_payload_size(len(job.payload))  # here, not in the writer thread
            # On one-writer SQLite, written now it would wait for the lock this thread's own
            # enlisted transaction holds: left to the writer thread, for after its commit.
            hold = self.store.single_writer and active(self.options.django_atomic) is not None
            self.connection.transient.put(job, hold=hold)
        else:
            # After the transient messages held before it: one queue keeps its order.
            self.connection.transient.write_through(job)

    def _enlistment(self, message: dict[str, Any]) -> Enlistment | None:
        """The caller's transaction this publish is written in (``kombu_sqlqueue.enlist``,
        or Django's ``atomic()`` with the option ``django_atomic``); None: written as
        usual. Never enlisted: Celery's control, event and reply messages (transient, and
        no task — a task sent transient is still a task), and a task's retry (its delivery
        is settled whatever the task's transaction does: rolled back with it, the retry
        would be lost)."""
        headers = message.get("headers") or {}
        if is_transient(message) and not headers.get("task"):
            return None
        retries = headers.get("retries")
        if isinstance(retries, int) and retries > 0:
            return None
        return active(self.options.django_atomic)

    def _refuse_behind_own_lock(self, queue: str, message: dict[str, Any]) -> None:
        """A message written now, not in the caller's transaction (a retry), while this
        thread's own transaction holds SQLite's one write lock would wait for it until the
        busy timeout ran out: refused at once, with what to do (WriteLockHeld)."""
        if not holds_write_lock(self.store, active(self.options.django_atomic)):
            return
        task = (message.get("headers") or {}).get("task")
        what = f"the retry of task {task}" if task else f"a message to queue {queue!r}"
        raise WriteLockHeld(
            f"{what} cannot be written now: this thread's open transaction holds the SQLite "
            "database's one write lock (an enlist() block, or the transaction the task "
            "completed in), and a retry is never written in it; nothing written — send it "
            "after the transaction ends (call self.retry() outside the with block)"
        )

    def _restore(self, message: Any) -> None:
        # Settlements go through QoS; Kombu's republish-on-restore would
        # duplicate a row that is still in the table.
        raise NotImplementedError("kombu-sqlqueue restores through its QoS, not by republishing")

    # -- consuming (consuming.py: claim, hold, read, deliver) --------------------------

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        return self.consumer.get(queue)

    def _get_and_deliver(self, queue: str, callback: Callable[[Any, str], Any]) -> None:
        self.consumer.get_and_deliver(queue, callback)

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        self.connection.recover_holds_once()
        self.connection.declare_limits_once(queue)
        self.consumer.start(queue, no_ack)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        if queue is not None:
            self.consumer.stop(queue)
        result = super().basic_cancel(consumer_tag)
        if queue in self._auto_delete and queue not in self._active_queues:
            # AMQP's auto_delete: the queue goes when its (last) consumer does — a
            # worker's pidbox queue, a monitor's event queue. Its bindings go with it.
            self._auto_delete.discard(queue)
            self.queue_delete(queue)
        return result

    def close(self) -> None:
        self.delete_auto_delete_queues()
        super().close()

    def delete_auto_delete_queues(self) -> None:
        """Delete the auto_delete queues this channel consumes (best effort: on the way out)."""
        for queue in [q for q in list(self._auto_delete) if q in self._active_queues]:
            try:
                self.queue_delete(queue)
            except StoreError as exc:
                logger.warning("could not delete auto_delete queue %r: %s", queue, exc)
        self._auto_delete.clear()
        lifecycle.untrack_auto_delete(self)

    # -- exchanges and bindings: stored in askr_bindings, so every process routes alike --

    def queue_bind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        exchange = exchange or "amq.direct"
        super().queue_bind(queue, exchange, routing_key, arguments, **kwargs)
        etype = self.state.exchanges.get(exchange, {}).get("type") or "direct"
        topology = self._topology()
        topology.bind(exchange, etype, routing_key, queue)
        if topology is not self.store.topology:  # stored in the caller's transaction
            self._bound_in_transaction.add((exchange, routing_key, queue))
        self._forget_table(exchange)

    def _topology(self) -> TopologyContract:
        """Where a binding made now is stored: inside ``enlist`` on SQLite, the caller's
        transaction (the store's own write would wait for its lock); else the store's."""
        return self.store.topology_in(active(self.options.django_atomic))

    def queue_unbind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        exchange = exchange or "amq.direct"
        super().queue_unbind(queue, exchange, routing_key, arguments, **kwargs)
        self.store.topology.unbind(exchange, routing_key, queue)
        self._bound_in_transaction.discard((exchange, routing_key, queue))
        self._forget_table(exchange)

    def queue_delete(
        self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any
    ) -> Any:
        if if_empty and self._size(queue):
            return None
        for exchange, _rk, _args in list(self.state.queue_bindings(queue)):
            self._forget_table(exchange)
        self._bound_in_transaction = {b for b in self._bound_in_transaction if b[2] != queue}
        self.state.queue_bindings_delete(queue)
        self.connection.queue_keeper.forget(queue)
        self.routes.set_message_ttl(queue, None)
        self.store.topology.drop_queue(queue)  # its jobs, bindings and lifetime, at once
        if queue in self.connection.format_stores:
            self.connection.store_for(queue).delete_queue(queue)
        return None

    def _forget_table(self, exchange: str) -> None:
        self.routes.forget(exchange)

    def get_table(self, exchange: str) -> list[Any]:
        """The routing table of ``exchange`` from askr_bindings (cached for a moment)."""
        now = monotonic()
        table = self.routes.fresh_table(exchange, now)
        if table is not None:
            return table
        routes = self.store.topology.routes(exchange)
        declared = self.state.exchanges.get(exchange)
        type_name = self.routes.learn(exchange, routes, declared["type"] if declared else None)
        kind: Any = self.exchange_types[type_name]  # an instance per channel at run time
        table = [kind.prepare_bind(r.queue, exchange, r.routing_key, None) for r in routes]
        self.routes.keep(exchange, now, table)
        return table

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        declared = self.state.exchanges.get(exchange)
        if declared:
            return self.exchange_types[declared["type"]]
        stored = self.routes.stored_type(exchange)
        if exchange and stored is None:
            self.get_table(exchange)  # learns the type other processes declared
            stored = self.routes.stored_type(exchange)
        return self.exchange_types[stored or default]

    # Fanout goes through Kombu's "shared table" hooks: the table is askr_bindings.
    supports_fanout = True

    def _queue_bind(self, exchange: str, routing_key: str, pattern: Any, queue: str) -> None:
        """Kombu's fanout hook; queue_bind has stored the binding already."""

    def _put_fanout(
        self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any
    ) -> None:
        """A copy of ``message`` for every queue bound to ``exchange`` (any process).

        Written at once, never held with a burst of transient messages: a broadcast is a
        control command (Celery's ``revoke``), which must be stored before a task
        published after it (see ``_deliver_broadcasts_first``)."""
        for queue in self._lookup(exchange, routing_key):
            self._store(queue, message, hold_transient=False)

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> list[str]:
        started = monotonic()
        queues: list[str] = super()._lookup(exchange, routing_key, default)
        read_at = self.routes.read_at(exchange) if exchange else None
        if queues or read_at is None:
            return queues
        if read_at < started:
            if self.routes.missed_recently(exchange, routing_key, started):
                # A fresh read found nothing bound a moment ago (events with no monitor):
                # routed nowhere without a SELECT per publish.
                return queues
            # A binding made since the table was read (a reply queue bound a moment ago):
            # read it again before deciding nothing is bound.
            self.routes.drop_table(exchange)
            queues = super()._lookup(exchange, routing_key, default)
            if queues:
                self.routes.forget_miss(exchange, routing_key)
                return queues
        declared = self._declared_routes(exchange, routing_key)
        if declared:
            # Bound by this channel in a caller's transaction (SQLite, enlisted) that rolled
            # back: Kombu will not declare it again. Stored again now, and routed.
            etype = self.state.exchanges.get(exchange, {}).get("type") or "direct"
            topology = self._topology()
            for key, queue in declared:
                topology.bind(exchange, etype, key, queue)
                if topology is self.store.topology:
                    self._bound_in_transaction.discard((exchange, key, queue))
            self._forget_table(exchange)
            return sorted({queue for _key, queue in declared})
        # Only topic and fanout misses are remembered: a direct miss is most often a reply
        # whose client is binding its reply queue again for its next call right now.
        if self.typeof(exchange).type != "direct":
            self.routes.remember_miss(exchange, routing_key, monotonic())
        return queues

    def _declared_routes(self, exchange: str, routing_key: str) -> list[tuple[str, str]]:
        """(binding key, queue) of the bindings this channel stored in a caller's
        transaction on ``exchange`` that route ``routing_key`` (Kombu keeps their pattern in
        the channel's state). Only those: a binding unbound or deleted since is not
        brought back."""
        table = self.state.exchanges.get(exchange, {}).get("table") or ()
        kind = self.typeof(exchange)
        found = []
        for key, pattern, queue in table:
            if (exchange, key, queue) not in self._bound_in_transaction:
                continue
            if kind.lookup([(key, pattern, queue)], exchange, routing_key, None):
                found.append((key, queue))
        return found

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        if not no_ack:
            return super().basic_get(queue, no_ack, **kwargs)
        # Claimed as a no_ack queue's (settled on receipt), for this call only.
        noack = self.consumer.noack_queues
        noack.add(queue)
        try:
            return super().basic_get(queue, True, **kwargs)
        finally:
            noack.discard(queue)

    # -- queue management ---------------------------------------------------------------

    def prepare_queue_arguments(self, arguments: Any, **kwargs: Any) -> Any:
        # As Redis does: Queue(expires=…, message_ttl=…) become x-expires / x-message-ttl.
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        # Queues are values of the ``queue`` column: nothing to create, but
        # the name is checked now rather than at the first publish.
        validate_queue_name(queue)
        if kwargs.get("auto_delete") or kwargs.get("exclusive"):
            self._auto_delete.add(queue)
            lifecycle.track_auto_delete(self)
        arguments = kwargs.get("arguments") or {}
        expires_ms, ttl_ms = arguments.get("x-expires"), arguments.get("x-message-ttl")
        expires = float(expires_ms) / 1000.0 if expires_ms else None
        ttl = float(ttl_ms) / 1000.0 if ttl_ms is not None else None
        self.routes.set_message_ttl(queue, ttl)
        if expires is None and ttl is None:
            return
        # Recorded so that other processes stamp their messages to it with its TTL, and
        # the queue keepers delete it when unused (x-expires) or its expired messages.
        self._topology().declare_queue(queue, expires, ttl)
        keeper = self.connection.queue_keeper
        if expires is not None:
            keeper.watch(queue, expires, lambda: self._restore_queue(queue, expires, ttl))
        else:
            keeper.ensure_started()

    def _restore_queue(self, queue: str, expires: float, ttl: float | None) -> None:
        """Declare and bind again a queue of ours that expired while we stalled."""
        self.store.topology.declare_queue(queue, expires, ttl)  # the keeper's thread
        for exchange, routing_key, _args in list(self.state.queue_bindings(queue)):
            etype = self.state.exchanges.get(exchange, {}).get("type") or "direct"
            self.store.topology.bind(exchange, etype, routing_key, queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        validate_queue_name(queue)
        return True

    def _size(self, queue: str) -> int:
        return self.connection.store_for(queue).size(queue)

    def _purge(self, queue: str) -> int:
        return self.connection.store_for(queue).purge(queue)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self.connection.store_for(queue).delete_queue(queue)


class Transport(virtual.Transport):
    """Kombu transport for ``sqlqueue+<sqlalchemy-url>`` broker URLs."""

    Channel = Channel

    can_parse_url = True
    default_port = None
    polling_interval = 0.1
    # Not 'sql': Celery switches events off for driver_type == 'sql'.
    driver_type = "sqlqueue"
    driver_name = "sqlalchemy"

    # kombu types these as 1-tuples; ours add the store's wrapped errors.
    connection_errors: tuple[type[BaseException], ...] = (  # type: ignore[assignment]
        *virtual.Transport.connection_errors,
        StoreConnectionError,
    )
    channel_errors: tuple[type[BaseException], ...] = (  # type: ignore[assignment]
        *virtual.Transport.channel_errors,
        StoreError,
    )

    implements = virtual.Transport.implements.extend(
        asynchronous=False,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        self.options = TransportOptions.from_mapping(client.transport_options)
        super().__init__(client, **kwargs)
        self.polling_interval = self.options.polling_interval
        url = database_url(client)
        if url is None:
            from .exceptions import InvalidURL

            raise InvalidURL(
                f"broker URL must be sqlqueue+<database-url>, e.g. sqlqueue+sqlite:///queue.db; "
                f"got {client.as_uri() if client.hostname else 'no URL'}"
            )
        #: The database URL in use (after a failover switch, not Kombu's hostname).
        self.database_url = url
        self.store: JobContract = open_store(url, self.options.store_options())
        #: Queue → its format, for the queues ``queue_formats`` names (the rest: Kombu's).
        self.formats: dict[str, QueueFormat] = load_formats(self.options.queue_formats)
        #: Queue → the table its format keeps its rows in, when not ``askr_jobs``.
        self.format_stores: dict[str, DeliveryStore] = self._open_format_stores(url)
        self.held = HeldDeliveries()
        #: Set by every ack and reject: prefetch room freed (see :meth:`drain_events`).
        self.room_freed = threading.Event()
        #: True while :meth:`drain_events` waits for jobs with a channel that has a prefetch
        #: limit: room freed then ends the wait (:meth:`free_room`).
        self._wait_ends_on_room = False
        #: Deliveries whose task settled them itself (see :meth:`fail_delivery`).
        self.settled_by_task = RecentTags()
        self.pending = PendingSettlements(self.store)
        self.renewer = Renewer(self.store, self.held, self.options, self.pending, self.store_for)
        self.queue_keeper = QueueKeeper(self.store)
        self.transient = TransientWriter(self.store, self.options.transient_flush_interval)
        self.acks = AckBatcher(
            self.pending, self.options.ack_flush_interval, self.options.ack_batch_size
        )
        self._idle_rounds = 0
        #: Seconds until a rate-limited queue may be claimed again (set by this round's claims).
        self._claim_again_in: float | None = None
        #: Queues whose declared limits this connection wrote (declare_limits_once).
        self._limits_declared: set[str] = set()
        self._condition_reported = False
        #: Publishes the deduplication window kept from writing (``dedupe_window``).
        self.deduplicated = 0
        #: The name this process's claims sign with (see holders.py).
        self.consumer_name = self.options.consumer_name or holders.default_name()
        self.store.holder = self.consumer_name
        self._holds_recovered = not self.options.recover_holds

    def recover_holds_once(self) -> None:
        """When consuming starts: hand back a gone predecessor's holds (holders.py)."""
        if self._holds_recovered:
            return
        self._holds_recovered = True
        try:
            recover_dead_holds(self.store, self.consumer_name)
        except SqlQueueError as exc:  # the visibility timeout still brings them back
            logger.warning("could not hand back a gone process's holds: %s", exc)

    def declare_limits_once(self, queue: str) -> None:
        """When consuming ``queue`` starts: write the limits its ``queue_options`` declare
        (``concurrency``, ``rate_limit``) to the queue's controls, once a connection — so
        the code that runs a queue can say how it may run, fleet-wide. Every worker
        writes the same; the CLI's ``limit`` may change it until a worker starts again."""
        declared = self.options.limits().get(queue)
        if declared is None or queue in self._limits_declared:
            return
        if queue in self.formats:
            raise ConfigurationError(
                f"queue_options[{queue!r}] declares a limit, but the queue is in another "
                f"queue format's table ({self.formats[queue].name}), whose workers would not "
                "honour it"
            )
        if declared.concurrency is not None:
            self.store.limit(queue, declared.concurrency)
        if declared.rate_limit is not None:
            self.store.rate_limit(queue, declared.rate_limit)
        if declared.key_concurrency is not None:
            self.store.key_limit(queue, declared.key_concurrency)
        self._limits_declared.add(queue)  # written (a failure is tried again next consume)
        logger.info(
            "queue %r: limits declared by queue_options written (concurrency %s, rate %s, "
            "per key %s)",
            queue,
            declared.concurrency,
            declared.rate_limit,
            declared.key_concurrency,
        )

    def _open_format_stores(self, url: str) -> dict[str, DeliveryStore]:
        opened: dict[int, DeliveryStore | None] = {}
        stores: dict[str, DeliveryStore] = {}
        for queue, fmt in self.formats.items():
            if id(fmt) not in opened:
                opened[id(fmt)] = fmt.open_store(url, self.options.store_options())
            store = opened[id(fmt)]
            if store is not None:
                stores[queue] = store
        return stores

    def store_for(self, queue: str) -> DeliveryStore:
        """The table ``queue``'s rows live in: its format's, or the transport's own."""
        return self.format_stores.get(queue, self.store)

    def fail_delivery(
        self,
        queue: str,
        tag: str,
        headers: dict[str, Any],
        reason: str,
        *,
        timed_out: bool = False,
    ) -> bool:
        """Settle delivery ``tag`` of ``queue`` — a queue of another format — as failed with
        ``reason``, by its format's rules (a retry with backoff, or the failed table).

        For a task that reports its own failure: Celery runs a task in a pool process that
        does not hold the message, so the Laravel format's signal handler calls this there
        (from any process: the write is fenced by the delivery's reservation). False, and
        nothing written, when the delivery is no longer held (already settled: acked when
        the task started, or taken over)."""
        fmt = self.formats.get(queue)
        if fmt is None:
            raise ValueError(f"queue {queue!r} has no queue format; fail_delivery is for those")
        outcome = fmt.failed(queue, headers, reason, timed_out=timed_out)
        written = settle(self.store_for(queue), receipt_of(tag), outcome)
        tell_settled(fmt, queue, headers, outcome, written)
        if self.held.pop(tag) is not None:
            # Held here (a thread or solo pool): Kombu's ack or reject of it follows.
            self.settled_by_task.add(tag)
        return written

    def complete_in(
        self,
        tag: str,
        enlistment: Enlistment,
        *,
        queue: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> bool:
        """Settle delivery ``tag`` as done on ``enlistment``'s connection, in its open
        transaction, fenced by its reservation (``kombu_sqlqueue.complete``, completion.py):
        on a queue of another format (``queue``, from the delivery), by that format's rules
        for an ack — a Laravel chain's next job stored in the same transaction. Raises
        ``DeliveryLost`` when the reservation is no longer this delivery's; writes nothing
        then. From any process: the tag names the row and its reservation. True when the
        format is to be told once the task returns (:meth:`completed`)."""
        try:
            receipt = receipt_of(tag)
        except ValueError:
            raise NotCompletable(f"{tag!r} is not a delivery tag of kombu-sqlqueue") from None
        fmt = self.formats.get(queue) if queue is not None else None
        if fmt is None and not is_claim_token(receipt.token):
            raise NotCompletable(
                f"delivery {tag} is a job of a queue format's table, and the task does not "
                "say which queue it came from: complete() needs the delivery's properties"
            )
        store = self.store if fmt is None or queue is None else self.store_for(queue)
        then = [] if fmt is None or queue is None else fmt.acked(queue, headers or {})
        joined = store.joined(enlistment)
        if joined is None:
            raise NotCompletable(
                "complete() writes in the connection's open transaction, and it has none: "
                "call it inside the transaction that writes the task's effects"
            )
        written = joined.ack_and_enqueue(receipt, then) if then else joined.ack(receipt)
        if not written:
            raise DeliveryLost(
                f"job {receipt.job_id} is no longer this task's delivery (its reservation "
                "lapsed and another consumer took it, or it was settled already): nothing "
                "written; roll back, its effects are the other delivery's to commit"
            )
        return fmt is not None

    def completed(self, tag: str, queue: str, headers: Mapping[str, Any]) -> None:
        """After a task that completed delivery ``tag`` of a format's ``queue`` returned:
        when its transaction committed (the row is gone), the format's steps after a
        settlement run, once, here (Laravel's: the unique lock released, the batch
        recorded); when it rolled back, the holder's own ack settles and tells as usual."""
        fmt = self.formats.get(queue)
        if fmt is None:
            return
        job_id = receipt_of(tag).job_id
        try:
            gone = job_id in self.store_for(queue).gone([job_id])
        except StoreError as exc:
            logger.warning("could not read whether job %d was completed: %s", job_id, exc)
            return
        tell_settled(fmt, queue, headers, None, gone)

    # kombu's two base classes declare this differently; we match the virtual one.
    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]
        """Deliver what is ready; when idle, wait with back-off (or a PostgreSQL wake-up).

        Kombu's base sleeps ``polling_interval`` between empty polls. Here the
        wait doubles while the queues stay empty, up to ``max_polling_interval``,
        and resets once a message arrives; on PostgreSQL the wait ends as soon
        as an enqueue NOTIFYs.
        """
        started = monotonic()
        cycle = self.cycle
        assert cycle is not None  # set by virtual.Transport.__init__
        while True:
            # Cleared before the claim: room freed while it runs is room it may not have seen.
            self.room_freed.clear()
            self._claim_again_in = None
            self.pending.retry()
            try:
                # The callbacks' acks are written together when the round ends (acks.py).
                with self.acks.delivering():
                    cycle.get(self._deliver, timeout=timeout)
                    self._deliver_while_acking(started)
            except Empty:
                pass
            else:
                self._idle_rounds = 0
                return
            elapsed = monotonic() - started
            if timeout is not None and elapsed >= timeout:
                raise TimeoutError() from None
            if self._prefetch_full():
                # Nothing to claim *for*: every consumer holds its whole prefetch (a Celery
                # prefork worker whose pool is busy). The wait ends when an ack or reject
                # frees room — not after a back-off that grew while the queues were busy.
                limit = self.options.max_polling_interval
                self.store.stop_waiting()  # another idle consumer is woken meanwhile
                self.room_freed.wait(limit if timeout is None else min(limit, timeout - elapsed))
                continue
            wait = min(
                self.options.polling_interval * 2**self._idle_rounds,
                self.options.max_polling_interval,
            )
            if timeout is not None:
                wait = min(wait, timeout - elapsed)
            if self._claim_again_in is not None:
                # A rate limit held a claim back: its next job is due then, not a back-off later.
                wait = min(wait, self._claim_again_in)
            self._idle_rounds = min(self._idle_rounds + 1, 32)
            consumed = {q for channel in self.channels for q in channel._active_queues}
            # No-ack queues (a worker's broadcast and reply queues) are read by this
            # consumer alone: it is woken for each of their messages, whoever else waits.
            private = {q for channel in self.channels for q in channel.consumer.noack_queues}
            # A channel whose prefetch was full (a Celery worker's task channel, while its
            # broadcast channel has room) claims again as soon as an ack frees room: that
            # ack — from a prefork pool's result thread — ends the wait (measured: without
            # it each prefetch round waited out the polling interval, ~90 ms on PostgreSQL).
            # Decided by whether a channel *has* a limit, not whether it is full now: an ack
            # that lands between the claim and this line has already made room.
            self._wait_ends_on_room = self._has_prefetch_limit()
            try:
                if self._wait_ends_on_room and self.room_freed.is_set():
                    woken = False  # freed since the claim began: claim again at once
                else:
                    woken = self.store.wait_for_jobs(wait, consumed, private & consumed)
            finally:
                self._wait_ends_on_room = False
            for channel in self.channels:
                channel.consumer.drained.clear()  # waited: claim again (a wake-up, or a poll)
            if woken:
                self._idle_rounds = 0

    def claim_again_within(self, seconds: float) -> None:
        """A claim was held back by a queue's rate limit, whose next job may be claimed in
        ``seconds``: an idle wait of this round ends by then."""
        if self._claim_again_in is None or seconds < self._claim_again_in:
            self._claim_again_in = seconds

    def _deliver_while_acking(self, started: float) -> None:
        """After a delivery round whose callbacks acked what they were handed (a Kombu
        consumer, a Celery worker's solo pool), go on delivering: the next round's claim
        writes the held acks in its own transaction (one statement on PostgreSQL), so a
        consumer draining a backlog pays one write per round instead of two. Ends when a
        round finds nothing (its claim wrote the acks: none is left held when
        ``drain_events`` returns, as before), when the callbacks stop acking (their
        messages still held: no room to claim for), or after ``DRAIN_ROUNDS`` rounds or
        ``DRAIN_SECONDS`` — so a caller's loop (Celery's stop and QoS checks) still runs
        often."""
        cycle = self.cycle
        assert cycle is not None
        for _ in range(DRAIN_ROUNDS):
            if not len(self.acks) or monotonic() - started >= DRAIN_SECONDS:
                return
            try:
                cycle.get(self._deliver)
            except Empty:
                return

    def wakes_on_enqueue(self, queue: str) -> bool:
        """True when a job enqueued on ``queue`` is sure to wake an idle consumer."""
        return queue not in self.format_stores and self.store.wakes_on_enqueue()

    def _prefetch_full(self) -> bool:
        """True when every channel with consumers holds as many deliveries as its prefetch
        allows (so no claim is made, however full the queues are)."""
        busy = [channel for channel in self.channels if channel._consumers]
        return bool(busy) and not any(channel.qos.can_consume() for channel in busy)

    def _has_prefetch_limit(self) -> bool:
        """True when a channel with consumers has a prefetch limit (an ack can free room)."""
        return any(channel._consumers and channel.qos.prefetch_count for channel in self.channels)

    def free_room(self) -> None:
        """An ack or reject freed prefetch room (from any thread): a wait for room ends,
        and so does a wait for jobs entered while a channel has a prefetch limit."""
        self.room_freed.set()
        if self._wait_ends_on_room:
            self.store.interrupt_wait()

    def report_condition(self, exc: StoreConditionError) -> None:
        """A claim met a full, read-only or refused database: say so once; the consumer
        polls on (claiming writes, so nothing can be taken until it clears)."""
        if not self._condition_reported:
            logger.error("cannot claim messages: %s; will retry", exc)
            self._condition_reported = True

    def condition_cleared(self) -> None:
        """A claim went through: say so if one had been reported."""
        if self._condition_reported:
            logger.warning("claiming messages again: the database accepts writes")
            self._condition_reported = False

    def establish_connection(self) -> Any:
        """Open the database now (creating the tables if needed), so a bad URL fails here."""
        self.store.ensure_ready()
        for store in self.format_stores.values():
            store.ensure_ready()
        return super().establish_connection()

    def close_connection(self, connection: Any) -> None:
        try:
            # Held transient messages first: closing the channels deletes their
            # auto_delete queues, which must not be written to afterwards.
            self.transient.stop()
            self.acks.stop()  # held acks written; later ones (a channel's close) at once
            super().close_connection(connection)
        finally:
            self.renewer.stop()
            self.pending.give_up()
            self.queue_keeper.stop()
            self.store.close()
            for store in {id(s): s for s in self.format_stores.values()}.values():
                store.close()
            for fmt in {id(f): f for f in self.formats.values()}.values():
                try:
                    fmt.close()
                except Exception:  # the rest still closes
                    logger.exception("closing queue format %s failed", fmt.name)

    def driver_version(self) -> str:
        return driver_version()

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"hostname": "sqlite:///kombu-sqlqueue.db"}

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        if not uri or "://" not in str(uri):  # switched to a failover URL: Kombu split it
            uri = self.database_url
        return f"sqlqueue+{render_url(uri, include_password=include_password)}"


__all__ = ["Channel", "Transport", "__version__", "eta_delay"]  # eta_delay: envelope's
