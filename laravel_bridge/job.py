"""One Laravel job: a stored row read into a :class:`Job`, and the next job of its chain.

:func:`parse_job` turns a reserved row into the :class:`Job` a handler receives, or
raises :class:`MalformedJob` saying why it cannot (the worker fails such a row once,
as stored). :func:`chain_successor` builds the row Laravel's
``Queueable::dispatchNextJobInChain`` would push after a chained job succeeded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kombu_sqlqueue.exceptions import InvalidQueueName
from kombu_sqlqueue.store.names import validate_queue_name

from .encryption import Encrypter
from .exceptions import LaravelBridgeError, PayloadError
from .payload import (
    CALL_QUEUED_HANDLER,
    CARBON_CLASSES,
    DEFAULT_QUEUE,
    MAX_PAYLOAD_BYTES,
    JobCommand,
    Payload,
    date_from_php,
    delay_seconds,
    short_repr,
    unix_time,
)
from .php_serialize import PhpObject
from .tables import PushJob, ReservedJob


class MalformedJob(LaravelBridgeError):
    """A stored job cannot be read: it goes to the failed table with this reason."""

    def __init__(self, message: str | None = None, uuid: str | None = None) -> None:
        super().__init__(message)
        #: The payload's uuid when it has a usable one (the failed row keeps it).
        self.uuid = uuid


@dataclass
class Job:
    """What a handler receives: one delivery of a Laravel job.

    ``properties`` are the command's own properties by plain name (visibility
    stripped) as Python values; ``command`` is the decoded object (None for a
    job pushed without one). A handler may call :meth:`release`, :meth:`fail`
    or :meth:`delete`; otherwise returning settles the job as done.
    """

    id: int
    name: str
    queue: str
    attempts: int
    uuid: str
    payload: Payload
    command: JobCommand | None
    properties: dict[str, Any]
    #: Set by :meth:`release` / :meth:`fail` / :meth:`delete`.
    outcome: tuple[str, Any] | None = field(default=None, repr=False)

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
    named = payload.command_name if payload.job == CALL_QUEUED_HANDLER else None
    if isinstance(named, str) and named.strip("\\") and handled is not None and not handled(named):
        # Not ours to run: its command is left to the worker that knows the class, so a
        # job Laravel runs (nested deeper than this worker reads, say) is not failed here.
        properties: dict[str, Any] = {}
        name = named
    elif payload.job == CALL_QUEUED_HANDLER:
        try:
            command = payload.command(encrypter)
            properties = command.properties
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
    return Job(row.id, name, row.queue, row.attempts, uuid, payload, command, properties)


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
    command: JobCommand, encrypter: Encrypter | None = None, now: float | None = None
) -> PushJob | None:
    """The next job of ``command``'s chain, as Laravel's ``Queueable::dispatchNextJobInChain``
    makes it: the rest of the chain and the chain's connection/queue carried over.

    Payload keys come from the next job's *properties* (``tries``, ``backoff``,
    ``timeout``, ``maxExceptions``, ``failOnTimeout``, ``retryUntil``); a PHP
    class that defines them as methods instead is not visible from Python.
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
    payload = Payload.build(
        successor,
        max_tries=obj.get("tries"),
        max_exceptions=obj.get("maxExceptions"),
        fail_on_timeout=bool(obj.get("failOnTimeout") or False),
        backoff=_backoff_of(obj),
        timeout=obj.get("timeout"),
        retry_until=retry_until,
        encrypter=encrypter,
    )
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
