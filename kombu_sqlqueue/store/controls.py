"""Flow control: what a queue's controls (``askr_queue_controls``) let a claim take.

Controls: a pause (for a time, or until resumed) and a concurrency limit (at most N jobs
of the queue held at once across every worker, counted in the claim's transaction under
the lock of the queue's row, so racing claims never exceed it). A queue with no controls
has no row, and its claims are the plain claim, which checks
only that the queue has no row (one index probe): a queue without controls pays nothing
else. A claim of a queue that has a row reads it first, in the claim's transaction, and
takes what :func:`claim_allowance` says. The SQL store and the memory store both
decide by these functions, so they cannot drift apart. Pure: no SQL, no Kombu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..exceptions import InvalidControl
from .names import validate_queue_name

#: The longest pause ``pause(…, for_seconds=…)`` takes: ten years, which is "until
#: resumed" for any purpose (and keeps ``resume_at`` far inside a BIGINT).
MAX_PAUSE_SECONDS = 10 * 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A queue's controls as stored (a row of ``askr_queue_controls``)."""

    queue: str
    paused: bool = False
    #: Unix seconds when the pause ends by itself; None: until resumed.
    resume_at: int | None = None
    #: At most this many jobs of the queue held at once by every worker; None: no limit.
    concurrency: int | None = None

    def paused_at(self, now: int) -> bool:
        """Whether the queue is paused at ``now`` (a pause for a time ends by itself)."""
        return self.paused and (self.resume_at is None or now < self.resume_at)

    def in_force(self, now: int) -> bool:
        """Whether any control still applies at ``now`` (else the row may be dropped)."""
        return self.paused_at(now) or self.concurrency is not None


def claim_allowance(control: QueueControl | None, now: int, n: int, held: int) -> int:
    """How many of the ``n`` rows a claim asks for it may take under ``control``, when
    ``held`` jobs of the queue are held (live reservations, every worker's)."""
    if control is None:
        return n
    if control.paused_at(now):
        return 0
    if control.concurrency is not None:
        return max(0, min(n, control.concurrency - held))
    return n


#: The largest concurrency limit (an INTEGER column everywhere).
MAX_CONCURRENCY = 2**31 - 1


def check_concurrency(queue: str, concurrency: int) -> int:
    """Check a concurrency limit of ``queue``: a whole number from 1."""
    validate_queue_name(queue)
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise InvalidControl(
            f"a concurrency limit is a whole number from 1 to {MAX_CONCURRENCY}, "
            f"got {concurrency!r}"
        )
    return concurrency


def pause_end(now: float, for_seconds: float | None) -> int | None:
    """``resume_at`` of a pause made at ``now`` that lasts ``for_seconds`` (None: until
    resumed); rounded up, so a pause lasts at least that long."""
    if for_seconds is None:
        return None
    if (
        isinstance(for_seconds, bool)
        or not isinstance(for_seconds, (int, float))
        or not 0 < for_seconds <= MAX_PAUSE_SECONDS
    ):
        raise InvalidControl(
            f"a pause lasts more than 0 and at most {MAX_PAUSE_SECONDS} seconds, "
            f"got {for_seconds!r}"
        )
    return math.ceil(now + for_seconds)


def check_pause(queue: str, for_seconds: float | None, now: float) -> int | None:
    """Check a pause of ``queue`` (its name, its duration); return its ``resume_at``."""
    validate_queue_name(queue)
    return pause_end(now, for_seconds)
