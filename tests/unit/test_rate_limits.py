"""store/controls.py's rate limit: Celery's spelling parsed, bad ones refused by name,
and the rule itself (GCRA), checked against its definition over any run of claims."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kombu_sqlqueue.exceptions import ConfigurationError, InvalidControl
from kombu_sqlqueue.options import TransportOptions
from kombu_sqlqueue.store.controls import (
    QueueControl,
    Rate,
    claim_allowance,
    parse_rate,
    rate_charged,
    rate_room,
)


@pytest.mark.parametrize(
    ("spec", "rate"),
    [
        ("10/s", Rate(10, 1.0)),
        ("100/m", Rate(100, 60.0)),
        ("1000/h", Rate(1000, 3600.0)),
        ("5/d", Rate(5, 86400.0)),
        ("7", Rate(7, 1.0)),  # Celery: a plain number is per second
        (" 5 / 30s ", Rate(5, 30.0)),
        ("60/15m", Rate(60, 900.0)),
        ("3/1.5s", Rate(3, 1.5)),
    ],
)
def test_rates_are_spelled_as_celery_spells_rate_limit(spec: str, rate: Rate) -> None:
    assert parse_rate(spec) == rate


@pytest.mark.parametrize(
    "spec", ["", "0/s", "-1/s", "1/0s", "10/x", "10/", "/s", "ten/s", "1e3/s", "10/s/s",
             "1/2d", "10 per second", "1/0.0001s", "99999999999/s", "5/0.0015s",
             "2000001/s"],
)  # fmt: skip
def test_a_rate_that_is_not_one_is_a_named_error(spec: str) -> None:
    with pytest.raises(InvalidControl, match="rate"):
        parse_rate(spec)


def test_a_rate_says_itself_as_it_was_spelled() -> None:
    assert [str(parse_rate(s)) for s in ("10/s", "100/m", "5/30s")] == ["10/s", "100/m", "5/30s"]
    assert str(parse_rate("10/s", burst=4)) == "10/s (burst 4)"


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 50),
    period=st.sampled_from([0.5, 1.0, 60.0]),
    burst=st.integers(1, 8),
    claims=st.lists(
        st.tuples(st.integers(0, 400_000), st.integers(1, 20)), min_size=1, max_size=60
    ),
)
def test_no_window_of_claims_passes_the_rate(
    count: int, period: float, burst: int, claims: list[tuple[int, int]]
) -> None:
    """However claims come (gaps in microseconds, sizes), what they take in any window
    [t1, t2] is at most burst + (t2 - t1) / interval — GCRA's promise — and a claim at a
    conforming moment takes at least one."""
    rate = Rate(count, period, burst)
    now, tat = 1_800_000_000_000_000, 0
    taken: list[tuple[int, int]] = []
    for gap, n in claims:
        now += gap
        room = rate_room(rate, tat, now)
        control = QueueControl("q", rate=rate, rate_tat_us=tat)
        allowed = claim_allowance(control, now // 1_000_000, n, 0, now)
        assert allowed.rows == min(n, room)
        assert (allowed.retry_in is None) == (room >= n)
        if tat <= now:
            assert allowed.rows >= 1  # the bucket has a token: it is handed out
        if allowed.rows:
            tat = rate_charged(rate, tat, now, allowed.rows)
            taken.append((now, allowed.rows))
    interval = rate.interval_us
    for i, (start, _) in enumerate(taken):
        total = 0
        for at, rows in taken[i:]:
            total += rows
            assert total <= burst + math.floor((at - start) / interval + 1e-6), (start, at)


def test_queue_options_declare_limits_from_code() -> None:
    options = TransportOptions.from_mapping(
        {"queue_options": {"emails": {"concurrency": 2, "rate_limit": "10/m"}, "plain": {}}}
    )
    assert options.for_queue("emails").concurrency == 2
    assert options.for_queue("emails").rate_limit == Rate(10, 60.0)
    assert list(options.limits()) == ["emails"]
    numeric = TransportOptions.from_mapping({"queue_options": {"q": {"rate_limit": 5}}})
    assert numeric.for_queue("q").rate_limit == Rate(5, 1.0)


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": "2"}, "concurrency"),
        ({"rate_limit": "10/fortnight"}, "rate_limit"),
        ({"rate_limit": 0}, "rate_limit"),
    ],
)
def test_a_declared_limit_that_is_not_one_is_a_configuration_error(
    raw: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        TransportOptions.from_mapping({"queue_options": {"q": raw}})


def test_a_bad_rate_on_the_command_line_says_what_is_wrong_with_it() -> None:
    from support import kombu_sqlqueue_cli

    url = "sqlqueue+sqlite:///:memory:"
    cases = {
        ("--rate", "10/x"): "a rate is N/s",
        ("--rate", "10/s", "--burst", "0"): "burst",
        ("--rate", "5/0.0015s"): "whole milliseconds",
        ("--concurrency", "two"): "--concurrency takes a whole number",
        ("--rate", "off", "--burst", "3"): "--burst goes with --rate",
    }
    for args, said in cases.items():
        done = kombu_sqlqueue_cli("limit", url, "q", *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
