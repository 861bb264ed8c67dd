"""The retry backoff curve: equal-jitter exponential, capped.

``delay(a) ∈ [e/2, e]`` with ``e = min(base · 2^(a−1), cap)`` — contract v1's
exponential curve with seed 002's equal jitter, so retries of many jobs that
failed together spread out instead of returning in one thundering herd.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: Exponent clamp: 2**62 seconds already exceeds any sane cap; clamping keeps
#: the arithmetic in float range for absurd attempt counts.
_MAX_EXPONENT = 62


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Base and cap, in seconds, of the equal-jitter exponential backoff."""

    base: float = 1.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0:
            raise ValueError(f"backoff base and cap must be >= 0, got {self.base}, {self.cap}")

    def ceiling(self, attempts: int) -> float:
        """The upper end of the delay range after ``attempts`` attempts."""
        exponent = min(max(attempts, 1) - 1, _MAX_EXPONENT)
        return float(min(self.base * (2.0**exponent), self.cap))

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """A delay drawn uniformly from ``[ceiling/2, ceiling]`` seconds."""
        high = self.ceiling(attempts)
        draw = (rng or random).uniform(0.5, 1.0)
        return high * draw
