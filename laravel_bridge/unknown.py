"""A job no handler here knows: fail it, or hand it back for another worker — without a loop.

Handed back, it must neither come straight back to this worker nor keep it busy
(``--unknown-delay 0`` once made 60,723 releases in 10 s, and ``--stop-when-empty`` never
returned). Laravel's own release (8.83, ``DatabaseQueue::deleteAndRelease``) deletes the
row and inserts it again, so it queues behind every waiting job; a Python worker adds two
rules:

* the delay is at least :data:`MIN_UNKNOWN_DELAY` (1 s): ``available_at`` holds whole
  seconds, and contract v1's claim orders by ``available_at`` then id, so a delay of 0
  could leave the job in front of jobs that became ready in the same second; 1 s puts it
  behind every job ready now on both layouts;
* the worker remembers the uuids it released as unknown (the last :data:`UNKNOWN_MEMORY`).
  Meeting one again means the sweep found nothing it can run: the job is handed back once
  more and the sweep counts as empty, so ``stop_when_empty`` stops and a long-running
  worker idles ``sleep`` seconds — at most one such release per sweep, never a hot loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .exceptions import LaravelBridgeError
from .job import Job
from .payload import MAX_DELAY_SECONDS

UnknownJobPolicy = Literal["release", "fail"]

#: The least delay an unknown job is released with.
MIN_UNKNOWN_DELAY = 1.0
#: How many unknown jobs a worker remembers having released (oldest forgotten first).
UNKNOWN_MEMORY = 4096


@dataclass(frozen=True, slots=True)
class FailUnknown:
    """Fail the job with ``error`` (``unknown_jobs="fail"``)."""

    error: LaravelBridgeError


@dataclass(frozen=True, slots=True)
class ReleaseUnknown:
    """Release the job, its attempt refunded, after ``delay`` seconds."""

    delay: float
    #: This worker released it as unknown before: the sweep found nothing it can run.
    again: bool
    #: Why no handler here runs it, for the log.
    why: str


class UnknownJobs:
    """This worker's rule for jobs it has no handler for, and its memory of those it
    released (see the module docstring)."""

    def __init__(self, policy: UnknownJobPolicy, delay: float) -> None:
        self.policy = policy
        self.delay = min(max(delay, MIN_UNKNOWN_DELAY), MAX_DELAY_SECONDS)
        #: uuids of jobs released as unknown, oldest first.
        self._released: dict[str, None] = {}

    def __len__(self) -> int:
        """How many released unknown jobs are remembered (bounds a sweep's turns)."""
        return len(self._released)

    def decide(self, job: Job) -> FailUnknown | ReleaseUnknown:
        """What becomes of ``job``, which no handler here knows."""
        closure = job.kind == "closure"
        if self.policy == "fail":
            return FailUnknown(
                LaravelBridgeError(
                    f"{job.name} is a queued closure: PHP code, which only a PHP worker can run"
                    if closure
                    else f"no handler is registered for {job.name}"
                )
            )
        why = (
            f"{job.name} is a queued closure, PHP code only a PHP worker can run"
            if closure
            else f"no handler for {job.name}"
        )
        return ReleaseUnknown(self.delay, job.uuid in self._released, why)

    def released(self, job: Job) -> None:
        """``job`` was released as unknown: remember it (forgetting the oldest)."""
        self._released[job.uuid] = None
        if len(self._released) > UNKNOWN_MEMORY:
            del self._released[next(iter(self._released))]
