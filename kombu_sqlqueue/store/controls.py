"""Flow control: what a queue's controls (``askr_queue_controls``) let a claim take.

A queue with no controls has no row, and its claims are the plain claim, which checks
only that the queue has no row (one index probe): a queue without controls pays nothing
else. A claim of a queue that has a row reads it first, in the claim's transaction, and
takes what :func:`claim_allowance` says. The SQL store and the memory store both
decide by these functions, so they cannot drift apart. Pure: no SQL, no Kombu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    def paused_at(self, now: int) -> bool:
        """Whether the queue is paused at ``now`` (a pause for a time ends by itself)."""
        return self.paused and (self.resume_at is None or now < self.resume_at)

    def in_force(self, now: int) -> bool:
        """Whether any control still applies at ``now`` (else the row may be dropped)."""
        return self.paused_at(now)


def claim_allowance(control: QueueControl | None, now: int, n: int) -> int:
    """How many of the ``n`` rows a claim asks for it may take under ``control``."""
    if control is not None and control.paused_at(now):
        return 0
    return n


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
        raise ValueError(
            f"a pause lasts more than 0 and at most {MAX_PAUSE_SECONDS} seconds, "
            f"got {for_seconds!r}"
        )
    return math.ceil(now + for_seconds)


def check_pause(queue: str, for_seconds: float | None, now: float) -> int | None:
    """Check a pause of ``queue`` (its name, its duration); return its ``resume_at``."""
    validate_queue_name(queue)
    return pause_end(now, for_seconds)
