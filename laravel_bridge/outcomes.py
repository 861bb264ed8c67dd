"""What becomes of a Laravel job, decided once for both consumers: ``laravel-bridge work``
(:class:`~laravel_bridge.worker.Worker`) and a Celery worker on a Laravel queue (the
``laravel`` queue format, :mod:`laravel_bridge.messages`).

``Illuminate\\Queue\\Worker`` and ``CallQueuedHandler`` (Laravel 8.83) decide, from a job's
payload (``maxTries``, ``retryUntil``, ``backoff``, ``maxExceptions``, ``failOnTimeout``,
``timeout``) and the worker's options (``--tries``, ``--backoff``):

* before it runs: fail it at once (out of attempts, or past its ``retryUntil``), or run it
  (:meth:`LaravelRules.before_start`); a job of a cancelled batch is done without running
  (:meth:`LaravelRules.batch_cancelled`);
* after it raised or timed out: release it with its backoff, or fail it (out of attempts,
  ``maxExceptions`` reached, ``failOnTimeout``), and ours on top: fail it at the attempts
  column's cap (:meth:`LaravelRules.after_exception`, :meth:`LaravelRules.release`);
* after it is done or failed: the next job of its chain (done only:
  :func:`next_in_chain`), its batch recorded and the batch's callbacks handed to PHP
  (:meth:`LaravelRules.record_batch`), its ``ShouldBeUnique`` lock released
  (:meth:`LaravelRules.release_unique`).

:class:`LaravelRules` owns the app tables those rules write (the ``maxExceptions`` counts,
``job_batches``, ``cache_locks``) through :class:`AppTables`. What a consumer does with a
verdict — the settlement itself, its log lines, the failed row's text — is the consumer's.
The pure attempt arithmetic is :mod:`laravel_bridge.rules`.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kombu_sqlqueue.exceptions import SqlQueueError
from kombu_sqlqueue.store import StoreOptions

from .batches import record_job
from .encryption import Encrypter
from .exceptions import LaravelBridgeError
from .job import Job, chain_successor
from .laravel_tables import CacheLocks, JobBatches
from .payload import MAX_DELAY_SECONDS
from .rules import (
    DEFAULT_TRIES,
    at_attempts_cap,
    attempted_too_many,
    attempts_cap_text,
    backoff_delay,
    exceeded_before_start,
    out_of_attempts,
)
from .tables import ExceptionCounts, PushJob

logger = logging.getLogger(__name__)

__all__ = [
    "AppTables",
    "Attempt",
    "Failed",
    "LaravelRules",
    "MaxAttemptsExceeded",
    "Released",
    "RuleOptions",
    "RuleSettings",
    "UniqueLock",
    "exception_text",
    "next_in_chain",
    "php_string",
    "storable_text",
    "unique_lock",
]


class MaxAttemptsExceeded(LaravelBridgeError):
    """A job has been attempted too many times or ran too long."""


# The name laravel-bridge work's failed rows have always carried for it (exception_text
# writes the class's module), and it is still importable from there.
MaxAttemptsExceeded.__module__ = "laravel_bridge.worker"


# -- the failed row's text ----------------------------------------------------------------


def storable_text(text: str) -> str:
    """``text`` as every engine's text column takes it: a lone surrogate (not UTF-8) and
    NUL (PostgreSQL's text refuses it) written as escapes."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\0", "\\x00") if "\0" in text else text


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder for an exception whose ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises
        return "<the exception's message could not be read>"


def exception_text(exc: BaseException) -> str:
    """The failed table's ``exception`` column: ``Type: message`` first (as PHP's
    ``(string) $exception`` starts), then the traceback."""
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else (f"{kind.__module__}.{kind.__qualname__}")
    )
    trace = "".join(traceback.format_exception(exc)).rstrip()
    return storable_text(f"{name}: {message_of(exc)}\n\n{trace}")


def php_string(value: Any) -> str:
    """``(string) $value`` as PHP writes a scalar into a string: ``true`` "1", ``false`` and
    ``null`` "", floats as PHP prints them."""
    if value is None or value is False:
        return ""
    if value is True:
        return "1"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value).replace("e+", "E+").replace("e-", "E-")
    return str(value)


# -- what the rules read, and what they decide ----------------------------------------------


@dataclass(frozen=True, slots=True)
class UniqueLock:
    """A job's ``ShouldBeUnique`` lock, as ``CallQueuedHandler::ensureUniqueJobLockIsReleased``
    names it: ``laravel_unique_job:<class><uniqueId>`` (the cache prefix goes in front)."""

    #: The job's class (warnings are once per class).
    class_name: str
    key: str
    #: The command has ``uniqueFor``/``uniqueId`` (or its handler names a unique id): a lock
    #: left held is worth a warning. Python cannot see which interfaces the PHP class
    #: implements, so a lock is released whenever one is held under the key.
    looks_unique: bool


def unique_lock(parsed: Job, unique_id: Callable[[Job], Any] | None = None) -> UniqueLock | None:
    """The lock a done or failed job may hold (None: Laravel's wrappers — listeners,
    mailables, notifications — are never unique themselves). ``unique_id``: a handler's own
    ``uniqueId()`` (Python cannot run the PHP method); else the command's property. What
    ``unique_id`` raises propagates."""
    command = parsed.command
    if parsed.kind != "job" or command is None:
        return None
    looks_unique = "uniqueFor" in command.obj or "uniqueId" in command.obj
    if unique_id is not None:
        found: Any = unique_id(parsed)
        looks_unique = True
    else:
        found = command.obj.get("uniqueId")
    key = f"laravel_unique_job:{command.class_name}{php_string(found)}"
    return UniqueLock(command.class_name, key, looks_unique)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What Laravel's rules read of one delivery of a job: from its parsed payload
    (``laravel-bridge work``) or from the header a Celery message carries (the format)."""

    #: The name Laravel prints (``displayName``).
    name: str
    uuid: str
    #: Attempts counted so far, this one included.
    attempts: int
    #: The payload's ``maxTries`` (None: the worker's ``--tries``), ``retryUntil``,
    #: ``backoff`` (empty: the worker's ``--backoff``), ``maxExceptions``, ``failOnTimeout``.
    max_tries: int | None = None
    retry_until: int | None = None
    backoff: Sequence[int] = ()
    max_exceptions: int | None = None
    fail_on_timeout: bool = False
    #: The most attempts the jobs table's column holds (``rules.at_attempts_cap``; 0: none).
    attempts_cap: int = 0
    batch_id: str | None = None

    @classmethod
    def of(cls, parsed: Job, attempts: int, attempts_cap: int) -> Attempt:
        """A parsed job's delivery, reserved for its ``attempts``-th time."""
        payload = parsed.payload
        return cls(
            name=parsed.name,
            uuid=parsed.uuid,
            attempts=attempts,
            max_tries=payload.max_tries,
            retry_until=payload.retry_until,
            backoff=tuple(payload.backoff or ()),
            max_exceptions=payload.max_exceptions,
            fail_on_timeout=payload.fail_on_timeout,
            attempts_cap=attempts_cap,
            batch_id=parsed.batch_id,
        )


@dataclass(frozen=True, slots=True)
class Released:
    """Release the job: ready again after ``delay`` seconds (its attempt counted)."""

    delay: float


@dataclass(frozen=True, slots=True)
class Failed:
    """Fail the job. ``exceeded``: the ``MaxAttemptsExceededException`` message when the
    rules fail it for its attempts or its time (a timeout, the attempts cap) rather than
    for the exception it raised; ``capped``: that was the attempts cap."""

    exceeded: str | None = None
    capped: bool = False


Verdict = Released | Failed


class AppTables(Protocol):
    """The app tables the rules write, on the job table's database (one pool)."""

    def exception_counter(self) -> ExceptionCounts:
        """The shared ``maxExceptions`` counts (created on first use)."""
        ...

    def cache_locks(self, table: str) -> CacheLocks:
        """The database cache store's lock table ``table``."""
        ...

    def job_batches(self, table: str) -> JobBatches:
        """Laravel's ``job_batches`` table ``table``."""
        ...


class RuleSettings(Protocol):
    """The worker's options the rules read (``WorkerOptions`` has them, by these names)."""

    #: ``--tries`` for a job that names none (0: unlimited).
    tries: int
    #: ``--backoff`` for a job that names none: seconds, by attempt.
    backoff: Sequence[int]
    #: Laravel's ``job_batches`` (``queue.batching.table``); None: batches not recorded.
    batches_table: str | None
    #: The database cache store's lock table (``cache_locks``); None: locks not released.
    unique_locks: str | None
    #: The cache connection's database URL when it is not the queue's.
    unique_locks_url: str | None
    #: Laravel's ``cache.prefix``, the start of every lock key.
    cache_prefix: str


@dataclass
class RuleOptions:
    """:class:`RuleSettings` with ``queue:work``'s defaults (the queue format's)."""

    tries: int = DEFAULT_TRIES
    backoff: Sequence[int] = (0,)
    batches_table: str | None = "job_batches"
    unique_locks: str | None = None
    unique_locks_url: str | None = None
    cache_prefix: str = "laravel_cache"


class LaravelRules:
    """Laravel's rules for a job's outcome (see the module), with the app tables they write
    (``tables``, opened lazily) and the warnings they give, each once."""

    def __init__(
        self, tables: Callable[[], AppTables], options: RuleSettings, *, unique_locks_hint: str
    ) -> None:
        self._tables = tables
        self.options = options
        #: How to tell a user to name the lock table (the option as this consumer spells it).
        self.unique_locks_hint = unique_locks_hint
        #: The cache lock table on a database of its own (``unique_locks_url``), once opened.
        self._own_locks: CacheLocks | None = None
        #: (kind, batch id or class) already warned about.
        self._warned: set[tuple[str, str]] = set()

    # -- attempts ---------------------------------------------------------------------------

    def _max_tries(self, attempt: Attempt) -> int:
        return attempt.max_tries if attempt.max_tries is not None else self.options.tries

    def before_start(self, attempt: Attempt, now: int) -> str | None:
        """``markJobAsFailedIfAlreadyExceedsMaxAttempts`` (and ours: past the attempts
        cap): the ``MaxAttemptsExceededException`` message to fail a job just reserved
        with, without running it; None to run it."""
        if attempt.attempts_cap and attempt.attempts > attempt.attempts_cap:
            return attempts_cap_text(attempt.name, attempt.attempts_cap)
        max_tries = self._max_tries(attempt)
        if exceeded_before_start(attempt.attempts, now, max_tries, attempt.retry_until):
            return attempted_too_many(attempt.name)
        return None

    def after_exception(self, attempt: Attempt, now: int, *, timed_out: bool) -> Verdict:
        """``Worker::handleJobException`` (and, for a timeout, its SIGALRM handler): fail
        a job out of attempts, at its ``maxExceptions``, or timed out with
        ``failOnTimeout``; else release it with its backoff (:meth:`release`)."""
        exceeded = attempted_too_many(attempt.name) if timed_out else None
        if out_of_attempts(attempt.attempts, now, self._max_tries(attempt), attempt.retry_until):
            return Failed(exceeded)
        if self.max_exceptions_reached(attempt):
            return Failed(exceeded)
        if timed_out and attempt.fail_on_timeout:
            return Failed(exceeded)
        steps = attempt.backoff or self.options.backoff
        return self.release(attempt, backoff_delay(list(steps), attempt.attempts))

    def release(self, attempt: Attempt, delay: float) -> Verdict:
        """A release (the rules', or the handler's ``$this->release($delay)``): the delay
        kept to what ``available_at`` holds, or a failure at the attempts cap (released
        there, the next reservation could not count the attempt)."""
        if at_attempts_cap(attempt.attempts, attempt.attempts_cap):
            return Failed(attempts_cap_text(attempt.name, attempt.attempts_cap), capped=True)
        return Released(min(max(0.0, float(delay)), float(MAX_DELAY_SECONDS)))

    def max_exceptions_reached(self, attempt: Attempt) -> bool:
        """Count one more exception of the job against its ``maxExceptions``; True when it
        reached it (the count is then forgotten). Best effort, as Laravel's cache is."""
        limit = attempt.max_exceptions
        if limit is None:
            return False
        try:
            counter = self._tables().exception_counter()
            if counter.increment(attempt.uuid) < limit:
                return False
            counter.forget(attempt.uuid)
        except (SqlQueueError, LaravelBridgeError) as exc:
            logger.warning("could not count exceptions of %s: %s", attempt.uuid, exc)
            return False
        return True

    # -- batches ----------------------------------------------------------------------------

    def _batches(self, name: str, batch_id: str) -> JobBatches | None:
        table = self.options.batches_table
        if table is None:
            self._warn(
                "batch",
                batch_id,
                f"{name} belongs to batch {batch_id}, which is not recorded (no batches "
                "table): its counts and callbacks are left as they are",
            )
            return None
        try:
            return self._tables().job_batches(table)
        except (SqlQueueError, LaravelBridgeError) as exc:
            self._warn("batch", batch_id, f"cannot record batch {batch_id}: {exc}")
            return None

    def batch_cancelled(self, name: str, batch_id: str | None) -> bool:
        """Whether the job's batch was cancelled: a batched job checks it first
        (``if ($this->batch()->cancelled()) return;``) and is done without running."""
        batches = None if batch_id is None else self._batches(name, batch_id)
        if batches is None or batch_id is None:
            return False
        try:
            row = batches.find(batch_id)
        except SqlQueueError as exc:
            self._warn("batch", batch_id, f"cannot read batch {batch_id}: {exc}")
            return False
        return row is not None and row.get("cancelled_at") is not None

    def record_batch(
        self,
        attempt: Attempt,
        queue: str,
        failure: str | None,
        *,
        signing_key: bytes | None,
        push: Callable[[PushJob], object],
    ) -> None:
        """A batched job done (``failure`` None) or failed: its batch's counts and
        callbacks (``batches.record_job``), the callbacks pushed with ``push``."""
        batch_id = attempt.batch_id
        batches = None if batch_id is None else self._batches(attempt.name, batch_id)
        if batches is None or batch_id is None:
            return
        record_job(
            batches,
            batch_id,
            attempt.uuid,
            attempt.name,
            failure=failure,
            queue=queue,
            signing_key=signing_key,
            push=push,
            warn=lambda batch, text: self._warn("batch", batch, text),
        )

    # -- unique locks -----------------------------------------------------------------------

    def _cache_locks(self, table: str) -> CacheLocks:
        url = self.options.unique_locks_url
        if url is None:
            return self._tables().cache_locks(table)
        if self._own_locks is None:
            self._own_locks = CacheLocks(url, table, StoreOptions(create_tables=False))
        return self._own_locks

    def release_unique(self, lock: UniqueLock | None) -> None:
        """``CallQueuedHandler::ensureUniqueJobLockIsReleased`` after a job is done or failed:
        force-release its lock in the cache lock table. A job that looks unique but whose
        lock is not there is warned about once per class: its lock is elsewhere
        (``uniqueVia()``, another cache store) or no lock table is configured.
        ``ShouldBeUniqueUntilProcessing`` locks, which Laravel releases as the job starts,
        are released here when it ends."""
        if lock is None:
            return
        options = self.options
        table = options.unique_locks
        released = False
        if table is not None:
            try:
                released = self._cache_locks(table).force_release(options.cache_prefix + lock.key)
            except (SqlQueueError, LaravelBridgeError) as exc:
                self.warn_unique(
                    lock.class_name, f"could not release unique lock {lock.key!r} in {table}: {exc}"
                )
                return
        if lock.looks_unique and not released:
            where = (
                f"no lock {options.cache_prefix + lock.key!r} was held in {table}: if the class "
                "uses uniqueVia() or another cache store, Python cannot release it"
                if table is not None
                else f"its unique lock {lock.key!r} is not released by Python: pass "
                f"{self.unique_locks_hint} (Laravel's database cache store's cache_locks)"
            )
            self.warn_unique(
                lock.class_name, f"{lock.class_name} looks unique (ShouldBeUnique); {where}"
            )

    def warn_unique(self, class_name: str, message: str) -> None:
        """Warn about a class's unique lock, once per class."""
        self._warn("unique", class_name, message)

    def _warn(self, kind: str, subject: str, message: str) -> None:
        if (kind, subject) not in self._warned:
            self._warned.add((kind, subject))
            logger.warning("%s", message)

    def close(self) -> None:
        """Close the lock table opened on a database of its own."""
        if self._own_locks is not None:
            self._own_locks.close()
            self._own_locks = None


def next_in_chain(
    parsed: Job, encrypter: Encrypter | None, now: float | None = None
) -> PushJob | None:
    """``Queueable::dispatchNextJobInChain``, for a job of a chain that succeeded: the next
    job, encrypted with ``encrypter`` when the finished one was encrypted (Python cannot see
    whether the next class is ``ShouldBeEncrypted``), with the finished job's payload keys.
    Raises :class:`~laravel_bridge.exceptions.LaravelBridgeError` for a chain it cannot read."""
    if parsed.command is None:
        return None
    return chain_successor(
        parsed.command,
        encrypter if parsed.payload.is_encrypted else None,
        now,
        parsed.payload.laravel_version,
    )
