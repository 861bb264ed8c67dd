"""Flow control: what a queue's controls (``askr_queue_controls``) let a claim take.

Controls: a pause (for a time, or until resumed), a concurrency limit (at most N jobs
of the queue held at once across every worker, counted in the claim's transaction under
the lock of the queue's row, so racing claims never exceed it) and a rate limit (at most
N jobs handed out per period across every worker, smooth: a generic cell rate algorithm —
a token bucket kept as one number, the theoretical arrival time of the next claim — read
and advanced under the same lock). A queue with no controls
has no row, and its claims are the plain claim, which checks
only that the queue has no row (one index probe): a queue without controls pays nothing
else. A claim of a queue that has a row reads it first, in the claim's transaction, and
takes what :func:`claim_allowance` says. The SQL store and the memory store both
decide by these functions, so they cannot drift apart. Pure: no SQL, no Kombu.
"""

from __future__ import annotations

import hashlib
import math
import re
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
    #: At most so many jobs handed out per period by every worker; None: no limit.
    rate: Rate | None = None
    #: The rate limit's state: when (unix microseconds) the next claim conforms at the
    #: steady rate (``rate_room``); 0 before the first claim.
    rate_tat_us: int = 0
    #: At most this many jobs of one ``concurrency_key`` held at once; None: no such limit.
    key_concurrency: int | None = None

    def paused_at(self, now: int) -> bool:
        """Whether the queue is paused at ``now`` (a pause for a time ends by itself)."""
        return self.paused and (self.resume_at is None or now < self.resume_at)

    def in_force(self, now: int) -> bool:
        """Whether any control still applies at ``now`` (else the row may be dropped)."""
        return self.paused_at(now) or any(
            limit is not None for limit in (self.concurrency, self.rate, self.key_concurrency)
        )


@dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: at most ``count`` jobs per ``period`` seconds, spaced evenly (one every
    ``period / count`` seconds), with up to ``burst`` at once after a quiet spell. Celery's
    ``rate_limit`` is the same shape per worker process (a token bucket of capacity 1)."""

    count: int
    period: float
    burst: int = 1

    @property
    def interval_us(self) -> float:
        """Microseconds between two claims at the steady rate."""
        return self.period * 1e6 / self.count

    @property
    def spelled(self) -> str:
        """The rate as :func:`parse_rate` reads it (``10/s``, ``5/30s``), without the burst."""
        return f"{self.count}/{_PER.get(self.period, f'{self.period:g}s')}"

    def __str__(self) -> str:
        burst = f" (burst {self.burst})" if self.burst > 1 else ""
        return f"{self.spelled}{burst}"


_PER = {1.0: "s", 60.0: "m", 3600.0: "h", 86400.0: "d"}


@dataclass(frozen=True, slots=True)
class Allowance:
    """What a claim of a controlled queue may take, and why it may take no more."""

    #: How many rows it may take.
    rows: int
    #: A concurrency limit (the queue's, or per key) counted it: settling what it takes
    #: frees slots.
    limited: bool = False
    #: A rate limit held it back: seconds until the next claim conforms (None: it did not).
    retry_in: float | None = None


def claim_allowance(
    control: QueueControl | None, now: int, n: int, held: int, now_us: int | None = None
) -> Allowance:
    """What a claim of ``n`` rows may take under ``control`` at ``now`` (unix seconds;
    ``now_us`` the same instant in microseconds, for a rate limit), when ``held`` jobs of
    the queue are held (live reservations, every worker's)."""
    if control is None:
        return Allowance(n)
    if control.paused_at(now):
        return Allowance(0)
    limited = control.concurrency is not None or control.key_concurrency is not None
    rows, retry_in = n, None
    if control.concurrency is not None:
        rows = max(0, min(rows, control.concurrency - held))
    if control.rate is not None and rows > 0:
        at = now * 1_000_000 if now_us is None else now_us
        room = rate_room(control.rate, control.rate_tat_us, at)
        if room < rows:
            rows, retry_in = room, rate_wait(control.rate, control.rate_tat_us, at, room + 1)
    return Allowance(rows, limited, retry_in)


def rate_due(rate: Rate, tat_us: int, now_us: int) -> float:
    """When the next claim is due at the steady rate: the stored due time, but never in
    the past and never more than ``burst`` intervals ahead. Claims at one rate never push
    it further; a due time from a slower rate since changed, or written by a host whose
    clock runs ahead, would otherwise hold every claim back until then."""
    return min(max(tat_us, now_us), now_us + rate.burst * rate.interval_us)


def rate_overdue(rate: Rate, tat_us: int, now_us: int) -> bool:
    """Whether the stored due time is further ahead than claims at ``rate`` ever put it
    (a host whose clock ran ahead wrote it): a claim that reads it writes back the
    bounded one (:func:`rate_due`), so the others are held back one burst at most."""
    return tat_us > now_us + rate.burst * rate.interval_us


def rate_room(rate: Rate, tat_us: int, now_us: int) -> int:
    """How many claims conform at ``now_us`` under ``rate`` whose next claim is due at
    ``tat_us`` (GCRA: the k-th conforms when ``due + (k - 1) * interval`` is at most
    ``(burst - 1) * interval`` ahead of now)."""
    interval = rate.interval_us
    ahead = rate_due(rate, tat_us, now_us) - now_us
    return max(0, math.floor(((rate.burst - 1) * interval - ahead) / interval + 1e-9) + 1)


def rate_wait(rate: Rate, tat_us: int, now_us: int, k: int = 1) -> float:
    """Seconds from ``now_us`` until ``k`` claims conform."""
    interval = rate.interval_us
    due = rate_due(rate, tat_us, now_us) + (k - 1) * interval - (rate.burst - 1) * interval
    return max(0.0, (due - now_us) / 1e6)


def rate_charged(rate: Rate, tat_us: int, now_us: int, taken: int) -> int:
    """The next claim's due time once ``taken`` claims were handed out at ``now_us``."""
    return math.ceil(rate_due(rate, tat_us, now_us) + taken * rate.interval_us)


#: The longest rate period: a day (longer spacing is a schedule, not a rate).
MAX_RATE_PERIOD = 86400.0
_RATE = re.compile(r"^\s*(\d+)\s*(?:/\s*(\d+(?:\.\d+)?)?\s*([smhd])\s*)?$")
_RATE_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_rate(spec: str, burst: int = 1) -> Rate:
    """A rate as Celery spells ``rate_limit`` — ``10/s``, ``100/m``, ``1000/h``, or a plain
    number per second — or with a count of units, ``5/30s``, ``60/15m``."""
    found = _RATE.match(spec) if isinstance(spec, str) else None
    if found is None:
        raise InvalidControl(
            f"a rate is N/s, N/m, N/h, N/d or N per a duration such as 5/30s, got {spec!r}"
        )
    count, units, unit = found.groups()
    period = float(units or 1) * _RATE_UNIT[unit or "s"]
    return check_rate(Rate(int(count), period, burst))


#: The fastest rate: a million a second (the due time is kept in microseconds).
MAX_RATE_PER_SECOND = 1_000_000


def check_rate(rate: Rate) -> Rate:
    """A rate whose count and burst are whole numbers from 1, whose period is whole
    milliseconds from one to a day, and which is at most a million a second."""
    for what, value in (("count", rate.count), ("burst", rate.burst)):
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or not 1 <= value <= MAX_CONCURRENCY:
            raise InvalidControl(
                f"a rate's {what} is a whole number from 1 to {MAX_CONCURRENCY}, got {value!r}"
            )
    period = rate.period
    if (
        isinstance(period, bool)
        or not isinstance(period, (int, float))
        or not (0.001 <= period <= MAX_RATE_PERIOD)
        or abs(period * 1000 - round(period * 1000)) > 1e-6
    ):
        raise InvalidControl(
            f"a rate's period is whole milliseconds from 0.001 to {MAX_RATE_PERIOD:g} "
            f"seconds, got {period!r}"
        )
    if rate.count / period > MAX_RATE_PER_SECOND:
        raise InvalidControl(
            f"a rate is at most {MAX_RATE_PER_SECOND:,} a second, got {rate.count}/{period:g}s"
        )
    return Rate(rate.count, float(period), rate.burst)


#: The largest concurrency limit (an INTEGER column everywhere).
MAX_CONCURRENCY = 2**31 - 1


#: The longest concurrency key (a VARCHAR(255) column: characters on every engine).
MAX_KEY_LENGTH = 255


def check_concurrency_key(key: object) -> str | None:
    """A job's ``concurrency_key``: None, or a non-empty string of at most 255 characters
    (a whole number is taken as its digits)."""
    if key is None:
        return None
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        shown = key if not isinstance(key, str) else f"{key[:40]!r}… ({len(key)} characters)"
        raise InvalidControl(
            f"a concurrency_key is a string of 1 to {MAX_KEY_LENGTH} characters, got {shown}"
        )
    if not _storable(key):
        raise InvalidControl("a concurrency_key is text: no NUL, no lone surrogate")
    return key


def _storable(key: str) -> bool:
    """Text every engine stores as it is: no NUL, and encodable as UTF-8."""
    if "\x00" in key:
        return False
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fit_concurrency_key(key: str) -> str:
    """A key derived from something else (a format's lock key) made one the column holds:
    kept when it is, else its first 200 characters and a digest of the whole (distinct keys
    stay distinct; the same key always fits the same way)."""
    if key and len(key) <= MAX_KEY_LENGTH and _storable(key):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    head = key[:200].encode("utf-8", "replace").decode("utf-8").replace("\x00", "?")
    return f"{head}#{digest}"[:MAX_KEY_LENGTH]


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
