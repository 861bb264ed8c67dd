"""Transport options, parsed once into a frozen dataclass. Unknown keys are an error.

Set them as Celery's ``broker_transport_options`` or Kombu's
``Connection(transport_options=...)``. Every option is listed, with its
default, in ``docs/configuration.md``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .exceptions import ConfigurationError, InvalidControl, InvalidQueueName, UnknownTransportOption
from .store import DEFAULT_MAX_ATTEMPTS, MAX_CLAIM, BackoffPolicy, StoreOptions
from .store.controls import Rate, check_concurrency, check_rate, parse_rate
from .store.names import validate_queue_name
from .store.network import MAX_SECONDS

#: Options Kombu or Celery themselves read from ``transport_options``; we accept
#: them and leave them to their readers.
KOMBU_GENERIC_OPTIONS = frozenset(
    {
        "body_encoding",
        "deadletter_queue",
        "max_retries",
        "interval_start",
        "interval_step",
        "interval_max",
        "connect_retries_timeout",
        "retry_policy",
    }
)

PRIORITY_ORDERS = ("high_first", "low_first")


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """Per-queue overrides of ``max_attempts`` and the backoff curve, and the queue's
    fleet-wide limits, declared by the code that consumes it."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    #: At most this many jobs of the queue held at once by every worker (written to the
    #: queue's controls when a consumer starts; None: left as stored).
    concurrency: int | None = None
    #: At most so many jobs handed out per period by every worker (likewise).
    rate_limit: Rate | None = None
    #: At most this many jobs of one ``concurrency_key`` held at once (likewise).
    key_concurrency: int | None = None


def _queue_concurrency(queue: str, value: Any, key: str = "concurrency") -> int | None:
    if value is None:
        return None
    try:
        return check_concurrency(queue, value)
    except InvalidControl as exc:
        raise ConfigurationError(f"queue_options[{queue!r}][{key!r}]: {exc}") from exc


def _queue_rate(queue: str, value: Any) -> Rate | None:
    """``rate_limit`` as Celery spells it (``"10/s"``, ``"100/m"``) or a :class:`Rate`."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # Celery's plain number: per second
    try:
        return check_rate(value) if isinstance(value, Rate) else parse_rate(value)
    except InvalidControl as exc:
        raise ConfigurationError(f"queue_options[{queue!r}]['rate_limit']: {exc}") from exc


def _number(name: str, value: Any, *, minimum: float, integer: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"transport option {name} must be a number, got {value!r}")
    if integer and int(value) != value:
        raise ConfigurationError(f"transport option {name} must be a whole number, got {value!r}")
    if value < minimum:
        raise ConfigurationError(f"transport option {name} must be >= {minimum}, got {value!r}")
    return int(value) if integer else float(value)


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """Every setting of the transport, validated."""

    #: Seconds a claimed message stays reserved before it may go to another
    #: consumer. Renewed automatically while the consuming process lives.
    visibility_timeout: float = 60.0
    #: Seconds between renewals of held reservations (default: a third of the timeout).
    renew_interval: float | None = None
    #: Seconds an idle consumer first waits after finding its queues empty; each
    #: further empty poll doubles the wait up to ``max_polling_interval``.
    polling_interval: float = 0.1
    #: Longest idle wait between polls. On PostgreSQL an idle consumer LISTENs, so a
    #: new job wakes it at once whatever this is.
    max_polling_interval: float = 1.0
    #: Deliveries of a message before the claim dead-letters it instead. The
    #: lower of this (the consumer's) and the row's stamp (the producer's) applies.
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: Equal-jitter exponential backoff for ``reject(requeue=True)``.
    backoff_base: float = 1.0
    backoff_cap: float = 3600.0
    #: Per-queue ``{"max_attempts": …, "backoff_base": …, "backoff_cap": …}``.
    queue_options: Mapping[str, QueueOptions] = field(default_factory=dict)
    #: ``high_first`` (RabbitMQ and contract v1: 9 before 0) or ``low_first`` (Redis: 0 first).
    priority_order: str = "high_first"
    #: Most messages one poll claims for a consumer (bounded by its prefetch).
    claim_batch_size: int = 32
    #: SQLite durability: ``NORMAL`` (default) or ``FULL``.
    sqlite_synchronous: str = "NORMAL"
    #: PostgreSQL ``synchronous_commit`` for the queue's writes (None: the server's).
    synchronous_commit: str | None = None
    #: Seconds a writer waits on a locked SQLite database before retrying.
    busy_timeout: float = 30.0
    #: Create the tables on first use.
    create_tables: bool = True
    #: Seconds to keep reconnecting after the database connection is lost (server
    #: restart); publishes and acks wait meanwhile. 0: raise at once.
    reconnect_timeout: float = 60.0
    #: Seconds a connection to a database server may hear nothing from it (a network
    #: partition: no reply, no reset) before it is given up and reconnected: TCP
    #: keepalives, ``TCP_USER_TIMEOUT`` and the connect timeout. A long statement on a
    #: live server is not cut (its kernel answers the keepalives). A setting of the same
    #: name in the URL (``connect_timeout=``, ``keepalives_idle=``…) wins.
    network_timeout: float = 30.0
    #: Seconds a process reuses an exchange's bindings read from askr_bindings before it
    #: reads them again. A publish that finds no bound queue reads them again at once,
    #: unless a fresh read found its topic/fanout routing key unbound within this time.
    bindings_cache_seconds: float = 1.0
    #: Seconds transient messages (delivery_mode 1: Celery's events and control messages)
    #: arriving in a burst are collected to be written in one statement; a transient
    #: message with none written this long before is written at once. 0: always at once.
    transient_flush_interval: float = 0.05
    #: Seconds an ack may be held to be written with others in one statement and commit
    #: (before the consumer's next claim, or after this long; see ``acks.py``). A process
    #: killed outright loses the acks it held: those messages are delivered again, as any
    #: unacked one. 0: every ack is written before ``ack()`` returns.
    ack_flush_interval: float = 0.005
    #: Most acks held before they are written (the bound on redeliveries a kill adds).
    ack_batch_size: int = 64
    #: Queues whose rows are not Kombu's envelope: ``{queue: format}``, the format a name
    #: (``"laravel"``: Laravel's own ``jobs``/``failed_jobs`` tables) or a mapping with the
    #: name under ``"format"`` and the format's settings beside it (see ``formats.py`` and
    #: docs/laravel-queue.md, "Celery and Laravel on one queue").
    queue_formats: Mapping[str, Any] = field(default_factory=dict)
    #: The name this process's claims sign their reservations with (None: the Celery
    #: worker's node name, else ``<program>@<host>``); see docs/operations.md.
    consumer_name: str | None = None
    #: Enqueue once: seconds during which a publish whose identity (the header
    #: ``dedupe_key``, else the Celery task id) was first written to the queue writes
    #: nothing — a number for every queue, or ``{queue: seconds}``; None: off.
    dedupe_window: float | Mapping[str, float] | None = None
    #: Hand back, when consuming starts, the holds of an earlier process of this host
    #: that signed with the same name and is gone (never a live process's).
    recover_holds: bool = True
    #: Django: a publish made inside ``transaction.atomic()`` on this database alias is
    #: written in that transaction (``kombu_sqlqueue.enlist`` by itself): ``"default"``, or
    #: True for it; None: off (publishes outside ``enlist`` are written at once).
    django_atomic: str | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> TransportOptions:
        """Parse Kombu ``transport_options``; raise on unknown keys and bad values."""
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        for key in raw:
            if key not in known and key not in KOMBU_GENERIC_OPTIONS:
                hint = difflib.get_close_matches(key, sorted(known), n=1)
                raise UnknownTransportOption(
                    f"unknown transport option {key!r}"
                    + (f"; did you mean {hint[0]!r}?" if hint else "")
                    + f" (known: {', '.join(sorted(known))})"
                )
        values = {k: v for k, v in raw.items() if k in known}
        for name in (
            "visibility_timeout",
            "polling_interval",
            "max_polling_interval",
            "backoff_base",
            "backoff_cap",
            "reconnect_timeout",
            "bindings_cache_seconds",
            "transient_flush_interval",
            "ack_flush_interval",
        ):
            if name in values:
                values[name] = _number(name, values[name], minimum=0)
        if values.get("renew_interval") is not None:
            values["renew_interval"] = _number(
                "renew_interval", values["renew_interval"], minimum=0.1
            )
        if "max_attempts" in values:
            values["max_attempts"] = _number(
                "max_attempts", values["max_attempts"], minimum=1, integer=True
            )
        if "claim_batch_size" in values:
            values["claim_batch_size"] = _number(
                "claim_batch_size", values["claim_batch_size"], minimum=1, integer=True
            )
            if values["claim_batch_size"] > MAX_CLAIM:
                raise ConfigurationError(
                    f"claim_batch_size may be at most {MAX_CLAIM}, got {values['claim_batch_size']}"
                )
        if "ack_batch_size" in values:
            values["ack_batch_size"] = _number(
                "ack_batch_size", values["ack_batch_size"], minimum=1, integer=True
            )
        if "network_timeout" in values:
            values["network_timeout"] = _number(
                "network_timeout", values["network_timeout"], minimum=1
            )
            if not values["network_timeout"] <= MAX_SECONDS:  # NaN fails too
                raise ConfigurationError(
                    f"transport option network_timeout must be <= {MAX_SECONDS:,} seconds, "
                    f"got {values['network_timeout']!r}"
                )
        if "busy_timeout" in values:
            values["busy_timeout"] = _number("busy_timeout", values["busy_timeout"], minimum=0.001)
        order = values.get("priority_order", "high_first")
        if order not in PRIORITY_ORDERS:
            raise ConfigurationError(
                f"priority_order must be one of {', '.join(PRIORITY_ORDERS)}, got {order!r}"
            )
        for flag in ("create_tables", "recover_holds"):
            if flag in values and not isinstance(values[flag], bool):
                raise ConfigurationError(f"{flag} must be True or False, got {values[flag]!r}")
        window = values.get("dedupe_window")
        if isinstance(window, Mapping):
            checked = {}
            for queue, seconds in window.items():
                try:
                    validate_queue_name(queue)
                except InvalidQueueName as exc:
                    raise ConfigurationError(f"dedupe_window: {exc}") from exc
                checked[queue] = _number(f"dedupe_window[{queue!r}]", seconds, minimum=1)
            values["dedupe_window"] = checked
        elif window is not None:
            values["dedupe_window"] = _number("dedupe_window", window, minimum=1)
        consumer = values.get("consumer_name")
        if consumer is not None and (
            not isinstance(consumer, str) or not consumer.strip() or len(consumer) > 255
        ):
            raise ConfigurationError(
                "consumer_name must be a non-empty string of at most 255 characters, "
                f"got {consumer!r}"
            )
        atomic = values.get("django_atomic")
        if atomic is True:
            values["django_atomic"] = "default"
        elif atomic is False:
            values["django_atomic"] = None
        elif atomic is not None and (not isinstance(atomic, str) or not atomic):
            raise ConfigurationError(
                f"django_atomic is a Django database alias (or True for 'default'), got {atomic!r}"
            )
        formats = values.get("queue_formats", {})
        if not isinstance(formats, Mapping):
            raise ConfigurationError(
                f"queue_formats must be a mapping of queue name to format, got {formats!r}"
            )
        for queue in formats:
            try:
                validate_queue_name(queue)
            except InvalidQueueName as exc:
                raise ConfigurationError(f"queue_formats: {exc}") from exc
        base = cls(**{k: v for k, v in values.items() if k != "queue_options"})
        per_queue: dict[str, QueueOptions] = {}
        for queue, raw_queue in dict(values.get("queue_options") or {}).items():
            try:
                validate_queue_name(queue)
            except InvalidQueueName as exc:
                raise ConfigurationError(f"queue_options: {exc}") from exc
            per_queue[queue] = base._queue_options(queue, raw_queue)
        options = cls(
            **{**{f.name: getattr(base, f.name) for f in fields(cls)}, "queue_options": per_queue}
        )
        if options.visibility_timeout < 1:
            raise ConfigurationError(
                f"visibility_timeout must be >= 1 second, got {options.visibility_timeout!r}"
            )
        if options.max_polling_interval < options.polling_interval:
            raise ConfigurationError(
                f"max_polling_interval ({options.max_polling_interval}s) must be at least "
                f"polling_interval ({options.polling_interval}s)"
            )
        if options.renew_interval is not None and (
            options.renew_interval > options.visibility_timeout / 2
        ):
            # Renewing less often than this lets a live worker's reservation lapse.
            raise ConfigurationError(
                f"renew_interval ({options.renew_interval}s) must be at most half of "
                f"visibility_timeout ({options.visibility_timeout}s)"
            )
        options.store_options()  # validates the SQLite settings now, not at first use
        return options

    def _queue_options(self, queue: str, raw: Any) -> QueueOptions:
        if isinstance(raw, QueueOptions):
            return raw
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"queue_options[{queue!r}] must be a mapping, got {raw!r}")
        allowed = {
            "max_attempts", "backoff_base", "backoff_cap", "concurrency", "rate_limit",
            "key_concurrency",
        }  # fmt: skip
        unknown = set(raw) - allowed
        if unknown:
            raise UnknownTransportOption(
                f"queue_options[{queue!r}] has unknown keys {sorted(unknown)}; "
                f"allowed: {sorted(allowed)}"
            )
        return QueueOptions(
            max_attempts=_number(
                "max_attempts", raw.get("max_attempts", self.max_attempts), minimum=1, integer=True
            ),
            backoff=BackoffPolicy(
                _number("backoff_base", raw.get("backoff_base", self.backoff_base), minimum=0),
                _number("backoff_cap", raw.get("backoff_cap", self.backoff_cap), minimum=0),
            ),
            concurrency=_queue_concurrency(queue, raw.get("concurrency")),
            key_concurrency=_queue_concurrency(
                queue, raw.get("key_concurrency"), "key_concurrency"
            ),
            rate_limit=_queue_rate(queue, raw.get("rate_limit")),
        )

    def limits(self) -> dict[str, QueueOptions]:
        """The queues whose options declare a limit (concurrency, rate)."""
        return {
            queue: options
            for queue, options in self.queue_options.items()
            if options.concurrency is not None
            or options.rate_limit is not None
            or options.key_concurrency is not None
        }

    def for_queue(self, queue: str) -> QueueOptions:
        """The attempts limit and backoff that apply to ``queue``."""
        found = self.queue_options.get(queue)
        if found is not None:
            return found
        return QueueOptions(self.max_attempts, BackoffPolicy(self.backoff_base, self.backoff_cap))

    def dedupe_window_for(self, queue: str) -> float | None:
        """The deduplication window of ``queue`` in seconds; None: every publish writes."""
        window = self.dedupe_window
        if isinstance(window, Mapping):
            found = window.get(queue)
            return None if found is None else float(found)
        return window

    @property
    def effective_renew_interval(self) -> float:
        """Seconds between renewals: the option, or a third of the visibility timeout."""
        return self.renew_interval or max(self.visibility_timeout / 3.0, 0.1)

    def store_options(self) -> StoreOptions:
        """The subset the job store takes."""
        return StoreOptions(
            create_tables=self.create_tables,
            sqlite_synchronous=self.sqlite_synchronous,
            busy_timeout=self.busy_timeout,
            reconnect_timeout=self.reconnect_timeout,
            network_timeout=self.network_timeout,
            synchronous_commit=self.synchronous_commit,
            django_atomic=self.django_atomic,
        )
