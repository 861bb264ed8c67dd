"""Laravel jobs as Celery task messages: the ``laravel`` queue format of the Kombu transport.

With ``broker_transport_options={"queue_formats": {"php": "laravel"}}`` the queue
``php`` is Laravel's: its rows are Laravel payloads in Laravel's ``jobs`` table (or, with
``{"format": "laravel", "layout": "askr"}``, in contract v1's ``askr_jobs``), which
``php artisan queue:work`` runs too. :class:`LaravelFormat` is what the transport
(``kombu_sqlqueue.formats``) asks of it:

* **read** — a claimed row becomes a Celery task message (protocol 2): the task name is
  the class Laravel prints (the job, listener, mailable or notification; or the name the
  ``tasks`` setting maps it to), ``kwargs`` its properties as Python values (the payload
  model's: ``datetime``, :class:`~laravel_bridge.ModelIdentifier`,
  :class:`~laravel_bridge.PhpEnum`, :class:`~laravel_bridge.PhpObject` …), ``retries``
  its attempts − 1, its ``timeout`` Celery's hard time limit, and Laravel's metadata in
  the ``laravel`` header. A job past its tries is failed as Laravel fails it, unstarted.
* **write** — a task sent to the queue (``send_task``, a routed task, a Celery retry)
  becomes the payload Laravel's worker runs; ``countdown``/``eta`` become
  ``available_at``. A retry of a job read here writes its own payload back.
* **failed / rejected** — Laravel's rules (:mod:`laravel_bridge.rules`): released with
  the payload's backoff while tries and ``retryUntil`` allow, else ``failed_jobs`` with
  the exception's text, where ``queue:failed`` and ``queue:retry`` find it. A task Celery
  does not know is handed back (attempt refunded) for the workers that run it.

Values outside JSON travel as Kombu JSON's ``{"__type__": …, "__value__": …}`` objects
(:mod:`laravel_bridge.celery_message`, with the message's body and headers), registered
with Kombu's decoder when the transport loads the format.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid as uuid_module
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from kombu_sqlqueue.envelope import delivery_tag, eta_delay
from kombu_sqlqueue.exceptions import ConfigurationError, MalformedMessage
from kombu_sqlqueue.formats import (
    Fail,
    HandBack,
    Outcome,
    QueueFormat,
    Release,
    Undeliverable,
)
from kombu_sqlqueue.store import ClaimedJob, DeliveryStore, NewJob, StoreOptions
from kombu_sqlqueue.store.database import Database

from . import celery_signals
from .celery_message import (
    HEADER,
    brief,
    from_message,
    register_json_types,
    task_arguments,
    task_message,
    to_message,
)
from .encryption import Encrypter
from .exceptions import LaravelBridgeError
from .job import CLOSURE_COMMAND, MalformedJob, _set, parse_job
from .laravel_tables import LaravelDeliveries, LaravelTableStore, QueuePauses
from .outcomes import (
    Attempt,
    Failed,
    LaravelRules,
    RuleOptions,
    UniqueLock,
    next_in_chain,
    storable_text,
    unique_lock,
)
from .pauses import PausedQueues
from .payload import (
    DEFAULT_LARAVEL_VERSION,
    LARAVEL_VERSIONS,
    MAX_DELAY_SECONDS,
    JobCommand,
    Payload,
    to_php,
)
from .rules import DEFAULT_TRIES
from .sql import MAX_LARAVEL_ATTEMPTS
from .tables import LAYOUTS, DatabaseTables, PushJob, ReservedJob

logger = logging.getLogger(__name__)

#: The settings a ``queue_formats`` entry of this format takes.
SETTINGS = frozenset(
    {
        "layout",
        "jobs_table",
        "failed_table",
        "connection",
        "app_key",
        "cipher",
        "tasks",
        "claim",
        "tries",
        "backoff",
        "unknown_delay",
        "laravel_version",
        "batches_table",
        "unique_locks",
        "unique_locks_url",
        "cache_prefix",
        "pause_cache",
    }
)


def _uuid_of(payload: str | bytes) -> str:
    """A failed row's uuid: the payload's, or a new one for a row that has none."""
    try:
        found = json.loads(payload).get("uuid")
    except (ValueError, AttributeError):
        found = None
    if isinstance(found, str) and found and len(found) <= 255 and found.isprintable():
        return found
    return str(uuid_module.uuid4())


def _int_setting(settings: Mapping[str, Any], name: str, default: int) -> int:
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"laravel queue format: {name} must be an int >= 0, got {value!r}")
    return value


class LaravelFormat:
    """The ``laravel`` queue format (see the module). ``settings``, beside ``format``:

    ``layout`` (``"laravel"``, the default: Laravel's ``jobs``/``failed_jobs``, named by
    ``jobs_table``/``failed_table``; or ``"askr"``: contract v1's tables), ``connection``
    (the Laravel connection written to ``failed_jobs``, ``"database"``), ``app_key`` and
    ``cipher`` (to read ``ShouldBeEncrypted`` jobs), ``tasks`` (``{php class: task
    name}`` where a task is not named after the class), ``claim`` (``"handled"``: on
    Laravel's table reserve only the jobs of classes with a task in the Celery app, leaving
    the rest to PHP; ``"all"``), ``tries`` and ``backoff`` (Laravel's ``--tries`` /
    ``--backoff`` for a job that names none: 1 and 0), ``unknown_delay`` (seconds before a
    job Celery has no task for is offered again, 60), ``laravel_version`` (the payload keys
    a job sent from Celery gets, 8), ``batches_table`` (Laravel's ``job_batches``),
    ``unique_locks``, ``unique_locks_url`` and ``cache_prefix`` (a ``ShouldBeUnique`` job's
    lock released when it is done or failed, as ``laravel-bridge work`` releases it),
    ``pause_cache`` (Laravel's database cache store table, ``"cache"``, in
    ``unique_locks_url``'s database when given: a queue ``php artisan queue:pause`` paused
    is not claimed; None: pauses not read).
    Laravel's rules for a job's outcome are :mod:`laravel_bridge.outcomes`', shared with
    ``laravel-bridge work``.
    """

    name = "laravel"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        unknown = set(settings) - SETTINGS
        if unknown:
            raise ConfigurationError(
                f"laravel queue format: unknown settings {sorted(unknown)}; "
                f"known: {sorted(SETTINGS)}"
            )
        self.layout = settings.get("layout", "laravel")
        if self.layout not in LAYOUTS:
            raise ConfigurationError(
                f"laravel queue format: layout must be one of {', '.join(LAYOUTS)}, "
                f"got {self.layout!r}"
            )
        self.jobs_table = str(settings.get("jobs_table", "jobs"))
        self.failed_table = str(settings.get("failed_table", "failed_jobs"))
        self.connection = str(settings.get("connection", "database"))
        key = settings.get("app_key")
        self.encrypter = Encrypter(key, settings.get("cipher", "AES-256-CBC")) if key else None
        tasks = settings.get("tasks") or {}
        if not isinstance(tasks, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tasks.items()
        ):
            raise ConfigurationError(
                "laravel queue format: tasks maps PHP class names to Celery task names"
            )
        self.task_names: dict[str, str] = {k.lstrip("\\"): v for k, v in tasks.items()}
        self.classes_by_task = {v: k for k, v in self.task_names.items()}
        self.claim = settings.get("claim", "handled")
        if self.claim not in ("handled", "all"):
            raise ConfigurationError(
                f"laravel queue format: claim must be 'handled' or 'all', got {self.claim!r}"
            )
        self.tries = _int_setting(settings, "tries", DEFAULT_TRIES)
        backoff = settings.get("backoff", 0)
        steps = [backoff] if isinstance(backoff, int) else backoff
        if not isinstance(steps, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in steps
        ):
            raise ConfigurationError(
                f"laravel queue format: backoff is seconds or a list of them, got {backoff!r}"
            )
        self.backoff: list[int] = steps
        self.unknown_delay = float(_int_setting(settings, "unknown_delay", 60))
        self.laravel_version = settings.get("laravel_version", DEFAULT_LARAVEL_VERSION)
        if self.laravel_version not in LARAVEL_VERSIONS:
            raise ConfigurationError(
                f"laravel queue format: laravel_version must be one of {LARAVEL_VERSIONS}"
            )
        batches = settings.get("batches_table", "job_batches")
        if batches is not None and not isinstance(batches, str):
            raise ConfigurationError(
                f"laravel queue format: batches_table is a table name or None, got {batches!r}"
            )
        self.batches_table: str | None = batches
        for name in ("unique_locks", "unique_locks_url"):
            value = settings.get(name)
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(
                    f"laravel queue format: {name} is a string or None, got {value!r}"
                )
        prefix = settings.get("cache_prefix", "laravel_cache")
        if not isinstance(prefix, str):
            raise ConfigurationError(
                f"laravel queue format: cache_prefix is a string, got {prefix!r}"
            )
        pause_cache = settings.get("pause_cache", "cache")
        if pause_cache is not None and not isinstance(pause_cache, str):
            raise ConfigurationError(
                f"laravel queue format: pause_cache is a table name or None, got {pause_cache!r}"
            )
        #: Queues ``queue:pause`` paused (Laravel's layout only: opened with the table).
        self.pauses = PausedQueues(None, self.connection)
        self._pause_cache: str | None = pause_cache
        self._cache_prefix = prefix
        self._cache_url: str | None = settings.get("unique_locks_url")
        #: Laravel's rules for a job's outcome (``outcomes``), with the app tables they write
        #: on the queue's database: the same as ``laravel-bridge work``'s.
        self.rules = LaravelRules(
            self._app_tables,
            RuleOptions(
                tries=self.tries,
                backoff=self.backoff,
                batches_table=batches,
                unique_locks=settings.get("unique_locks"),
                unique_locks_url=settings.get("unique_locks_url"),
                cache_prefix=prefix,
            ),
            unique_locks_hint="the laravel queue format's unique_locks setting",
        )
        self._app: DatabaseTables | None = None
        #: The database the app tables opened on contract v1's layout (closed by close()).
        self._own_database: Database | None = None
        self._tables: LaravelTableStore | None = None
        self._database: Database | None = None
        self._url: str | None = None
        self._handled: tuple[int, frozenset[str]] | None = None
        #: task id → (queue, delivery tag, laravel header) of what this process delivered:
        #: Celery reports a hard time limit from the process that holds the message, where
        #: the task's request is not at hand.
        self.delivered: OrderedDict[str, tuple[str, str, dict[str, Any]]] = OrderedDict()
        self._delivered_lock = threading.Lock()
        register_json_types()
        celery_signals.connect(self)

    # -- the table -----------------------------------------------------------------------

    def open_store(self, url: str, options: StoreOptions) -> DeliveryStore | None:
        self._url = url
        if self.layout == "askr":
            return None  # contract v1's askr_jobs: the transport's own store
        store = LaravelTableStore(
            url, jobs_table=self.jobs_table, failed_table=self.failed_table, options=options
        )
        self._database = store.database  # the exception counts share its pool, and close
        self._tables = store

        classes = self.handled_classes if self.claim == "handled" else (lambda: None)
        self.pauses = PausedQueues(self._pause_table(store.database), self.connection)
        return LaravelDeliveries(
            store,
            connection=self.connection,
            classes=classes,
            uuid_of=_uuid_of,
            paused=self.pauses.of,
        )

    def _pause_table(self, database: Database) -> Callable[[], QueuePauses] | None:
        """What opens the cache table pauses are read from (None: not read)."""
        table, prefix, url = self._pause_cache, self._cache_prefix, self._cache_url
        if table is None:
            return None
        where: str | Database = database if url is None else url
        return lambda: QueuePauses(where, table, prefix=prefix)

    def handled_classes(self) -> Collection[str] | None:
        """The PHP classes with a task in the Celery app (None, every class, outside one)."""
        tasks = celery_signals.registered_tasks()
        if tasks is None:
            return None
        cached = self._handled
        if cached is not None and cached[0] == len(tasks):
            return cached[1]
        classes = frozenset(self.classes_by_task.get(t, t) for t in tasks)
        self._handled = (len(tasks), classes)
        return classes

    # -- reading ------------------------------------------------------------------------

    def task_name(self, class_name: str) -> str:
        """The Celery task that runs PHP class ``class_name``."""
        return self.task_names.get(class_name.lstrip("\\"), class_name)

    def read(self, job: ClaimedJob) -> dict[str, Any]:
        try:
            text: str | bytes = job.payload.decode("utf-8")
        except UnicodeDecodeError:
            text = bytes(job.payload)
        try:
            parsed = parse_job(
                ReservedJob(job.id, job.queue, text, job.attempts, None), encrypter=self.encrypter
            )
        except MalformedJob as exc:
            raise MalformedMessage(f"not a Laravel job it can read: {exc}") from exc
        payload = parsed.payload
        now = int(datetime.now(UTC).timestamp())
        exceeded = self.rules.before_start(Attempt.of(parsed, job.attempts, job.max_attempts), now)
        if exceeded is not None:
            raise Undeliverable(f"Illuminate\\Queue\\MaxAttemptsExceededException: {exceeded}")
        lock = unique_lock(parsed)
        if parsed.kind == "listener":
            args, kwargs = parsed.arguments, parsed.properties
        elif parsed.kind == "notification":
            args, kwargs = [parsed.notifiables, parsed.channels], parsed.properties
        else:
            args, kwargs = [], parsed.properties
        if parsed.kind == "closure":
            args, kwargs = [], {}
        name = CLOSURE_COMMAND if parsed.kind == "closure" else self.task_name(parsed.name)
        meta = {
            "uuid": parsed.uuid,
            "class": parsed.name,
            "kind": parsed.kind,
            "queue": job.queue,
            "attempts": job.attempts,
            # What the table's attempts column holds: released there, the next claim
            # could not count the attempt (rules.at_attempts_cap).
            "attemptsCap": job.max_attempts,
            "tries": payload.max_tries,
            "backoff": payload.backoff or None,
            "retryUntil": payload.retry_until,
            "timeout": payload.timeout,
            "maxExceptions": payload.max_exceptions,
            "failOnTimeout": payload.fail_on_timeout,
            "payload": text if isinstance(text, str) else None,
            "then": self._successor(parsed),
            # The job's ShouldBeUnique lock, released when it is done or failed (settled).
            "unique": None if lock is None else [lock.class_name, lock.key, lock.looks_unique],
            "batch": parsed.batch_id,
            "batchCancelled": self.rules.batch_cancelled(parsed.name, parsed.batch_id),
        }
        message = task_message(name, parsed.uuid, job, args, kwargs, meta, payload.timeout)
        self._remember(parsed.uuid, job.queue, delivery_tag(job.receipt), meta)
        return message

    def _successor(self, parsed: Any) -> list[Any] | None:
        """``[queue, payload, delay]`` of the next job of the job's chain (written with its
        ack, as Laravel dispatches it when the job succeeds), or None."""
        try:
            nxt = next_in_chain(parsed, self.encrypter)
        except LaravelBridgeError as exc:
            raise MalformedMessage(f"the job's chain cannot be read: {exc}") from exc
        return None if nxt is None else [nxt.queue, nxt.payload, nxt.delay]

    def _remember(self, task_id: str, queue: str, tag: str, meta: dict[str, Any]) -> None:
        with self._delivered_lock:
            self.delivered[task_id] = (queue, tag, meta)
            while len(self.delivered) > 4096:
                self.delivered.popitem(last=False)

    def delivery_of(self, task_id: str) -> tuple[str, str, dict[str, Any]] | None:
        """(queue, delivery tag, laravel header) of a job this process delivered."""
        with self._delivered_lock:
            return self.delivered.get(task_id)

    # -- writing ------------------------------------------------------------------------

    def write(self, queue: str, message: dict[str, Any]) -> NewJob:
        headers = message.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise MalformedMessage(f"the message's headers are {type(headers).__name__}, not a map")
        task, task_id = headers.get("task"), headers.get("id")
        if not isinstance(task, str) or not task.strip("\\") or not isinstance(task_id, str):
            raise MalformedMessage(
                f"queue {queue!r} holds Laravel jobs: only Celery task messages can go there"
            )
        args, kwargs = task_arguments(queue, message)
        retries = headers.get("retries") or 0
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise MalformedMessage(f"retries is {retries!r}, not a count")
        # Not clamped here: the table's store keeps it to what its attempts column holds
        # (255, or Laravel 13's 65535).
        attempts = retries
        delay = min(eta_delay(dict(headers)), float(MAX_DELAY_SECONDS))
        meta = headers.get(HEADER)
        meta = meta if isinstance(meta, Mapping) else {}
        stored = meta.get("payload")
        if isinstance(stored, str) and meta.get("uuid") == task_id:
            text = self._again(stored, kwargs)
        else:
            if args:
                raise MalformedMessage(
                    f"a Laravel job takes keyword arguments (its properties), not positional "
                    f"ones: send_task({task!r}, kwargs={{…}}) got args={brief.repr(args)}"
                )
            text = self._build(queue, self.classes_by_task.get(task, task), task_id, meta, kwargs)
        return NewJob(
            queue,
            text.encode("utf-8"),
            delay=delay,
            max_attempts=MAX_LARAVEL_ATTEMPTS,
            uuid=task_id,
            attempts=attempts,
        )

    def _build(
        self,
        queue: str,
        class_name: str,
        task_id: str,
        meta: Mapping[str, Any],
        kwargs: dict[str, Any],
    ) -> str:
        """A new job's payload: what ``dispatch`` of ``class_name`` would write in PHP."""
        if "\\" not in class_name.strip("\\") and class_name not in self.classes_by_task.values():
            logger.debug("sending %r to Laravel queue %r as a PHP class name", class_name, queue)
        try:
            command = JobCommand.build(class_name, kwargs, queue=queue)
            backoff = meta.get("backoff")
            payload = Payload.build(
                command,
                uuid=task_id,
                max_tries=meta.get("tries"),
                max_exceptions=meta.get("maxExceptions"),
                fail_on_timeout=bool(meta.get("failOnTimeout", False)),
                backoff=list(backoff) if isinstance(backoff, list) else backoff,
                timeout=meta.get("timeout"),
                retry_until=meta.get("retryUntil"),
                laravel_version=self.laravel_version,
            )
            return payload.to_stored_json()
        except (LaravelBridgeError, TypeError, ValueError) as exc:
            raise MalformedMessage(f"cannot make a Laravel job of {class_name!r}: {exc}") from exc

    def _again(self, stored: str, kwargs: dict[str, Any]) -> str:
        """A retried job's payload: the one it was read from, its properties changed to the
        retry's kwargs where those differ (Celery's ``retry(kwargs=…)``)."""
        try:
            payload = Payload.parse(stored)
            parsed = parse_job(ReservedJob(0, "", stored, 1, None), encrypter=self.encrypter)
        except (LaravelBridgeError, MalformedJob) as exc:
            raise MalformedMessage(f"the retried job's payload cannot be read: {exc}") from exc
        changed = {k: v for k, v in kwargs.items() if parsed.properties.get(k, _MISSING) != v}
        if not changed or parsed.kind != "job" or parsed.command is None:
            return stored
        if payload.is_encrypted:
            logger.warning(
                "%s: a retry's changed kwargs are not kept (the job is encrypted)", parsed.name
            )
            return stored
        obj = parsed.command.obj
        for name, value in changed.items():
            _set(obj, name, to_php(value))
        payload.data["data"]["command"] = parsed.command.dumps().decode("utf-8", "surrogateescape")
        return payload.to_stored_json()

    # -- what Laravel's rules write beside the job ------------------------------------------

    def close(self) -> None:
        """Close the app tables the rules opened, and their database when the format opened
        it (contract v1's layout: no table store of its own to share a pool with)."""
        self.rules.close()
        self.pauses.close()
        if self._app is not None:
            self._app.close()
            self._app = None
        if self._own_database is not None:
            self._own_database.close()
            self._own_database = None

    def _app_tables(self) -> DatabaseTables:
        """The app tables the rules write, on the queue's database (its pool when the queue
        is in Laravel's table)."""
        if self._app is None:
            database = self._database
            if database is None:
                database = self._own_database = Database(str(self._url))
            self._app = DatabaseTables(database)
        return self._app

    def _push_callbacks(self, job: PushJob) -> int:
        if self._tables is None:
            raise LaravelBridgeError(
                "a batch's callbacks go to Laravel's jobs table, where PHP runs them: "
                "the askr layout has none"
            )
        return self._tables.push(job.queue, job.payload, job.delay)

    def settled(self, queue: str, headers: Mapping[str, Any], outcome: Outcome | None) -> None:
        """A job done or failed, as ``CallQueuedHandler`` finishes one: its
        ``ShouldBeUnique`` lock released, and, for a batched job, its batch recorded in
        ``job_batches`` and the batch's callbacks handed to PHP (``outcomes``)."""
        meta = headers.get(HEADER)
        if not isinstance(meta, Mapping):
            return
        if outcome is not None and not isinstance(outcome, Fail):
            return  # released or handed back: not done yet
        self.rules.release_unique(_unique_of(meta))
        if not isinstance(meta.get("batch"), str):
            return
        self.rules.record_batch(
            self._attempt(headers, meta),
            queue,
            None if outcome is None else outcome.reason.split("\n", 1)[0],
            signing_key=self.encrypter.key if self.encrypter is not None else None,
            push=self._push_callbacks,
        )

    @staticmethod
    def _attempt(headers: Mapping[str, Any], meta: Mapping[str, Any]) -> Attempt:
        """What Laravel's rules read of a delivery, from the header :meth:`read` wrote (each
        value checked: a header is a message's, and messages can be forged)."""

        def number(key: str) -> int | None:
            value = meta.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        attempts = number("attempts")
        if attempts is None:
            retries = headers.get("retries")
            attempts = retries + 1 if isinstance(retries, int) else 1
        uuid = meta.get("uuid")
        backoff = meta.get("backoff")
        batch = meta.get("batch")
        return Attempt(
            name=str(meta.get("class") or headers.get("task") or "the job"),
            uuid=str(uuid),
            attempts=attempts,
            max_tries=number("tries"),
            retry_until=number("retryUntil"),
            backoff=tuple(
                b for b in (backoff if isinstance(backoff, list) else []) if isinstance(b, int)
            ),
            # Counted by the job's uuid: none, nothing to count.
            max_exceptions=number("maxExceptions") if isinstance(uuid, str) else None,
            fail_on_timeout=bool(meta.get("failOnTimeout")),
            attempts_cap=number("attemptsCap") or 0,
            batch_id=batch if isinstance(batch, str) else None,
        )

    # -- settling -----------------------------------------------------------------------

    def acked(self, queue: str, headers: Mapping[str, Any]) -> list[NewJob]:
        meta = headers.get(HEADER)
        then = meta.get("then") if isinstance(meta, Mapping) else None
        if not (isinstance(then, list) and len(then) == 3 and isinstance(then[1], str)):
            return []
        nxt_queue, payload, delay = then
        return [
            NewJob(
                str(nxt_queue),
                payload.encode("utf-8", "surrogateescape"),
                delay=float(delay or 0),
                max_attempts=MAX_LARAVEL_ATTEMPTS,
                uuid=_uuid_of(payload),
            )
        ]

    def rejected(
        self, queue: str, headers: Mapping[str, Any], attempts: int, requeue: bool
    ) -> Outcome:
        task = headers.get("task")
        if isinstance(task, str) and celery_signals.is_registered(task) is False:
            # Celery rejects a task it has no code for: it is the PHP workers' (or another
            # Celery app's), never this worker's failure.
            logger.warning(
                "no Celery task %r here: job %s of queue %r handed back for %s s",
                task,
                headers.get("id"),
                queue,
                self.unknown_delay,
            )
            return HandBack(self.unknown_delay)
        why = "rejected by its Celery task" + (" (requeue)" if requeue else "")
        return self.failed(queue, headers, why, timed_out=False)

    def failed(
        self, queue: str, headers: Mapping[str, Any], reason: str, *, timed_out: bool
    ) -> Outcome:
        meta = headers.get(HEADER)
        meta = meta if isinstance(meta, Mapping) else {}
        attempt = self._attempt(headers, meta)
        now = int(datetime.now(UTC).timestamp())
        verdict = self.rules.after_exception(attempt, now, timed_out=timed_out)
        if not isinstance(verdict, Failed):
            return Release(verdict.delay)
        if verdict.exceeded is None:
            return Fail(storable_text(reason))
        return Fail(
            storable_text(
                f"Illuminate\\Queue\\MaxAttemptsExceededException: {verdict.exceeded}\n\n{reason}"
            )
        )


def _unique_of(meta: Mapping[str, Any]) -> UniqueLock | None:
    """The unique lock :meth:`LaravelFormat.read` put in the header (checked), or None."""
    found = meta.get("unique")
    if (
        isinstance(found, list)
        and len(found) == 3
        and isinstance(found[0], str)
        and isinstance(found[1], str)
        and isinstance(found[2], bool)
    ):
        return UniqueLock(found[0], found[1], found[2])
    return None


_MISSING = object()


def laravel(settings: Mapping[str, Any]) -> QueueFormat:
    """The ``laravel`` entry point of ``kombu_sqlqueue.formats``."""
    return LaravelFormat(settings)


__all__ = [
    "HEADER",
    "LaravelFormat",
    "from_message",
    "laravel",
    "register_json_types",
    "to_message",
]
