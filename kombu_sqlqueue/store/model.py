"""Plain values the store takes and returns, and the rules every store applies to them
alike (whole-second rounding, argument checks), so the SQL store and the in-memory one
cannot drift apart. No SQL and no Kombu here."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
from dataclasses import dataclass

from .names import validate_queue_name

#: Contract v1's column default for ``max_attempts``.
DEFAULT_MAX_ATTEMPTS = 25

#: The most jobs one claim may hand out. A larger request raises
#: :class:`~kombu_sqlqueue.exceptions.ClaimLimitExceeded`; it is never trimmed.
MAX_CLAIM = 1000


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to enqueue.

    ``delay`` is in seconds (0 = ready now); ``uuid`` is the caller's identity
    for the job (a Celery task id), copied into the dead-letter row if it dies;
    ``expires_in`` (seconds, None = never) is its time to live: a job still
    unclaimed then is discarded, as AMQP discards a message past its TTL.
    ``attempts`` are those it has used already (0 for a new job; a job written again by
    a format that keeps its own count, such as a retried Laravel job, says how many).
    """

    queue: str
    payload: bytes
    priority: int = 0
    delay: float = 0.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    uuid: str | None = None
    expires_in: float | None = None
    attempts: int = 0
    #: Jobs of one key are held at most the queue's per-key limit at once (flow control;
    #: None: the job has no key and only the queue's own limits apply).
    concurrency_key: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """One delivery of a job: the row plus the reservation token that fences it."""

    id: int
    queue: str
    payload: bytes
    priority: int
    attempts: int
    max_attempts: int
    token: str
    uuid: str | None
    #: The job's previous reservation lapsed (its holder died or stalled): AMQP's
    #: ``redelivered``. False for a job released (requeued) or handed back by its holder.
    lapsed: bool = False

    @property
    def receipt(self) -> Receipt:
        """The (id, token) pair that every settlement of this delivery must name."""
        return Receipt(self.id, self.token)


@dataclass(frozen=True, slots=True)
class Holding:
    """Live reservations of one queue by one holder process (``store.holders()``)."""

    queue: str
    #: The holder's name (a Celery node name); None for a claimer that gave none.
    holder: str | None
    #: The holding process, ``host:pid``.
    instance: str | None
    jobs: int


#: This machine's name, read once (a claim records it with the pid).
HOST = socket.gethostname()


def this_instance() -> str:
    """This process as a claim records it: ``host:pid`` (the pid read at each claim: a
    forked child is another instance)."""
    return f"{HOST}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Route:
    """A stored binding: messages to ``exchange`` with a matching key go to ``queue``.

    ``message_ttl`` is the queue's time to live for messages (seconds), if it has one.
    """

    routing_key: str
    queue: str
    exchange_type: str
    message_ttl: float | None


@dataclass(frozen=True, slots=True)
class Receipt:
    """Names one delivery: a settlement matching both fields is the holder's."""

    job_id: int
    token: str


@dataclass(frozen=True, slots=True)
class Backlog:
    """Contract v1's backlog figures for one queue."""

    queue: str
    total: int
    ready: int
    oldest_seconds: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A row of ``askr_failed_jobs``."""

    id: int
    uuid: str | None
    queue: str
    payload: bytes
    exception: str | None
    attempts: int
    failed_at: int


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What a claim handed out, and how many exhausted rows it dead-lettered instead."""

    jobs: list[ClaimedJob]
    dead_lettered: int = 0
    #: Rows found past their ``expires_at`` and discarded instead of handed out.
    expired: int = 0
    #: A rate limit held the claim back: seconds until the queue's next job may be claimed
    #: (a consumer waits no longer than this before claiming again). None: it did not.
    retry_in: float | None = None

    def log(self, logger: logging.Logger, queue: str) -> None:
        """Report the rows of ``queue`` this claim dead-lettered or discarded."""
        if self.dead_lettered:
            logger.warning(
                "dead-lettered %d job(s) of queue %r: max attempts exceeded",
                self.dead_lettered,
                queue,
            )
        if self.expired:
            logger.info(
                "discarded %d expired message(s) of queue %r (past their TTL)",
                self.expired,
                queue,
            )


# -- the rules every store applies (the columns hold whole unix seconds) -------------------


def ready_at(now: float, delay: float) -> int:
    """``available_at`` of a job ready after ``delay`` seconds: rounded up when delayed,
    so it is never claimable early."""
    return math.ceil(now + delay) if delay > 0 else int(now)


def reservation_deadline(now: float, visibility: float) -> int:
    """``reserved_until`` of a claim at ``now``: rounded up, so a reservation lasts at
    least ``visibility`` seconds (and at least one)."""
    return math.ceil(now + max(1.0, visibility))


def job_times(job: NewJob, now: float) -> tuple[int, int | None]:
    """Check ``job``'s queue, delay and attempts limit; return its ``available_at`` and
    ``expires_at`` (rounded up: an expiring job lives at least its time to live)."""
    validate_queue_name(job.queue)
    if job.delay < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {job.delay!r}")
    if job.max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {job.max_attempts!r}")
    if not 0 <= job.attempts <= job.max_attempts:
        raise ValueError(f"attempts must be 0..max_attempts, got {job.attempts!r}")
    expires_at = None if job.expires_in is None else math.ceil(now + max(0.0, job.expires_in))
    return ready_at(now, job.delay), expires_at


#: Longest deduplication key stored as is; a longer one is stored as its SHA-256.
MAX_DEDUPE_KEY = 255
#: An enqueue-once sweeps its queue's identities older than its window every this many calls.
DEDUPE_SWEEP_EVERY = 1000


def dedupe_key(key: str, window: float) -> str:
    """``key`` as stored (a long one as ``sha256:<hex>``), after checking ``key``, ``window``."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a deduplication key must be a non-empty string, got {key!r}")
    if not window > 0:
        raise ValueError(f"a deduplication window must be > 0 seconds, got {window!r}")
    if len(key) > MAX_DEDUPE_KEY or not key.isprintable():
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return f"sha256:{digest}"
    return key
