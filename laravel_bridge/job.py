"""One Laravel job: a stored row read into a :class:`Job`, and the next job of its chain.

:func:`parse_job` turns a reserved row into the :class:`Job` a handler receives, or
raises :class:`MalformedJob` saying why it cannot (the worker fails such a row once,
as stored). :func:`chain_successor` builds the row Laravel's
``Queueable::dispatchNextJobInChain`` would push after a chained job succeeded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kombu_sqlqueue.exceptions import InvalidQueueName, NotCompletable
from kombu_sqlqueue.store.enlist import Enlistment
from kombu_sqlqueue.store.names import validate_queue_name

from . import php_serialize
from .encryption import Encrypter
from .exceptions import LaravelBridgeError, PayloadError
from .payload import (
    CALL_QUEUED_HANDLER,
    CARBON_CLASSES,
    DEFAULT_LARAVEL_VERSION,
    DEFAULT_QUEUE,
    MAX_COMMAND_DEPTH,
    MAX_PAYLOAD_BYTES,
    PLUMBING,
    JobCommand,
    Payload,
    date_from_php,
    delay_seconds,
    short_repr,
    unix_time,
    unpack,
)
from .php_serialize import PhpObject
from .tables import PushJob, ReservedJob

#: The command classes Laravel wraps what is not a job in, by the kind of thing inside. A
#: handler is registered under the class Laravel names in ``displayName`` (the listener,
#: mailable or notification) and gets the wrapped values unpacked (:class:`Job`).
WRAPPERS = {
    "Illuminate\\Events\\CallQueuedListener": "listener",
    "Illuminate\\Mail\\SendQueuedMailable": "mailable",
    "Illuminate\\Notifications\\SendQueuedNotifications": "notification",
    "Illuminate\\Queue\\CallQueuedClosure": "closure",
}
#: ``dispatch(function () { … })``: PHP code inside, which only a PHP worker can run.
CLOSURE_COMMAND = "Illuminate\\Queue\\CallQueuedClosure"
#: A collection of notifiables that are not models (models come as one ModelIdentifier).
COLLECTION_CLASSES = (
    "Illuminate\\Support\\Collection",
    "Illuminate\\Database\\Eloquent\\Collection",
)


class MalformedJob(LaravelBridgeError):
    """A stored job cannot be read: it goes to the failed table with this reason."""

    def __init__(self, message: str | None = None, uuid: str | None = None) -> None:
        super().__init__(message)
        #: The payload's uuid when it has a usable one (the failed row keeps it).
        self.uuid = uuid


@dataclass
class Job:
    """What a handler receives: one delivery of a Laravel job.

    ``name`` is the class Laravel names in ``displayName`` (and prints): the job class, or
    for what Laravel wraps, the listener, mailable or notification class. ``kind`` says
    which: ``"job"``, ``"listener"``, ``"mailable"``, ``"notification"`` (or
    ``"closure"``, which Python never runs). ``command`` is the decoded command object
    (the wrapper, for those; None for a job pushed without one).

    ``properties`` are the named object's own properties by plain name (visibility
    stripped) as Python values — the job's, the mailable's (``to``, ``cc``, ``subject`` …)
    or the notification's; a listener has none (its event is in ``arguments``).
    ``arguments`` are what Laravel's wrapper hands that class, unpacked (objects as
    :class:`PhpObject` of Python values, dates as ``datetime``, models as
    ``ModelIdentifier``): a listener's method arguments (the event first), ``[mailable]``,
    or ``[notifiables, notification, channels]``; ``[]`` for a job. :attr:`event`,
    :attr:`mailable`, :attr:`notification`, :attr:`notifiables` and :attr:`channels`
    read them by name.

    A handler may call :meth:`release`, :meth:`fail` or :meth:`delete`; otherwise
    returning settles the job as done. A handler whose effects are in the jobs table's
    database calls :meth:`complete` in the transaction that writes them: the job is done
    exactly when that transaction commits, and never twice.
    """

    id: int
    name: str
    queue: str
    attempts: int
    uuid: str
    payload: Payload
    command: JobCommand | None
    properties: dict[str, Any]
    kind: str = "job"
    arguments: list[Any] = field(default_factory=list)
    #: Set by :meth:`release` / :meth:`fail` / :meth:`delete`.
    outcome: tuple[str, Any] | None = field(default=None, repr=False)
    #: What :meth:`complete` calls: set by the worker that delivered the job
    #: (``laravel_bridge.completion``); None for a job no worker is running.
    completer: Callable[[Enlistment], None] | None = field(default=None, repr=False)
    #: True once :meth:`complete` wrote the job's settlement in a transaction (which may
    #: still roll back: the worker reads the row after the handler to know).
    completed: bool = field(default=False, repr=False)

    @property
    def event(self) -> Any:
        """A listener's event (its first argument); None for other kinds."""
        return self.arguments[0] if self.kind == "listener" and self.arguments else None

    @property
    def mailable(self) -> PhpObject | None:
        """A queued mailable (its recipients in ``to``, ``cc``, ``bcc``); None otherwise."""
        return self.arguments[0] if self.kind == "mailable" else None

    @property
    def notifiables(self) -> Any:
        """A notification's notifiables: a ``ModelIdentifier`` (ids in ``id``) for models,
        else the list of notifiable objects; None for other kinds."""
        return self.arguments[0] if self.kind == "notification" else None

    @property
    def notification(self) -> PhpObject | None:
        """A queued notification object; None for other kinds."""
        return self.arguments[1] if self.kind == "notification" else None

    @property
    def channels(self) -> list[str] | None:
        """The channels a notification goes to (None: the notification's ``via()``)."""
        return self.arguments[2] if self.kind == "notification" else None

    @property
    def batch_id(self) -> str | None:
        """The ``Bus::batch`` this job belongs to: the payload's ``data.batchId`` (Laravel
        12+), else the command's ``batchId`` (``Batchable``); None outside a batch."""
        found = self.payload.batch_id
        if not isinstance(found, str) and self.command is not None:
            found = self.command.obj.get("batchId")
        return found if isinstance(found, str) and found else None

    @property
    def handler_names(self) -> tuple[str, ...]:
        """The class names a handler may be registered under, first match wins: Laravel's
        display name, then the command's class (a wrapper's, for what Laravel wraps)."""
        names = [self.name]
        command = self.command.class_name if self.command is not None else None
        for other in (command, self.payload.command_name):
            if isinstance(other, str) and other.strip("\\") and other not in names:
                names.append(other)
        return tuple(names)

    def release(self, delay: float | timedelta = 0) -> None:
        """Put the job back on its queue after ``delay`` seconds (the attempt counts)."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        self.outcome = ("release", max(0.0, seconds))

    def fail(self, reason: BaseException | str | None = None) -> None:
        """Fail the job now: it goes to the failed table."""
        self.outcome = ("fail", reason)

    def delete(self) -> None:
        """Settle the job as done (what returning does)."""
        self.outcome = ("delete", None)

    def complete(self, connection: Any = None, *, using: str = "default") -> None:
        """Settle the job as done on ``connection``, in its open transaction, fenced by this
        delivery's reservation — with the next job of its chain, if any: the handler's
        writes, the job's deletion and the chain's next step commit together, once.

        ``connection``: a SQLAlchemy ``Connection`` or ``Session``, a DB-API connection, or
        None for Django's (``using`` names the alias), to the jobs table's database.
        Raises :class:`~kombu_sqlqueue.exceptions.DeliveryLost` when the reservation is no
        longer this delivery's (it lapsed and another worker took the job), and
        :class:`~kombu_sqlqueue.exceptions.NotCompletable` outside a worker's delivery or
        with no open transaction: nothing is written then, and the transaction is the
        handler's to roll back (letting the exception out does). After the commit the
        worker's own settlement of the job changes nothing (``laravel_bridge.completion``)."""
        if self.completer is None:
            raise NotCompletable(
                f"job {self.id} ({self.name}) was not delivered by a worker: there is no "
                "reservation to complete"
            )
        self.completer(Enlistment(connection, using))
        self.completed = True


def parse_job(
    row: ReservedJob,
    *,
    max_bytes: int = MAX_PAYLOAD_BYTES,
    encrypter: Encrypter | None = None,
    handled: Callable[[str], bool] | None = None,
) -> Job:
    """The job in a reserved row, or :class:`MalformedJob` saying why there is none.

    ``handled(class_name)`` says whether a handler here runs a class: the command of
    a class none runs is left undecoded (None when not given: every command is decoded).
    """
    try:
        payload = Payload.parse(row.payload, max_bytes=max_bytes)
    except PayloadError as exc:
        raise MalformedJob(str(exc)) from exc
    problem = _uuid_problem(payload.uuid)
    if problem is not None:
        raise MalformedJob(problem)
    uuid = str(payload.uuid)
    command: JobCommand | None = None
    arguments: list[Any] = []
    named = payload.command_name if payload.job == CALL_QUEUED_HANDLER else None
    kind = WRAPPERS.get(named.lstrip("\\"), "job") if isinstance(named, str) else "job"
    display = payload.display_name
    if kind != "job" and isinstance(display, str) and display.strip("\\"):
        named = display  # what Laravel prints and users register: the listener, mailable …
    wrapper = payload.command_name
    if kind == "closure" or (
        isinstance(named, str)
        and named.strip("\\")
        and handled is not None
        and not handled(named)
        and not (isinstance(wrapper, str) and wrapper.strip("\\") and handled(wrapper))
    ):
        # Not ours to run: its command is left to the worker that knows the class, so a
        # job Laravel runs (nested deeper than this worker reads, say) is not failed here.
        # A closure is PHP code: never ours.
        properties: dict[str, Any] = {}
        name = named if isinstance(named, str) else str(wrapper)
    elif payload.job == CALL_QUEUED_HANDLER:
        try:
            command = payload.command(encrypter)
            if kind == "job":
                properties = command.properties
            else:
                properties, arguments = _unwrap(kind, command)
        except LaravelBridgeError as exc:
            raise MalformedJob(f"cannot decode data.command: {exc}", uuid) from exc
        name = named if isinstance(named, str) and named else command.class_name
    else:
        # A job pushed as "Class@method" with plain data (Queue::push('Class', $data)).
        name = payload.job.split("@", 1)[0]
        data = payload.data.get("data")
        properties = dict(data) if isinstance(data, dict) else {"data": data}
    if not name.strip("\\"):
        raise MalformedJob(f"payload names no job class ({short_repr(payload.job)})", uuid)
    for key in ("maxTries", "maxExceptions", "timeout", "retryUntil"):
        value = payload.data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            shown = short_repr(value)
            raise MalformedJob(f"payload {key} is {shown}, not an integer", uuid)
    try:
        payload.backoff  # noqa: B018 — validates the backoff text
    except PayloadError as exc:
        raise MalformedJob(str(exc), uuid) from exc
    return Job(
        row.id, name, row.queue, row.attempts, uuid, payload, command, properties, kind, arguments
    )


def _unwrap(kind: str, command: JobCommand) -> tuple[dict[str, Any], list[Any]]:
    """(properties, arguments) of what a Laravel wrapper holds (see :class:`Job`)."""
    obj = command.obj
    if kind == "listener":
        # CallQueuedListener::prepareData: ``data`` may be kept serialized.
        data = obj.get("data")
        if isinstance(data, (str, bytes)):
            data = php_serialize.loads(data, max_depth=MAX_COMMAND_DEPTH)
        if isinstance(data, dict):
            data = list(data.values())
        if not isinstance(data, list):
            raise PayloadError(f"the listener's data is a {type(data).__name__}, not an array")
        return {}, list(unpack(data))
    if kind == "mailable":
        mailable = _object(obj, "mailable")
        return _own_properties(mailable), [mailable]
    notification = _object(obj, "notification")
    notifiables = unpack(obj.get("notifiables"))
    if isinstance(notifiables, PhpObject) and notifiables.class_name in COLLECTION_CLASSES:
        items = notifiables.get("items")
        notifiables = list(items.values()) if isinstance(items, dict) else items
    channels = unpack(obj.get("channels"))
    if isinstance(channels, dict):
        channels = list(channels.values())
    return _own_properties(notification), [notifiables, notification, channels]


def _object(obj: PhpObject, name: str) -> PhpObject:
    value = unpack(obj.get(name))
    if not isinstance(value, PhpObject):
        raise PayloadError(f"the {obj.class_name}'s {name} is {short_repr(value)}, not an object")
    return value


def _own_properties(obj: PhpObject) -> dict[str, Any]:
    return {k: v for k, v in obj.plain().items() if k not in PLUMBING}


def _uuid_problem(uuid: object) -> str | None:
    """Why the payload's ``uuid`` cannot be the failed row's uuid, or None if it can."""
    if not isinstance(uuid, str) or not uuid:
        return "payload has no 'uuid'"
    if len(uuid) > 255:
        return "payload 'uuid' is longer than failed_jobs.uuid holds (255)"
    if "\0" in uuid or not uuid.isprintable():
        return f"payload 'uuid' {uuid[:60]!r} holds characters a uuid column cannot store"
    return None


def chain_successor(
    command: JobCommand,
    encrypter: Encrypter | None = None,
    now: float | None = None,
    laravel_version: int = DEFAULT_LARAVEL_VERSION,
) -> PushJob | None:
    """The next job of ``command``'s chain, as Laravel's ``Queueable::dispatchNextJobInChain``
    makes it: the rest of the chain and the chain's connection/queue carried over.

    Payload keys come from the next job's *properties* (``tries``, ``backoff``,
    ``timeout``, ``maxExceptions``, ``failOnTimeout``, ``retryUntil``); a PHP
    class that defines them as methods instead is not visible from Python. The payload
    has ``laravel_version``'s key set (the worker passes the finished job's).
    """
    chained = command.obj.get("chained") or []
    if not isinstance(chained, (list, dict)):
        raise PayloadError(f"the command's chained is a {type(chained).__name__}, not a list")
    items = list(chained.values()) if isinstance(chained, dict) else list(chained)
    if not items:
        return None
    successor = JobCommand.loads(items[0])
    obj, this = successor.obj, command.obj
    _set(obj, "chained", items[1:])
    _set(obj, "connection", obj.get("connection") or this.get("chainConnection"))
    _set(obj, "queue", obj.get("queue") or this.get("chainQueue"))
    for name in ("chainConnection", "chainQueue", "chainCatchCallbacks"):
        _set(obj, name, this.get(name))
    retry_until = unix_time(obj.get("retryUntil"), "the next job's retryUntil")
    delay = obj.get("delay")
    if isinstance(delay, PhpObject) and delay.class_name in CARBON_CLASSES:
        delay = date_from_php(delay)
    elif isinstance(delay, PhpObject):  # a CarbonInterval / DateInterval
        raise PayloadError(
            f"the next job's delay is a {delay.class_name}, which Python cannot read"
        )
    try:
        seconds = delay_seconds(delay, now)
    except LaravelBridgeError as exc:
        raise PayloadError(f"the next job's delay: {exc}") from exc
    queue = obj.get("queue") or DEFAULT_QUEUE
    try:
        validate_queue_name(queue)
    except InvalidQueueName as exc:
        raise PayloadError(f"the next job's queue: {exc}") from exc
    payload = Payload.build(
        successor,
        max_tries=obj.get("tries"),
        max_exceptions=obj.get("maxExceptions"),
        fail_on_timeout=bool(obj.get("failOnTimeout") or False),
        backoff=_backoff_of(obj),
        timeout=obj.get("timeout"),
        retry_until=retry_until,
        encrypter=encrypter,
        laravel_version=laravel_version,
        delay=math.ceil(seconds) if seconds else None,
    )
    return PushJob(queue, payload.to_stored_json(), seconds, payload.uuid)


def _backoff_of(obj: PhpObject) -> str | None:
    """Queue::getJobBackoff for a job whose class is known only by its properties."""
    backoff = obj.get("backoff")
    if backoff is None:
        return None
    items = list(backoff.values()) if isinstance(backoff, dict) else backoff
    if not isinstance(items, list):
        items = [items]
    return ",".join(str(b) for b in items)


def _set(obj: PhpObject, name: str, value: Any) -> None:
    key = obj._mangled(name)
    obj.properties[name if key is None else key] = value
