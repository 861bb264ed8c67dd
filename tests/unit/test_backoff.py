"""The equal-jitter exponential curve: delay ∈ [e/2, e], e = min(base·2^(a−1), cap)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kombu_sqlqueue.store import BackoffPolicy


@pytest.mark.parametrize("attempts", range(1, 16))
def test_delays_land_in_the_pinned_range_and_spread(attempts: int) -> None:
    policy = BackoffPolicy()
    rng = random.Random(attempts)
    high = min(2.0 ** (attempts - 1), 3600.0)
    draws = [policy.delay(attempts, rng) for _ in range(400)]
    assert all(high / 2 <= d <= high for d in draws)
    # Jitter, not a constant: both halves of the range are used.
    mid = high * 0.75
    assert sum(d < mid for d in draws) > 100 and sum(d >= mid for d in draws) > 100


def test_cap_is_one_hour_by_default() -> None:
    policy = BackoffPolicy()
    draws = [policy.delay(40) for _ in range(200)]
    assert all(1800 <= d <= 3600 for d in draws)
    assert policy.ceiling(10_000) == 3600


@given(
    base=st.floats(0, 100),
    cap=st.floats(0, 10_000),
    attempts=st.integers(-5, 10_000),
)
def test_any_policy_stays_within_its_cap(base: float, cap: float, attempts: int) -> None:
    policy = BackoffPolicy(base, cap)
    assert 0 <= policy.delay(attempts) <= cap


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(-1, 10)
