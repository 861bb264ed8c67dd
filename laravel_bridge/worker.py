"""A Python worker for Laravel jobs, with the rules of ``Illuminate\\Queue\\Worker`` (8.83).

One loop, one job at a time, as ``php artisan queue:work`` runs:

1. Each sweep checks the queues in the order given (``--queue high,default``)
   and reserves the first ready job (the attempt is counted at reservation).
2. A row that cannot be turned into a job — past a size or nesting limit,
   not UTF-8, not JSON, no ``job``, no ``uuid``, a command that does not
   decode or decrypt, a ``maxTries``/``timeout``/``backoff`` … of the wrong
   type — goes to the failed table once, with the reason and the payload
   exactly as stored, and the loop goes on (see :meth:`Worker.process`).
   (Laravel 8 would report it and retry it forever or drop it.)
3. Laravel's ``markJobAsFailedIfAlreadyExceedsMaxAttempts``: with a
   ``retryUntil`` in the payload the time decides and tries do not; otherwise
   ``attempts > maxTries`` (the payload's, else ``--tries``; 0 = unlimited)
   fails the job before it runs.
4. The handler registered for the job's class (for a queued listener, mailable or
   notification: that class, Laravel's ``displayName``) runs, with the job's
   ``timeout`` (else ``--timeout``). Success deletes the job — and dispatches
   the next job of a chain in the same transaction. An exception (or a
   timeout) fails the job when ``retryUntil`` passed, when attempts reached
   ``maxTries``, when ``maxExceptions`` is reached, or on a timeout with
   ``failOnTimeout``; otherwise it is released with the ``backoff`` for this
   attempt (the payload's list, else ``--backoff``).

A job no handler here knows is handed back for another worker (``unknown_jobs``,
``unknown_delay``): see ``laravel_bridge.unknown`` for how that stays out of a loop.

Safety cap: a job that fails on its ``attempts_cap``-th attempt (by default what
the jobs table's ``attempts`` column holds: 255 for Laravel 8-12's ``TINYINT`` on
MySQL, 65535 for 13's ``SMALLINT``) is failed instead of released, whatever its
``retryUntil`` says (``rules.at_attempts_cap``), and a job released with no backoff again
and again is logged as a warning each time from the third attempt on — never
a silent hot loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from kombu_sqlqueue.exceptions import MessageTooLarge

from .alarms import JobTimedOut, WorkerSignals, in_main_thread
from .completion import completed_here, completer
from .encryption import Encrypter
from .exceptions import LaravelBridgeError
from .handlers import REGISTRY, Handler, HandlerRegistry
from .job import Job, MalformedJob, parse_job
from .laravel_tables import QueuePauses
from .outcomes import (
    Attempt,
    Failed,
    LaravelRules,
    MaxAttemptsExceeded,
    Verdict,
    exception_text,
    message_of,
    next_in_chain,
    storable_text,
    unique_lock,
)
from .pauses import PausedQueues
from .payload import MAX_PAYLOAD_BYTES
from .tables import JobTable, PushJob, ReservedJob
from .unknown import FailUnknown, UnknownJobPolicy, UnknownJobs

logger = logging.getLogger(__name__)

__all__ = [
    "JobTimedOut",
    "MaxAttemptsExceeded",
    "Worker",
    "WorkerOptions",
    "exception_text",
    "storable_text",
]


def _escape_record(record: logging.LogRecord) -> bool:
    """A stored row's text (a class name, an exception's message) reaches a log line
    escaped: a lone surrogate would make a UTF-8 log file's handler fail ("--- Logging
    error ---", the line lost), and a control character would reach the terminal."""
    if record.exc_info is not None and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    message = record.getMessage()
    if not _log_safe(message):
        record.msg, record.args = _log_escaped(message), None
    if record.exc_text and not _log_safe(record.exc_text):
        record.exc_text = _log_escaped(record.exc_text)
    return True


def _log_safe(text: str) -> bool:
    return text.isprintable() or all(c.isprintable() or c in "\n\t" for c in text)


def _log_escaped(text: str) -> str:
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


logger.addFilter(_escape_record)

ClaimPolicy = Literal["handled", "all"]


@dataclass
class WorkerOptions:
    """``php artisan queue:work``'s options, with its defaults."""

    #: Queues to work, checked in this order on every sweep.
    queues: Sequence[str] = ("default",)
    #: The Laravel connection name written to ``failed_jobs.connection``.
    connection: str = "database"
    #: ``--tries``: attempts before a job fails when its payload has no maxTries (0 = no limit).
    tries: int = 1
    #: ``--backoff``: seconds before a retry, or a list by attempt, when the payload has none.
    backoff: Sequence[int] = (0,)
    #: ``--timeout``: seconds a job may run when its payload has no timeout (0 = no limit).
    timeout: int = 60
    #: ``--sleep``: seconds to wait when no queue has a job.
    sleep: float = 3.0
    #: ``--rest``: seconds to wait after each job.
    rest: float = 0.0
    #: ``--max-jobs`` / ``--max-time``: stop after that many jobs / seconds (0 = never).
    max_jobs: int = 0
    max_time: float = 0.0
    #: ``--once`` / ``--stop-when-empty``.
    once: bool = False
    stop_when_empty: bool = False
    #: The connection's ``retry_after``: a reservation older than this is taken over.
    retry_after: int = 90
    #: Which jobs to reserve on Laravel's table: ``handled``, only those whose payload names
    #: a class with a handler here (``displayName`` or ``data.commandName``) and rows that
    #: are no Laravel payload (bad rows, failed here) — every other job is left untouched
    #: for the PHP workers sharing the queue, so it waits no longer than with them alone;
    #: ``all``, every job (a queue no PHP worker serves: ``unknown_jobs`` then decides).
    #: Contract v1's layout always reserves every job.
    claim: ClaimPolicy = "handled"
    #: Laravel's ``job_batches`` table (``queue.batching.table``) in the queue's database: a
    #: batched job Python runs, skips (its batch was cancelled) or fails is recorded there as
    #: Laravel's ``DatabaseBatchRepository`` would, and the batch's then/catch/finally
    #: callbacks are handed to PHP as a queued closure (see ``laravel_bridge.batches``).
    #: None: batches are not recorded (a batched job is then warned about once per batch).
    batches_table: str | None = "job_batches"
    #: The lock table of Laravel's ``database`` cache store (``cache_locks``) in the queue's
    #: database: a ``ShouldBeUnique`` job's lock is released there when Python finishes or
    #: fails the job, as Laravel's ``CallQueuedHandler`` does. None: not released (a job
    #: that looks unique — ``uniqueFor``/``uniqueId`` properties — is then warned about, once
    #: per class).
    unique_locks: str | None = None
    #: The cache connection's database URL when it is not the queue's (Laravel's
    #: ``cache.stores.database.connection``); None: the queue's database.
    unique_locks_url: str | None = None
    #: Laravel's ``cache.prefix`` (``laravel_cache`` for an app named Laravel: the slug of
    #: ``APP_NAME`` + ``_cache``), the start of every lock key in that table.
    cache_prefix: str = "laravel_cache"
    #: The table of Laravel's ``database`` cache store (``cache``; in the cache
    #: connection's database, ``unique_locks_url``, when that is given), where
    #: ``php artisan queue:pause`` (Laravel 12.40+) writes: a paused queue of
    #: ``connection`` is skipped, as ``queue:work`` skips it. None: pauses are not read (a
    #: missing table is said once, then not read either).
    pause_cache: str | None = "cache"
    #: A job whose class has no handler: ``release`` it (attempt refunded) after
    #: ``unknown_delay`` seconds (at least ``MIN_UNKNOWN_DELAY``), for another worker
    #: that knows it, or ``fail`` it.
    unknown_jobs: UnknownJobPolicy = "release"
    unknown_delay: float = 60.0
    #: Fail a job it runs whose attempts pass this, retryUntil or not; never more than the
    #: table's attempts column holds (0, the default: that limit, as PHP's worker reaches it).
    attempts_cap: int = 0
    #: The largest payload read, in bytes; a larger row is failed as malformed.
    max_payload: int = MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        if not self.queues:
            raise LaravelBridgeError("give at least one queue to work")
        if self.claim not in ("handled", "all"):
            raise LaravelBridgeError(f"claim must be 'handled' or 'all', got {self.claim!r}")
        if self.unknown_jobs not in ("release", "fail"):
            raise LaravelBridgeError(
                f"unknown_jobs must be 'release' or 'fail', got {self.unknown_jobs!r}"
            )
        for name in ("tries", "timeout", "max_jobs", "retry_after", "attempts_cap", "max_payload"):
            if getattr(self, name) < 0:
                raise LaravelBridgeError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if any(b < 0 for b in self.backoff):
            raise LaravelBridgeError(f"backoff must be seconds >= 0, got {list(self.backoff)!r}")
        if self.sleep < 0 or self.rest < 0 or self.max_time < 0 or self.unknown_delay < 0:
            raise LaravelBridgeError("sleep, rest, max_time and unknown_delay must be >= 0")


def _printable(name: str) -> str:
    """A name for a console line: characters a terminal would not show are escaped."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


class Worker:
    """Runs Laravel jobs from a :class:`~laravel_bridge.tables.JobTable` with Python handlers.

    ``output`` receives the console lines ``php artisan queue:work`` prints
    (``[2024-05-06 07:08:09][12] Processing: App\\Jobs\\X``); log records go to
    the ``laravel_bridge.worker`` logger.
    """

    def __init__(
        self,
        table: JobTable,
        options: WorkerOptions | None = None,
        *,
        handlers: HandlerRegistry | None = None,
        app_key: str | None = None,
        cipher: str = "AES-256-CBC",
        output: Callable[[str], None] | None = None,
    ) -> None:
        self.table = table
        self.options = options or WorkerOptions()
        self.handlers = handlers if handlers is not None else REGISTRY
        self.encrypter = Encrypter(app_key, cipher) if app_key else None
        self.output = output
        self.should_quit = False
        self.jobs_processed = 0
        #: Jobs their handler completed in its own transaction (``job.complete``).
        self.completed_in_transaction = 0
        self._stop = threading.Event()
        self.clock: Callable[[], float] = time.time
        #: The job reserved in the transaction that settled the last one (see _settle_done).
        self._next: ReservedJob | None = None
        #: Reserve the next job in the same transaction as a finished one's delete.
        self.prefetch = True
        self._finishing = False
        self._running = False
        #: SIGTERM/SIGINT stop the worker after the current job; SIGALRM ends a job past
        #: its timeout (alarms.py).
        self.signals = WorkerSignals(self.stop)
        #: What becomes of a job no handler here knows (unknown.py).
        self.unknown = UnknownJobs(self.options.unknown_jobs, self.options.unknown_delay)
        #: Laravel's rules for a job's outcome, with the app tables they write (this
        #: table's database) and their warnings, each once.
        self.rules = LaravelRules(
            lambda: self.table, self.options, unique_locks_hint="--unique-locks-table"
        )
        #: Queues ``queue:pause`` paused (Laravel's layout; contract v1's claim knows its own).
        self.pauses = PausedQueues(self._pause_table(), self.options.connection)

    # -- the loop -----------------------------------------------------------------

    def stop(self) -> None:
        """Finish the current job, settle it, then return from :meth:`run` (SIGTERM does this)."""
        self.should_quit = True
        self._stop.set()

    def run(self) -> int:
        """Work until stopped (or ``once`` / ``stop_when_empty`` / ``max_*`` say so); return the
        exit status (0)."""
        opts = self.options
        if opts.timeout and not in_main_thread():
            logger.warning(
                "the worker runs outside the main thread: job timeouts cannot be enforced"
            )
        with self.signals.installed(), self._prefetching():
            started = time.monotonic()
            while not self.should_quit:
                job = self.process_next()
                if opts.once:
                    break
                if job and opts.rest > 0:
                    self._idle(opts.rest)
                if not job:
                    if opts.stop_when_empty:
                        break
                    self._idle(opts.sleep)
                if opts.max_jobs and self.jobs_processed >= opts.max_jobs:
                    break
                if opts.max_time and time.monotonic() - started >= opts.max_time:
                    break
            # A job reserved together with the last settlement runs and settles before the
            # worker stops (seed 004: a reserved job is never left to lapse on shutdown).
            self._finishing = True
            try:
                while self._next is not None:
                    self.process_next()
            finally:
                self._finishing = False
                self.rules.close()
                self.pauses.close()
        return 0

    def process_next(self) -> bool:
        """Reserve and run at most one job; True if one was found.

        A job this worker already released as unknown, found again, is handed back and
        the sweep goes on to the jobs behind it, on this queue and the next: when it
        finds only such jobs it counts as none found, so ``stop_when_empty`` stops and the
        loop idles ``sleep`` (see ``laravel_bridge.unknown``).
        """
        # Bounded: each turn that comes back False handed back a job remembered as unknown.
        for _turn in range(len(self.unknown) + 1):
            job, self._next = self._next, None
            if job is None:
                job = self.pop()
            if job is None:
                return False
            self.jobs_processed += 1
            if self._process(job):
                return True
        return False

    def pop(self) -> ReservedJob | None:
        """One sweep: the first ready job of the queues, in their order (of the classes
        this worker runs, unless ``claim`` is ``all``), a paused queue skipped."""
        classes = self._claimed_classes()
        for queue in self._unpaused():
            job = self.table.pop(queue, self.options.retry_after, classes)
            if job is not None:
                return job
        return None

    def _unpaused(self) -> list[str]:
        """The worker's queues, in order, but those ``queue:pause`` paused
        (``Worker::getNextJob`` skips them the same way)."""
        paused = self.pauses.of(self.options.queues)
        return [queue for queue in self.options.queues if queue not in paused]

    def _pause_table(self) -> Callable[[], QueuePauses] | None:
        """What opens the cache table pauses are read from; None: not read."""
        opts = self.options
        table = opts.pause_cache
        if table is None or self.table.layout != "laravel":
            return None
        url = opts.unique_locks_url
        if url is not None:
            return lambda: QueuePauses(url, table, prefix=opts.cache_prefix)
        return lambda: self.table.queue_pauses(table, opts.cache_prefix)

    def _claimed_classes(self) -> list[str] | None:
        """The classes a pop may reserve: those with a handler here (None: every class)."""
        return list(self.handlers) if self.options.claim == "handled" else None

    def _idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.table.wait(min(left, 0.5), self.options.queues)

    @contextlib.contextmanager
    def _prefetching(self) -> Iterator[None]:
        """Reserve-ahead is allowed inside run() only; a job reserved ahead that run() did
        not get to (an error on the way out) is handed back with its attempt refunded."""
        self._running = True
        try:
            yield
        finally:
            self._running = False
            left, self._next = self._next, None
            if left is not None:
                try:
                    self.table.release(left, 0, refund=True)
                except Exception:
                    logger.exception("could not hand back job %s reserved ahead", left.id)

    # -- one job --------------------------------------------------------------------

    def _line(self, job: ReservedJob, status: str, name: str) -> None:
        if self.output is not None:
            stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
            self.output(f"[{stamp}][{job.id}] {status + ':':<11} {_printable(name)}")

    def _parse(self, job: ReservedJob) -> Job:
        """The job in a reserved row, or :class:`MalformedJob` saying why there is none."""
        return parse_job(
            job,
            max_bytes=self.options.max_payload,
            encrypter=self.encrypter,
            handled=lambda name: self.handlers.get(name) is not None,
        )

    def process(self, job: ReservedJob) -> None:
        """Run one reserved job and settle it (Laravel's ``Worker::process``).

        Whatever the row holds, this settles it and returns: a row that cannot be
        turned into a job is failed once, with the reason and the payload as stored
        (:class:`MalformedJob`). Only the store's own errors (the database) and
        ``BaseException`` from a handler leave it.
        """
        self._process(job)

    def _process(self, job: ReservedJob) -> bool:
        """:meth:`process`; False when the job was one this worker already released as
        unknown (handed back again: nothing done)."""
        try:
            parsed = self._parse(job)
        except MalformedJob as exc:
            self._fail_malformed(job, exc)
            return True
        except Exception as exc:  # a row this code failed to foresee: settle it all the same
            logger.exception("reading job %s raised; it goes to the failed table", job.id)
            reason = MalformedJob(
                f"the worker could not read the job: {type(exc).__name__}: "
                f"{message_of(exc)[:1000]} (unforeseen; please report it to laravel_bridge)"
            )
            reason.__cause__ = exc
            self._fail_malformed(job, reason)
            return True
        self._line(job, "Processing", parsed.name)
        handler = self._handler_for(parsed)
        if handler is None:
            # Not this worker's to run, nor to judge: its tries are the business of the
            # worker that knows the class (Laravel 13's column holds 65535 attempts).
            return self._unknown(job, parsed)
        exceeded = self.rules.before_start(self._attempt(job, parsed), int(self.clock()))
        if exceeded is not None:
            self._fail(job, parsed, MaxAttemptsExceeded(exceeded), handler)
            return True
        self._run_handler(job, parsed, handler)
        return True

    def _attempt(self, job: ReservedJob, parsed: Job) -> Attempt:
        """What the rules read of this delivery."""
        limit = self.table.attempts_limit
        cap = min(self.options.attempts_cap or limit, limit)
        return Attempt.of(parsed, job.attempts, cap)

    def _handler_for(self, parsed: Job) -> Handler | None:
        """The handler of the first of the job's names one is registered under (the
        listener/mailable/notification class before Laravel's wrapper of it)."""
        if parsed.kind == "closure":
            return None
        for name in parsed.handler_names:
            handler = self.handlers.get(name)
            if handler is not None:
                return handler
        return None

    def _run_handler(self, job: ReservedJob, parsed: Job, handler: Handler) -> None:
        if self.rules.batch_cancelled(parsed.name, parsed.batch_id):
            # What a batched job does first (`if ($this->batch()->cancelled()) return;`,
            # Laravel's docs; SkipIfBatchCancelled since 10.x): done, without running.
            logger.info("%s (job %s): its batch was cancelled, skipped", parsed.name, job.id)
            self._after_success(job, parsed, handler)
            return
        timeout = (
            parsed.payload.timeout if parsed.payload.timeout is not None else (self.options.timeout)
        )
        parsed.completer = completer(self.table, job, lambda: self._chain_next(parsed))
        try:
            with self.signals.time_limit(timeout):
                # The worker's own Job: job.release() / job.fail() in the handler are read
                # back from it when the handler returns.
                handler.handle(parsed)
        except JobTimedOut as exc:
            if not self._completed(job, parsed, handler, exc):
                self._after_exception(job, parsed, exc, handler, timed_out=True)
            return
        except Exception as exc:
            if self._completed(job, parsed, handler, exc):
                return
            if parsed.outcome is not None:
                # The handler settled its job, then raised: its settlement stands (Laravel's
                # handleJobException leaves a deleted, released or failed job as it is).
                logger.error(
                    "%s (job %s) raised after settling itself: %s",
                    parsed.name,
                    job.id,
                    exc,
                    exc_info=(type(exc), exc, exc.__traceback__),
                )
                self._apply_outcome(job, parsed, handler)
                return
            self._after_exception(job, parsed, exc, handler, timed_out=False)
            return
        if not self._completed(job, parsed, handler, None):
            self._after_success(job, parsed, handler)

    def _completed(
        self, job: ReservedJob, parsed: Job, handler: Handler, exc: BaseException | None
    ) -> bool:
        """True when the handler completed its job in its transaction and that committed
        (``job.complete``, completion.py): the job is done, whatever the handler did after;
        nothing is written for it. False otherwise: the job settles as usual."""
        if not parsed.completed or not completed_here(self.table, job):
            return False
        self.completed_in_transaction += 1
        if exc is not None:
            logger.error(
                "%s (job %s) raised after completing in its transaction; it stays done: %s",
                parsed.name,
                job.id,
                exc,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        self._done(job, parsed, handler)
        return True

    def _chain_next(self, parsed: Job) -> list[PushJob]:
        """The next job of a chain, to store with a finished job's deletion (none: [])."""
        successor = next_in_chain(parsed, self.encrypter, self.clock())
        return [] if successor is None else [successor]

    # -- outcomes -------------------------------------------------------------------

    def _after_success(self, job: ReservedJob, parsed: Job, handler: Handler) -> None:
        if parsed.outcome is not None and parsed.outcome[0] != "delete":
            self._apply_outcome(job, parsed, handler)
            return
        try:
            then = self._chain_next(parsed)
        except Exception as exc:  # a chain link that cannot be dispatched: this job's failure
            self._after_exception(job, parsed, exc, handler, timed_out=False)
            return
        try:
            done = self._settle_done(job, then)
        except MessageTooLarge as exc:
            # The chain's next job is larger than the database takes: nothing was written,
            # and no retry makes it fit. The finished job fails with the reason.
            self._fail(job, parsed, exc, handler)
            return
        if self._settled(done, "delete", job, parsed):
            self._done(job, parsed, handler)
            if then:
                logger.info("dispatched the next job of %s's chain", parsed.name)

    def _apply_outcome(self, job: ReservedJob, parsed: Job, handler: Handler) -> None:
        """Settle as the handler asked with ``job.release()`` / ``fail()`` / ``delete()``."""
        assert parsed.outcome is not None
        kind, arg = parsed.outcome
        if kind == "release":
            self._release(job, parsed, float(arg))
        elif kind == "fail":
            exc = (
                arg
                if isinstance(arg, BaseException)
                else LaravelBridgeError(str(arg or "the handler failed the job"))
            )
            self._fail(job, parsed, exc, handler)
        elif self._settled(self.table.delete(job), "delete", job, parsed):
            self._done(job, parsed, handler)

    def _settle_done(self, job: ReservedJob, then: list[PushJob]) -> bool:
        """Delete a finished job; when the loop goes on, reserve the next one in the same
        transaction (one commit instead of two — the database's flush dominates a job)."""
        opts = self.options
        going_on = (
            self.prefetch
            and self._running
            and not self._finishing
            and not self.should_quit
            and not opts.once
            and opts.rest <= 0
            and not (opts.max_jobs and self.jobs_processed >= opts.max_jobs)
        )
        if not going_on:
            return self.table.delete(job, then)
        deleted, self._next = self.table.delete_and_pop(
            job, then, self._unpaused(), opts.retry_after, self._claimed_classes()
        )
        return deleted

    def _after_exception(
        self,
        job: ReservedJob,
        parsed: Job,
        exc: BaseException,
        handler: Handler,
        *,
        timed_out: bool,
    ) -> None:
        """Laravel's ``handleJobException`` (and, for a timeout, its SIGALRM handler)."""
        logger.error(
            "%s (job %s, attempt %d) raised: %s",
            parsed.name,
            job.id,
            job.attempts,
            exc,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        verdict = self.rules.after_exception(
            self._attempt(job, parsed), int(self.clock()), timed_out=timed_out
        )
        self._settle(job, parsed, verdict, exc, handler)

    def _settle(
        self,
        job: ReservedJob,
        parsed: Job,
        verdict: Verdict,
        exc: BaseException | None,
        handler: Handler | None,
    ) -> None:
        """Write the rules' verdict: the release, or the failure with its reason (the rules'
        ``MaxAttemptsExceeded`` caused by ``exc``, or ``exc`` itself)."""
        if not isinstance(verdict, Failed):
            self._released(job, parsed, verdict.delay)
            return
        if verdict.capped:
            # At the cap the job fails as the rules', not the handler's, failure.
            self._fail(job, parsed, MaxAttemptsExceeded(verdict.exceeded), None)
            return
        reason: BaseException
        if verdict.exceeded is not None:
            reason = MaxAttemptsExceeded(verdict.exceeded)
            reason.__cause__ = exc
        else:
            assert exc is not None
            reason = exc
        self._fail(job, parsed, reason, handler)

    def _release(self, job: ReservedJob, parsed: Job, delay: float) -> None:
        """The handler's ``$this->release($delay)``, by the rules (the attempts cap)."""
        verdict = self.rules.release(self._attempt(job, parsed), delay)
        self._settle(job, parsed, verdict, None, None)

    def _released(self, job: ReservedJob, parsed: Job, delay: float) -> None:
        if not self._settled(self.table.release(job, delay), "release", job, parsed):
            return
        level = logging.WARNING if delay <= 0 and job.attempts >= 3 else logging.INFO
        logger.log(
            level,
            "released %s (job %s) after attempt %d; ready again in %s s%s",
            parsed.name,
            job.id,
            job.attempts,
            delay,
            " — no backoff: give the job a backoff, tries or retryUntil"
            if level == logging.WARNING
            else "",
        )

    def _fail(
        self, job: ReservedJob, parsed: Job, exc: BaseException, handler: Handler | None
    ) -> None:
        text = exception_text(exc)
        if not self._settled(
            self.table.fail(job, self.options.connection, parsed.uuid, text), "fail", job, parsed
        ):
            return
        self._line(job, "Failed", parsed.name)
        logger.warning("%s (job %s) failed: %s", parsed.name, job.id, exc)
        self._finished(job, parsed, handler, exc)
        if handler is not None and handler.on_failure is not None:
            try:
                handler.on_failure(parsed.properties, exc, parsed.uuid)
            except Exception:  # an observer never changes the outcome
                logger.exception("the failure hook of %s raised", parsed.name)

    def _done(self, job: ReservedJob, parsed: Job, handler: Handler) -> None:
        self._line(job, "Processed", parsed.name)
        self._finished(job, parsed, handler, None)

    def _finished(
        self, job: ReservedJob, parsed: Job, handler: Handler | None, exc: BaseException | None
    ) -> None:
        """After a job is done (``exc`` None) or failed: its unique lock released, its batch
        recorded (the rules')."""
        try:
            lock = unique_lock(parsed, handler.unique_id if handler is not None else None)
        except Exception as error:  # the job is settled: a lookup bug only loses the release
            self.rules.warn_unique(
                parsed.command.class_name if parsed.command is not None else parsed.name,
                f"the unique_id of {parsed.name}'s handler raised ({error!r}): its lock is "
                "not released",
            )
        else:
            self.rules.release_unique(lock)
        self.rules.record_batch(
            self._attempt(job, parsed),
            job.queue,
            None if exc is None else message_of(exc),
            signing_key=self.encrypter.key if self.encrypter is not None else None,
            push=self.table.push,
        )

    def _fail_malformed(self, job: ReservedJob, exc: MalformedJob) -> None:
        """Move an unreadable job to the failed table as stored; it keeps the payload's
        uuid when that is usable, else gets a new one (``failed_jobs.uuid`` is required)."""
        uuid = exc.uuid or str(uuid_module.uuid4())
        # The name failed_jobs rows have always carried (still importable from here).
        reason = storable_text(f"laravel_bridge.worker.MalformedJob: {exc}")
        if self.table.fail(job, self.options.connection, uuid, reason):
            logger.warning(
                "job %s on %r is malformed, moved to failed jobs: %s", job.id, job.queue, exc
            )
            self._line(job, "Failed", "(malformed job)")
        else:
            logger.warning("job %s is malformed, and its reservation was taken over", job.id)

    def _unknown(self, job: ReservedJob, parsed: Job) -> bool:
        """A job no handler here knows: fail it, or hand it back (unknown.py); False when
        it was handed back before (the sweep found nothing this worker can run)."""
        verdict = self.unknown.decide(parsed)
        if isinstance(verdict, FailUnknown):
            self._fail(job, parsed, verdict.error, None)
            return True
        released = self.table.release(job, verdict.delay, refund=True)
        if not self._settled(released, "release", job, parsed):
            return True
        if verdict.again:
            logger.info(
                "no handler for %s (job %s), met again: handed back for %s s",
                parsed.name,
                job.id,
                verdict.delay,
            )
            return False
        self.unknown.released(parsed)
        logger.warning(
            "%s (job %s): released for %s s with its attempt refunded",
            verdict.why,
            job.id,
            verdict.delay,
        )
        return True

    def _settled(self, ok: bool, operation: str, job: ReservedJob, parsed: Job) -> bool:
        if not ok:
            logger.warning(
                "%s of %s (job %s, attempt %d) was stale: its reservation lapsed and was "
                "taken over; nothing written",
                operation,
                parsed.name,
                job.id,
                job.attempts,
            )
        return ok
