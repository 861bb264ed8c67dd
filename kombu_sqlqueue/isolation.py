"""A redelivered message is delivered alone (pure: no database, no Kombu).

A message claimed again after its last holder's reservation lapsed (the holder died or
stalled: ``ClaimedJob.lapsed``) may be the one that kills its consumer. A message its
consumer requeued (``reject(requeue=True)``) or gave back is not suspect: it is delivered
as any other, in priority order. Delivered alone, no innocent message pays an
attempt for it: it is taken only when the channel holds nothing else, and nothing more
is claimed while it is held — each wait bounded by ``visibility_timeout``, so a consumer
that needs a second message before it settles the first (an aggregator) is slowed,
never stuck. Past the bound, claims go on as usual until the channel holds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from time import monotonic

from .envelope import delivery_tag
from .store import ClaimedJob


class RedeliveryIsolation:
    """One channel's state of isolating redelivered messages."""

    def __init__(self, visibility_timeout: float, clock: Callable[[], float] = monotonic) -> None:
        self.visibility_timeout = visibility_timeout
        self.clock = clock
        #: Delivery tag of the redelivered message delivered alone, until it is settled.
        self.suspect: str | None = None
        #: A redelivered message waits until the channel holds nothing else.
        self.suspect_waiting = False
        #: Until when (``clock``) claims pause for the redelivered message.
        self.until: float | None = None
        #: The pause ran out: claim as usual until the channel holds nothing.
        self.spent = False

    def select(
        self, jobs: list[ClaimedJob], holds_deliveries: bool
    ) -> tuple[list[ClaimedJob], list[ClaimedJob]]:
        """Split a claim into (to deliver, to hand back with their attempts refunded).

        ``holds_deliveries``: the channel holds unsettled deliveries already.
        """
        if self.spent:
            if holds_deliveries:
                return jobs, []
            self.spent = False
        first = next((job for job in jobs if job.lapsed), None)
        if first is None:
            return jobs, []
        self.until = self.clock() + self.visibility_timeout
        if holds_deliveries:
            self.suspect_waiting = True  # claim it again once what we hold is settled
            return [], jobs
        self.suspect = delivery_tag(first.receipt)
        return [first], [job for job in jobs if job is not first]

    def pausing(self, held: Container[str], holds_deliveries: bool) -> bool:
        """True while claims pause for a redelivered message; ``held``: the tags this
        process holds."""
        if self.until is None:
            return False
        suspect_held = self.suspect is not None and self.suspect in held
        waiting = self.suspect_waiting and holds_deliveries
        if (suspect_held or waiting) and self.clock() < self.until:
            return True
        if suspect_held or waiting:  # past the bound: claim as usual until we hold nothing
            self.spent = True
        self.suspect, self.suspect_waiting, self.until = None, False, None
        return False
