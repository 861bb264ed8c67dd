"""What a claim hands out: the rows it reserved, screened by one pure function.

Every store reserves rows its own way (one SQL statement, a lock and a mark, a heap in
memory) and then asks the same questions of each row, in claim order: is it past its
time to live (discarded unconsumed, as AMQP does), past its attempts limit (dead-lettered
in the claim's transaction), or a delivery? :func:`screen` answers them for the SQL store
and the memory store alike; the store only writes what the answer says. Claimed rows are
:class:`ClaimedRow`, not bare tuples, so a column added to the claim has one name.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..exceptions import ClaimLimitExceeded
from .model import MAX_CLAIM, ClaimedJob, reservation_deadline, this_instance
from .names import validate_queue_name

#: Claim rounds at most in one claim whose rows had expired (each round discards at
#: least one; a claim left short by more is followed by the consumer's next poll).
MAX_CLAIM_ROUNDS = 16


#: Hex digits in a claim's reservation token (``secrets.token_hex(16)``).
TOKEN_HEX_DIGITS = 32


def new_claim_token() -> str:
    """A fresh reservation token: every settlement of the claim's deliveries names it."""
    return secrets.token_hex(TOKEN_HEX_DIGITS // 2)


def is_claim_token(token: str) -> bool:
    """True when ``token`` is of this store's claims (a queue format's table signs its
    reservations its own way)."""
    return len(token) == TOKEN_HEX_DIGITS and all(c in "0123456789abcdef" for c in token)


def check_claim(queue: str, n: int) -> None:
    """Refuse a claim of a bad queue name, or of more than :data:`MAX_CLAIM` jobs."""
    validate_queue_name(queue)
    if n > MAX_CLAIM:
        raise ClaimLimitExceeded(
            f"a claim may hand out at most {MAX_CLAIM} jobs; {n} were asked for"
        )


def claim_limit(row_limit: int, claimer_limit: int | None) -> int:
    """The attempts a claimed row may use: the row's ``max_attempts`` or the claimer's,
    whichever is lower."""
    return row_limit if claimer_limit is None else min(row_limit, claimer_limit)


def exhausted_reason(limit: int) -> str:
    """The dead letter's reason for a row a claim found past its attempts limit."""
    return f"max attempts exceeded ({limit} of {limit} used)"


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """One claim's parameters, read once (the clock, a fresh token, this process)."""

    queue: str
    n: int
    now: int
    until: int
    token: str
    holder: str | None = None
    instance: str | None = field(default_factory=this_instance)
    #: ``now`` to the microsecond (a rate limit spaces claims finer than a second).
    now_us: int = 0

    @classmethod
    def of(
        cls, queue: str, n: int, visibility: float, clock: float, holder: str | None
    ) -> ClaimParams:
        """Check the claim (:func:`check_claim`) and fix its parameters at ``clock``."""
        check_claim(queue, n)
        return cls(
            queue,
            int(n),
            int(clock),
            reservation_deadline(clock, visibility),
            new_claim_token(),
            holder,
            now_us=int(clock * 1_000_000),
        )

    def at_us(self, clock: float) -> ClaimParams:
        """The same claim with ``now_us`` read again (a rate limit's clock, read once the
        claim holds the queue's lock); ``now`` and the deadline stay as fixed."""
        return replace(self, now_us=int(clock * 1_000_000))

    def more(self, n: int) -> ClaimParams:
        """The same claim (token, deadline) for ``n`` more rows: a next round."""
        return replace(self, n=n)

    def binds(self) -> dict[str, Any]:
        """The claim statements' bind parameters."""
        return {
            "queue": self.queue,
            "n": self.n,
            "now": self.now,
            "until": self.until,
            "token": self.token,
            "holder": self.holder,
            "instance": self.instance,
        }


class ClaimedRow(NamedTuple):
    """A row as a claim reserved it (its attempts already counting this claim)."""

    id: int
    queue: str
    payload: bytes
    priority: int
    available_at: int
    attempts: int
    max_attempts: int
    uuid: str | None
    expires_at: int | None
    #: The previous reservation lapsed (AMQP's ``redelivered``).
    lapsed: bool

    @classmethod
    def read(cls, row: Any, lapsed: bool) -> ClaimedRow:
        """A claim statement's row (id, queue, payload, priority, available_at,
        attempts, max_attempts, uuid, expires_at); drivers hand payloads back as
        ``bytes`` or ``memoryview``."""
        job_id, queue, payload, priority, available_at, attempts, limit, uuid, expires = row[:9]
        return cls(
            job_id,
            queue,
            bytes(payload),
            priority,
            available_at,
            attempts,
            limit,
            uuid,
            expires,
            bool(lapsed),
        )

    def order(self) -> tuple[int, int, int]:
        """Claim order: higher priority first, then older, then lower id."""
        return (-self.priority, self.available_at, self.id)

    def delivery(self, token: str, limit: int) -> ClaimedJob:
        """This row handed out under ``token`` with ``limit`` attempts."""
        return ClaimedJob(
            self.id,
            self.queue,
            self.payload,
            self.priority,
            self.attempts,
            limit,
            token,
            self.uuid,
            self.lapsed,
        )


@dataclass(slots=True)
class Screened:
    """:func:`screen`'s answer for one round of claimed rows, each in claim order."""

    #: Handed out.
    jobs: list[ClaimedJob] = field(default_factory=list)
    #: Past their attempts limit (with it): dead-letter with :func:`exhausted_reason`.
    exhausted: list[tuple[ClaimedRow, int]] = field(default_factory=list)
    #: Past their time to live: discard unconsumed (not a failure).
    past_ttl: list[ClaimedRow] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """Every row is handed out: nothing for the store to write."""
        return not self.exhausted and not self.past_ttl


def screen(rows: list[ClaimedRow], now: int, token: str, max_attempts: int | None) -> Screened:
    """Sort ``rows`` into claim order and say what becomes of each: past its TTL, past
    the lower of its own and the claimer's attempts limit, or a delivery under
    ``token``. Pure: the store writes what it says."""
    screened = Screened()
    for row in sorted(rows, key=ClaimedRow.order):
        if row.expires_at is not None and row.expires_at <= now:
            screened.past_ttl.append(row)
            continue
        limit = claim_limit(row.max_attempts, max_attempts)
        if row.attempts > limit:
            screened.exhausted.append((row, limit))
        else:
            screened.jobs.append(row.delivery(token, limit))
    return screened
