"""A redelivered message is delivered alone (kombu_sqlqueue/isolation.py), without a database."""

from __future__ import annotations

from support import Clock

from kombu_sqlqueue.envelope import delivery_tag
from kombu_sqlqueue.isolation import RedeliveryIsolation
from kombu_sqlqueue.store import ClaimedJob


def job(job_id: int, attempts: int = 1, lapsed: bool | None = None) -> ClaimedJob:
    """A claimed job; by default one claimed again (attempts > 1) had its reservation lapse."""
    lapsed = attempts > 1 if lapsed is None else lapsed
    return ClaimedJob(job_id, "q", b"{}", 0, attempts, 5, "tok", None, lapsed)


def tag(j: ClaimedJob) -> str:
    return delivery_tag(j.receipt)


def test_first_deliveries_pass_untouched() -> None:
    iso = RedeliveryIsolation(30)
    jobs = [job(1), job(2)]
    assert iso.select(jobs, holds_deliveries=False) == (jobs, [])
    assert not iso.pausing(set(), holds_deliveries=False)


def test_a_message_requeued_by_its_consumer_is_not_isolated() -> None:
    # reject(requeue=True) or a hand-back: attempts > 1, but its holder lived to settle it.
    iso = RedeliveryIsolation(30)
    jobs = [job(1), job(2, attempts=3, lapsed=False), job(3)]
    assert iso.select(jobs, holds_deliveries=True) == (jobs, [])
    assert not iso.pausing(set(), holds_deliveries=True)


def test_a_redelivered_message_goes_alone_and_claims_pause_while_it_is_held() -> None:
    clock = Clock()
    iso = RedeliveryIsolation(30, clock)
    a, suspect, b = job(1), job(2, attempts=3), job(3)
    deliver, back = iso.select([a, suspect, b], holds_deliveries=False)
    assert deliver == [suspect] and back == [a, b]
    assert iso.pausing({tag(suspect)}, holds_deliveries=True)
    assert not iso.pausing(set(), holds_deliveries=False)  # settled: claims go on
    assert iso.select([a], holds_deliveries=False) == ([a], [])


def test_a_redelivered_message_waits_until_the_channel_holds_nothing_else() -> None:
    iso = RedeliveryIsolation(30, Clock())
    a, suspect = job(1), job(2, attempts=2)
    assert iso.select([a, suspect], holds_deliveries=True) == ([], [a, suspect])
    assert iso.pausing(set(), holds_deliveries=True)
    assert not iso.pausing(set(), holds_deliveries=False)
    deliver, back = iso.select([suspect, a], holds_deliveries=False)
    assert deliver == [suspect] and back == [a]


def test_the_pause_is_bounded_by_the_visibility_timeout_then_claims_go_on() -> None:
    clock = Clock()
    iso = RedeliveryIsolation(30, clock)
    suspect, other = job(2, attempts=2), job(3, attempts=2)
    iso.select([suspect], holds_deliveries=False)
    clock.now += 29
    assert iso.pausing({tag(suspect)}, holds_deliveries=True)
    clock.now += 2  # an aggregator holding it for good: slowed, never stuck
    assert not iso.pausing({tag(suspect)}, holds_deliveries=True)
    # Spent: while the channel still holds something, even a redelivered one is not isolated.
    assert iso.select([other], holds_deliveries=True) == ([other], [])
    # Once it holds nothing, isolation is back.
    assert iso.select([job(4), other], holds_deliveries=False) == ([other], [job(4)])
