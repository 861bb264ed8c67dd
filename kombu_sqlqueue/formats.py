"""Queue formats: what a queue's rows hold when it is not Kombu's own envelope.

An ordinary queue's rows are Kombu messages as :mod:`.envelope` stores them. A queue
named in the transport option ``queue_formats`` holds rows of another format instead —
Laravel's job payloads, which PHP workers read too (``laravel_bridge.messages``). An
object of that format, a :class:`QueueFormat`, turns each claimed row into the Kombu
message a consumer receives (:meth:`~QueueFormat.read`), each message published to the
queue into the row stored (:meth:`~QueueFormat.write`), and says how a delivery that was
rejected, or whose task failed, is settled by the format's rules
(:meth:`~QueueFormat.rejected`, :meth:`~QueueFormat.failed`). Its rows may live in
another table than ``askr_jobs``: then :meth:`~QueueFormat.open_store` opens it.

The transport knows no format by itself: it finds them by name among the entry points of
the group ``kombu_sqlqueue.formats`` (``laravel`` is ``laravel_bridge``'s), or as a
``module:attribute`` path, and calls each with the queue's settings. So the dependency
goes one way: a format imports the transport's interfaces here, never the reverse.

No SQL and no Kombu here.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol

from .exceptions import ConfigurationError, MalformedMessage
from .store import ClaimedJob, DeliveryStore, NewJob, Receipt, StoreOptions

logger = logging.getLogger(__name__)

#: The entry point group formats are registered under.
ENTRY_POINT_GROUP = "kombu_sqlqueue.formats"


class Undeliverable(MalformedMessage):
    """A row its format reads but will not hand out (a Laravel job past its tries): it is
    settled as failed with this reason instead, once."""


@dataclass(frozen=True, slots=True)
class Release:
    """Ready again after ``delay`` seconds, the attempt counted (a retry)."""

    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class HandBack:
    """Not this consumer's to run: ready again after ``delay`` seconds, attempt refunded."""

    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Fail:
    """Settled as failed: the dead letters (or the format's failed table) with ``reason``."""

    reason: str


#: How a format settles a delivery its consumer did not finish.
Outcome = Release | HandBack | Fail


class QueueFormat(Protocol):
    """One format's rules for the queues that hold it. Called from the consumer's thread
    and the renewer's; an implementation keeps no per-delivery state it cannot lose."""

    #: The format's name, for logs ("laravel").
    name: str

    def open_store(self, url: str, options: StoreOptions) -> DeliveryStore | None:
        """The table this format's queues live in, opened on the transport's database URL;
        None when they live in the transport's own (contract v1's ``askr_jobs``)."""
        ...

    def read(self, job: ClaimedJob) -> dict[str, Any]:
        """The Kombu message (``body`` text, ``headers``, ``properties``, ``content-type``,
        ``content-encoding``) a claimed row is delivered as. Raises
        :class:`~kombu_sqlqueue.exceptions.MalformedMessage` for a row it cannot read
        (dead-lettered with the reason) or :class:`Undeliverable`."""
        ...

    def write(self, queue: str, message: dict[str, Any]) -> NewJob:
        """The row a message published to ``queue`` is stored as. Raises
        :class:`~kombu_sqlqueue.exceptions.MalformedMessage` for a message the format
        cannot hold (nothing is stored)."""
        ...

    def acked(self, queue: str, headers: Mapping[str, Any]) -> Sequence[NewJob]:
        """Jobs to store with the ack of a delivery, in its transaction (a Laravel chain's
        next job); ``headers`` are the delivered message's."""
        ...

    def rejected(
        self, queue: str, headers: Mapping[str, Any], attempts: int, requeue: bool
    ) -> Outcome:
        """How a delivery its consumer rejected (``requeue`` as asked) is settled."""
        ...

    def failed(
        self, queue: str, headers: Mapping[str, Any], reason: str, *, timed_out: bool
    ) -> Outcome:
        """How a delivery whose task raised ``reason`` (or ran past its time limit) is
        settled; ``headers`` are the delivered message's."""
        ...

    def settled(self, queue: str, headers: Mapping[str, Any], outcome: Outcome | None) -> None:
        """A settlement of a delivery was written (``None``: it was acked): what the format's
        runtime does after a job is done or failed (Laravel: its batch recorded). Not called
        for a stale settlement; what it raises is logged, never raised."""
        ...

    def close(self) -> None:
        """The transport closes: release what the format opened beside its store (the
        transport closes the store itself)."""
        ...


def tell_settled(
    fmt: QueueFormat,
    queue: str,
    headers: Mapping[str, Any],
    outcome: Outcome | None,
    written: bool,
) -> bool:
    """``written``, after telling ``fmt`` (:meth:`QueueFormat.settled`) when it is True."""
    if written:
        try:
            fmt.settled(queue, headers, outcome)
        except Exception:  # the settlement stands; what follows it is the format's
            logger.exception("queue format %s failed after settling a delivery", fmt.name)
    return written


def settle(store: DeliveryStore, receipt: Receipt, outcome: Outcome) -> bool:
    """Write ``outcome`` for the delivery ``receipt`` names; False when it is stale."""
    if isinstance(outcome, Release):
        return store.release(receipt, outcome.delay)
    if isinstance(outcome, HandBack):
        return store.return_job(receipt, outcome.delay)
    return store.dead_letter(receipt, outcome.reason)


#: A format's factory: its settings (the ``queue_formats`` entry, ``format`` removed).
FormatFactory = Callable[[Mapping[str, Any]], QueueFormat]


def format_factory(name: str) -> FormatFactory:
    """The factory of format ``name``: an entry point of :data:`ENTRY_POINT_GROUP`, or a
    ``module:attribute`` path."""
    if ":" in name:
        module, _, attribute = name.partition(":")
        try:
            found: FormatFactory = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"queue format {name!r} cannot be loaded: {exc}") from exc
        return found
    matches = entry_points(group=ENTRY_POINT_GROUP, name=name)
    for entry in matches:
        loaded: FormatFactory = entry.load()
        return loaded
    known = sorted(e.name for e in entry_points(group=ENTRY_POINT_GROUP))
    raise ConfigurationError(
        f"unknown queue format {name!r}; installed: {', '.join(known) or 'none'} "
        "(or give a module:attribute path)"
    )


def format_settings(queue: str, spec: Any) -> tuple[str, dict[str, Any]]:
    """``(format name, settings)`` of one ``queue_formats`` entry: a name, or a mapping
    with the name under ``format`` and the format's own settings beside it."""
    if isinstance(spec, str) and spec:
        return spec, {}
    if isinstance(spec, Mapping) and isinstance(spec.get("format"), str):
        settings = {str(k): v for k, v in spec.items() if k != "format"}
        return str(spec["format"]), settings
    raise ConfigurationError(
        f"queue_formats[{queue!r}] must be a format name or a mapping with a 'format' key, "
        f"got {spec!r}"
    )


def load_formats(spec: Mapping[str, Any]) -> dict[str, QueueFormat]:
    """Queue name → its format object, for the ``queue_formats`` option. Queues with the
    same format and settings share one object (and so one table)."""
    from .store.names import validate_queue_name

    made: dict[str, QueueFormat] = {}
    by_queue: dict[str, QueueFormat] = {}
    for queue, entry in spec.items():
        validate_queue_name(queue)
        name, settings = format_settings(queue, entry)
        key = json.dumps([name, settings], sort_keys=True, default=repr)
        if key not in made:
            made[key] = format_factory(name)(settings)
        by_queue[queue] = made[key]
    return by_queue


__all__ = [
    "ENTRY_POINT_GROUP",
    "DeliveryStore",
    "Fail",
    "FormatFactory",
    "HandBack",
    "Outcome",
    "QueueFormat",
    "Release",
    "Undeliverable",
    "format_factory",
    "format_settings",
    "load_formats",
    "settle",
    "tell_settled",
]
