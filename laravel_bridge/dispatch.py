"""Dispatch Laravel jobs from Python: rows ``php artisan queue:work`` runs as Laravel's own.

.. code-block:: python

    from laravel_bridge import LaravelQueue

    queue = LaravelQueue("mysql://app@127.0.0.1/app", app_key=os.environ["APP_KEY"])
    queue.dispatch("App\\\\Jobs\\\\SendInvoice", {"invoiceId": 7}, queue="mail", tries=3)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kombu_sqlqueue.exceptions import InvalidQueueName
from kombu_sqlqueue.store.names import validate_queue_name

from .encryption import Encrypter
from .exceptions import LaravelBridgeError, PayloadError
from .payload import CARBON_CLASSES, MAX_DELAY_SECONDS, JobCommand, Payload, date_from_php
from .php_serialize import PhpObject
from .tables import JobTable, PushJob, open_table

#: Laravel's ``database`` connection default queue.
DEFAULT_QUEUE = "default"

#: A chained job: a built command, or ``(class_name, properties)``.
ChainLink = JobCommand | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What :meth:`LaravelQueue.dispatch` stored: the row id and the payload's uuid."""

    id: int
    uuid: str
    queue: str


def _seconds(delay: Any, now: float | None = None) -> float:
    """A delay (seconds, ``timedelta``, or the ``datetime`` it ends at) in seconds, at most
    :data:`~laravel_bridge.payload.MAX_DELAY_SECONDS` (``available_at`` is 32-bit)."""
    if delay is None:
        return 0.0
    if isinstance(delay, datetime):
        if delay.tzinfo is None:
            raise LaravelBridgeError("a delay datetime needs a time zone")
        delay = max(0.0, delay.timestamp() - (now if now is not None else time.time()))
    elif isinstance(delay, timedelta):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise LaravelBridgeError(
            f"delay must be seconds, a timedelta or a datetime, got {type(delay).__name__}"
        )
    if not 0 <= delay <= MAX_DELAY_SECONDS:  # NaN fails both comparisons
        raise LaravelBridgeError(
            f"delay must be >= 0 seconds and at most {MAX_DELAY_SECONDS} (a year), got {delay!r}"
        )
    return float(delay)


def _timestamp(value: Any, what: str) -> int | None:
    """``retryUntil`` as Laravel writes it: whole unix seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise LaravelBridgeError(f"{what} datetime needs a time zone")
        return int(value.timestamp())
    if isinstance(value, PhpObject) and value.class_name in CARBON_CLASSES:
        return int(date_from_php(value).timestamp())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise PayloadError(f"{what} must be a unix time or a datetime, got {value!r}")
    if not -(2**63) <= value < 2**63:  # inf included; a JSON number PHP can hold
        raise PayloadError(f"{what} {value!r} is out of range for a unix time")
    return int(value)


class LaravelQueue:
    """Writes jobs Laravel's worker runs as if Laravel had dispatched them.

    ``layout`` is ``"laravel"`` (Laravel's ``jobs`` table) or ``"askr"``
    (contract v1's table). ``app_key`` (``base64:…``, as in ``.env``) is needed
    only to encrypt jobs (``encrypt=True``, Laravel's ``ShouldBeEncrypted``).
    """

    def __init__(
        self,
        url: str,
        layout: str = "laravel",
        connection_name: str = "database",
        app_key: str | None = None,
        *,
        cipher: str = "AES-256-CBC",
        jobs_table: str = "jobs",
        failed_table: str = "failed_jobs",
        create_tables: bool = True,
        table: JobTable | None = None,
    ) -> None:
        self.connection_name = connection_name
        self.encrypter = Encrypter(app_key, cipher) if app_key else None
        self.table = table or open_table(
            url,
            layout,
            jobs_table=jobs_table,
            failed_table=failed_table,
            create_tables=create_tables,
        )

    def build(
        self,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        delay: int | float | datetime | None = None,
        tries: int | None = None,
        backoff: int | Sequence[int] | None = None,
        timeout: int | None = None,
        retry_until: int | datetime | None = None,
        max_exceptions: int | None = None,
        fail_on_timeout: bool = False,
        encrypt: bool = False,
        chain: Sequence[ChainLink] = (),
        uuid: str | None = None,
    ) -> PushJob:
        """The row :meth:`dispatch` would store, without storing it."""
        for name, value in (
            ("tries", tries),
            ("timeout", timeout),
            ("max_exceptions", max_exceptions),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise LaravelBridgeError(f"{name} must be an int >= 0, got {value!r}")
        steps = [backoff] if isinstance(backoff, int) else list(backoff or [])
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in steps):
            raise LaravelBridgeError(
                f"backoff must be seconds >= 0 or a list of them, got {backoff!r}"
            )
        if encrypt and self.encrypter is None:
            raise LaravelBridgeError("encrypt=True needs the app key: LaravelQueue(app_key=…)")
        seconds = _seconds(delay)
        links = [
            link if isinstance(link, JobCommand) else JobCommand.build(link[0], link[1])
            for link in chain
        ]
        command = JobCommand.build(
            class_name,
            properties,
            queue=queue,
            delay=int(delay) if isinstance(delay, (int, float)) and delay else None,
            chained=links,
        )
        payload = Payload.build(
            command,
            uuid=uuid,
            max_tries=tries,
            max_exceptions=max_exceptions,
            fail_on_timeout=fail_on_timeout,
            backoff=list(backoff) if isinstance(backoff, Sequence) else backoff,
            timeout=timeout,
            retry_until=_timestamp(retry_until, "retry_until"),
            encrypter=self.encrypter if encrypt else None,
        )
        return PushJob(queue or DEFAULT_QUEUE, _utf8(payload), seconds, payload.uuid)

    def dispatch(
        self, class_name: str, properties: Mapping[str, Any] | None = None, **options: Any
    ) -> Dispatched:
        """Store one job of PHP class ``class_name`` with ``properties`` (by plain name).

        Options: ``queue``, ``delay`` (seconds or a datetime), ``tries``,
        ``backoff`` (seconds, or a list by attempt), ``timeout``, ``retry_until``
        (a datetime or unix time), ``max_exceptions``, ``fail_on_timeout``,
        ``encrypt``, ``chain`` (jobs to run after this one), ``uuid``.
        """
        job = self.build(class_name, properties, **options)
        job_id = self.table.push(job)
        assert job.uuid is not None
        return Dispatched(job_id, job.uuid, job.queue)

    def dispatch_many(self, jobs: Iterable[tuple[str, Mapping[str, Any]]], **options: Any) -> int:
        """Store many jobs, sharing ``options``, with multi-row INSERTs in one transaction
        (one statement per 1,000 jobs); return how many."""
        if "uuid" in options:
            raise LaravelBridgeError("uuid= names one job; dispatch_many makes a uuid per job")
        rows = [self.build(name, props, **options) for name, props in jobs]
        return self.table.push_many(rows)

    def size(self, queue: str = DEFAULT_QUEUE) -> int:
        """Jobs on ``queue`` (Laravel's ``Queue::size``)."""
        return self.table.size(queue)

    def close(self) -> None:
        self.table.close()


def _backoff_of(obj: PhpObject) -> str | None:
    """Queue::getJobBackoff for a job whose class is known only by its properties."""
    backoff = obj.get("backoff")
    if backoff is None:
        return None
    items = list(backoff.values()) if isinstance(backoff, dict) else backoff
    if not isinstance(items, list):
        items = [items]
    return ",".join(str(b) for b in items)


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
    retry_until = _timestamp(obj.get("retryUntil"), "the next job's retryUntil")
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
        seconds = _seconds(delay, now)
    except LaravelBridgeError as exc:
        raise PayloadError(f"the next job's delay: {exc}") from exc
    queue = obj.get("queue") or DEFAULT_QUEUE
    try:
        validate_queue_name(queue)
    except InvalidQueueName as exc:
        raise PayloadError(f"the next job's queue: {exc}") from exc
    return PushJob(queue, _utf8(payload), seconds, payload.uuid)


def _utf8(payload: Payload) -> str:
    """The payload's JSON, refused when it cannot be stored as UTF-8 text (bytes that are not
    UTF-8 in a property), as Laravel refuses it with InvalidPayloadException."""
    text = payload.to_json()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PayloadError(
            f"the job holds bytes that are not UTF-8 text, which a Laravel payload cannot carry: "
            f"{exc}"
        ) from exc
    return text


def _set(obj: PhpObject, name: str, value: Any) -> None:
    key = obj._mangled(name)
    obj.properties[name if key is None else key] = value
