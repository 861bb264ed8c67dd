"""Plain values the store takes and returns. No SQL and no Kombu here."""

from __future__ import annotations

from dataclasses import dataclass

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
    """

    queue: str
    payload: bytes
    priority: int = 0
    delay: float = 0.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    uuid: str | None = None
    expires_in: float | None = None


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

    @property
    def receipt(self) -> Receipt:
        """The (id, token) pair that every settlement of this delivery must name."""
        return Receipt(self.id, self.token)


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
