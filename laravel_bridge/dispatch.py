"""Dispatch Laravel jobs from Python: rows ``php artisan queue:work`` runs as Laravel's own.

.. code-block:: python

    from laravel_bridge import LaravelQueue

    queue = LaravelQueue("mysql://app@127.0.0.1/app", app_key=os.environ["APP_KEY"])
    queue.dispatch("App\\\\Jobs\\\\SendInvoice", {"invoiceId": 7}, queue="mail", tries=3)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

from .encryption import Encrypter
from .exceptions import LaravelBridgeError
from .payload import (
    DEFAULT_LARAVEL_VERSION,
    DEFAULT_QUEUE,
    LARAVEL_VERSIONS,
    JobCommand,
    Payload,
    delay_seconds,
    unix_time,
)
from .tables import CacheLocks, JobTable, PushJob, open_table, publishing

logger = logging.getLogger(__name__)

#: A chained job: a built command, or ``(class_name, properties)``.
ChainLink = JobCommand | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What :meth:`LaravelQueue.dispatch` stored: the row id and the payload's uuid."""

    id: int
    uuid: str
    queue: str


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
        laravel_version: int = DEFAULT_LARAVEL_VERSION,
        unique_locks: str | None = None,
        cache_prefix: str = "laravel_cache",
    ) -> None:
        if laravel_version not in LARAVEL_VERSIONS:
            raise LaravelBridgeError(
                f"laravel_version must be one of {', '.join(map(str, LARAVEL_VERSIONS))}, "
                f"got {laravel_version!r}"
            )
        #: The Laravel version whose payload keys are written (see ``Payload.build``).
        self.laravel_version = laravel_version
        self.connection_name = connection_name
        #: Laravel's database cache store lock table (``cache_locks``) and ``cache.prefix``,
        #: for ``dispatch(..., unique_for=…)``.
        self.unique_locks = unique_locks
        self.cache_prefix = cache_prefix
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
        seconds = delay_seconds(delay)
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
            retry_until=unix_time(retry_until, "retry_until"),
            encrypter=self.encrypter if encrypt else None,
            laravel_version=self.laravel_version,
            delay=math.ceil(seconds) if seconds else None,
        )
        return PushJob(queue or DEFAULT_QUEUE, payload.to_stored_json(), seconds, payload.uuid)

    @overload
    def dispatch(
        self,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        unique_for: None = None,
        **options: Any,
    ) -> Dispatched: ...

    @overload
    def dispatch(
        self,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        unique_for: int,
        unique_id: str | int = "",
        **options: Any,
    ) -> Dispatched | None: ...

    def dispatch(
        self,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        unique_for: int | None = None,
        unique_id: str | int = "",
        **options: Any,
    ) -> Dispatched | None:
        """Store one job of PHP class ``class_name`` with ``properties`` (by plain name).

        Options: ``queue``, ``delay`` (seconds or a datetime), ``tries``,
        ``backoff`` (seconds, or a list by attempt), ``timeout``, ``retry_until``
        (a datetime or unix time), ``max_exceptions``, ``fail_on_timeout``,
        ``encrypt``, ``chain`` (jobs to run after this one), ``uuid``.

        ``unique_for`` (seconds; 0: a day) makes it a ``ShouldBeUnique`` dispatch, as
        Laravel's ``PendingDispatch`` does one: it takes the lock
        ``laravel_unique_job:<class><unique_id>`` in the database cache store's lock table
        (``unique_locks``, ``cache_prefix``) and stores nothing — returning None — while
        that lock is held, by a job dispatched from PHP or Python and not yet finished.
        Laravel's worker (or ``laravel-bridge work --unique-locks-table``) releases it when
        the job is done or failed, the class being ``ShouldBeUnique``; ``unique_id`` must
        be what its ``uniqueId`` says.
        """
        job = self.build(class_name, properties, **options)
        if unique_for is None:
            job_id = self.table.push(job)
        else:
            if isinstance(unique_for, bool) or not isinstance(unique_for, int) or unique_for < 0:
                raise LaravelBridgeError(f"unique_for must be an int >= 0, got {unique_for!r}")
            locks, key = self._unique_lock(class_name, unique_id)
            locks = publishing(locks)  # enlisted: the lock commits or rolls back with the job
            if not locks.acquire(key, unique_for):
                logger.debug("not dispatched: %s is unique and %r is held", class_name, key)
                return None
            try:
                job_id = self.table.push(job)
            except BaseException:
                locks.force_release(key)  # nothing was queued: the lock must not outlive it
                raise
        assert job.uuid is not None
        return Dispatched(job_id, job.uuid, job.queue)

    def _unique_lock(self, class_name: str, unique_id: str | int) -> tuple[CacheLocks, str]:
        if self.unique_locks is None:
            raise LaravelBridgeError(
                "unique_for needs Laravel's database cache store lock table: "
                "LaravelQueue(unique_locks='cache_locks')"
            )
        key = f"{self.cache_prefix}laravel_unique_job:{class_name.lstrip(chr(92))}{unique_id}"
        return self.table.cache_locks(self.unique_locks), key

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
