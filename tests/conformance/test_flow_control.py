"""Flow control (``askr_queue_controls``, store/controls.py) on every engine and the
memory store: a pause stops every store's next claim, whatever path the claim takes,
and lets held jobs settle and publishes in; resume drains; bad input changes nothing."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support import Clock

from kombu_sqlqueue.exceptions import InvalidControl, InvalidQueueName
from kombu_sqlqueue.store import JobContract, NewJob, QueueControl, Rate, Receipt, open_store


def job(queue: str = "q", payload: bytes = b"p") -> NewJob:
    return NewJob(queue=queue, payload=payload)


@pytest.fixture
def clock(store: JobContract) -> Clock:
    c = Clock()
    store.clock = c
    return c


@pytest.fixture
def other(db_url: str) -> Iterator[JobContract]:
    """A second store on the same database: another worker's process."""
    s = open_store(db_url)
    yield s
    s.close()


def _ack_and_claim(s: JobContract, held: list[Receipt]) -> list[int]:
    if not held:
        return [j.id for j in s.claim("q", 1, 60).jobs]
    _acked, claimed = s.ack_and_claim(held[0], (), ["q"], 60)
    return [] if claimed is None else [claimed.id]


# Each way a consumer claims: the plain claim, a claim with the last round's acks, and
# a worker's "ack this one, claim the next".
CLAIMS: dict[str, Callable[[JobContract, list[Receipt]], list[int]]] = {
    "claim": lambda s, _held: [j.id for j in s.claim("q", 5, 60).jobs],
    "ack_many_and_claim": lambda s, held: [
        j.id for j in s.ack_many_and_claim(held, "q", 5, 60)[1].jobs
    ],
    "ack_and_claim": lambda s, held: _ack_and_claim(s, held),
}


def test_a_paused_queue_hands_nothing_out_and_still_settles_and_stores(
    store: JobContract,
) -> None:
    store.enqueue_many([job(payload=b"a"), job(payload=b"b"), job("other")])
    (held,) = store.claim("q", 1, 60).jobs
    store.pause("q")
    assert store.claim("q", 5, 60).jobs == []
    assert store.controls() == [QueueControl("q", paused=True, resume_at=None)]
    store.enqueue(job(payload=b"c"))  # publishes are stored
    assert store.ack(held.receipt)  # held jobs settle
    assert [j.queue for j in store.claim("other", 5, 60).jobs] == ["other"]  # others run
    assert store.size("q") == 2
    assert store.resume("q") is True
    assert sorted(j.payload for j in store.claim("q", 5, 60).jobs) == [b"b", b"c"]
    assert store.controls() == []


@pytest.mark.parametrize("path", sorted(CLAIMS))
def test_a_pause_stops_the_next_claim_of_a_store_that_claimed_before_it(
    store: JobContract, other: JobContract, path: str
) -> None:
    """``other`` claimed q plainly (it knew of no control); ``store`` pauses q: the very
    next claim of ``other``, by any path, hands nothing out."""
    claim = CLAIMS[path]
    store.enqueue_many([job(payload=b"%d" % i) for i in range(20)])
    first = other.claim("q", 1, 60).jobs
    assert first
    store.pause("q")
    held = [first[0].receipt]
    assert claim(other, held) == []
    assert claim(other, []) == []
    assert store.resume("q")
    assert claim(other, []) != []


def test_a_pause_for_a_time_ends_by_itself(store: JobContract, clock: Clock) -> None:
    store.enqueue(job())
    store.pause("q", for_seconds=9.5)
    (control,) = store.controls()
    assert control.resume_at == math.ceil(clock.now + 9.5)
    clock.advance(9)
    assert store.claim("q", 1, 60).jobs == []
    clock.advance(1)
    assert len(store.claim("q", 1, 60).jobs) == 1
    assert store.controls() == []  # the claim that found it over ended it
    assert store.resume("q") is False


def test_pausing_again_replaces_the_pause(store: JobContract, clock: Clock) -> None:
    store.pause("q", for_seconds=5)
    store.pause("q")  # until resumed
    clock.advance(60)
    store.enqueue(job())
    assert store.claim("q", 1, 60).jobs == []
    assert store.controls() == [QueueControl("q", paused=True, resume_at=None)]


def test_a_queue_no_one_has_used_may_be_paused(store: JobContract) -> None:
    store.pause("not-yet")
    store.enqueue(job("not-yet"))
    assert store.claim("not-yet", 1, 60).jobs == []
    assert [c.queue for c in store.controls()] == ["not-yet"]


def test_resume_of_a_queue_not_paused_says_so(store: JobContract) -> None:
    assert store.resume("q") is False
    assert store.controls() == []


@pytest.mark.parametrize(
    "for_seconds", [0, -1, math.nan, math.inf, True, 11 * 365 * 24 * 3600, "10m"]
)
def test_a_pause_that_is_not_a_duration_is_refused_and_stores_nothing(
    store: JobContract, for_seconds: object
) -> None:
    with pytest.raises(ValueError, match="a pause lasts"):
        store.pause("q", for_seconds=for_seconds)  # type: ignore[arg-type]
    assert store.controls() == []


def test_a_pause_of_a_bad_queue_name_is_refused(store: JobContract) -> None:
    with pytest.raises(InvalidQueueName):
        store.pause("")
    with pytest.raises(InvalidQueueName):
        store.resume("x" * 10_000)
    assert store.controls() == []


def test_resume_wakes_an_idle_consumer(
    store: JobContract, other: JobContract, engine_name: str
) -> None:
    if engine_name == "mysql":
        pytest.skip("MariaDB has no wake-up: a resumed queue is claimed within a poll")
    store.enqueue(job())
    store.pause("q")
    other.wait_for_jobs(0.01, ["q"])  # the listener (if any) open and listening
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(other.wait_for_jobs(60, ["q"])))
    waiter.start()
    time.sleep(0.5)  # the waiter is in its wait (a wake-up before it would be lost)
    store.resume("q")
    waiter.join(20)
    assert woke == [True]


def test_claims_racing_a_pause_take_nothing_once_it_returned(db_url: str) -> None:
    """Six claimers drain q while the pause lands: no claim that began after pause()
    returned hands anything out, on any store; resume lets them finish the queue."""
    seed = open_store(db_url)
    seed.enqueue_many([job(payload=b"%d" % i) for i in range(3000)])
    paused_at: list[float] = []
    after: list[int] = []
    seen: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def claimer() -> None:
        s = open_store(db_url)
        held: list[Receipt] = []
        try:
            while not stop.is_set():
                began = time.monotonic()
                _acked, claimed = s.ack_many_and_claim(held, "q", 3, 60)
                held = [j.receipt for j in claimed.jobs]
                with lock:
                    seen.extend(j.id for j in claimed.jobs)
                    if paused_at and began > paused_at[0]:
                        after.extend(j.id for j in claimed.jobs)
                time.sleep(0.01)  # a consumer's work: the pause lands mid-queue
                if not claimed.jobs and not paused_at and s.size("q") == 0:
                    return
        finally:
            s.ack_many(held)
            s.close()

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 300 and time.monotonic() < deadline:
            time.sleep(0.001)
        seed.pause("q")
        paused_at.append(time.monotonic())
        time.sleep(0.5)
        count_while_paused = len(seen)
        time.sleep(0.5)
        assert after == []
        assert len(seen) == count_while_paused
        assert 300 <= len(seen) < 3000
        seed.resume("q")
        deadline = time.monotonic() + 60
        while len(seen) < 3000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(seen) == 3000 and len(set(seen)) == 3000
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        seed.close()


# -- concurrency limits ----------------------------------------------------------------------


def test_a_concurrency_limit_caps_what_every_store_holds(
    store: JobContract, other: JobContract, clock: Clock
) -> None:
    other.clock = clock
    store.enqueue_many([job(payload=b"%d" % i) for i in range(6)])
    store.limit("q", 2)
    a = other.claim("q", 5, 60).jobs  # another store, which knew of no control
    assert len(a) == 2
    assert store.claim("q", 5, 60).jobs == []  # waiting: not failed, not charged
    assert other.ack(a[0].receipt)
    (b,) = store.claim("q", 5, 60).jobs  # a slot freed: one more
    assert b.attempts == 1
    clock.advance(60)  # a reservation that lapsed holds no slot (its job is claimable again)
    again = store.claim("q", 5, 60).jobs
    assert len(again) == 2 and {j.id for j in again} & {a[1].id, b.id}
    assert store.controls() == [QueueControl("q", concurrency=2)]


def test_changing_a_limit_takes_effect_at_the_next_claim(store: JobContract) -> None:
    store.enqueue_many([job(payload=b"%d" % i) for i in range(6)])
    store.limit("q", 1)
    assert len(store.claim("q", 5, 60).jobs) == 1
    store.limit("q", 3)
    assert len(store.claim("q", 5, 60).jobs) == 2
    store.limit("q", None)
    assert store.controls() == []
    assert len(store.claim("q", 5, 60).jobs) == 3


def test_a_limit_and_a_pause_are_kept_apart(store: JobContract) -> None:
    store.enqueue_many([job(payload=b"%d" % i) for i in range(4)])
    store.limit("q", 1)
    store.pause("q")
    assert store.controls() == [QueueControl("q", paused=True, concurrency=1)]
    assert store.claim("q", 5, 60).jobs == []
    assert store.resume("q")
    assert store.controls() == [QueueControl("q", concurrency=1)]  # the limit stays
    assert len(store.claim("q", 5, 60).jobs) == 1
    store.limit("q", None)
    assert store.controls() == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, 2**31, "3", None])
def test_a_limit_that_is_not_a_positive_whole_number_is_refused(
    store: JobContract, limit: object
) -> None:
    if limit is None:  # None clears a limit: of a queue that has none, nothing happens
        store.limit("q", None)
    else:
        with pytest.raises(ValueError, match="a concurrency limit is a whole number"):
            store.limit("q", limit)  # type: ignore[arg-type]
    assert store.controls() == []


def ledger_claimer(url: str, queue: str, batch: int, work: float) -> list[tuple[float, float]]:
    """Drain ``queue`` (its last batch acked with the next claim every other round):
    for each job, the moment its claim returned and the moment before its ack (inside
    the time it was held)."""
    s = open_store(url)
    ledger: list[tuple[float, float]] = []
    try:
        held: list[Receipt] = []
        began: float = 0.0
        empty = 0
        rounds = 0
        while empty < 20:
            rounds += 1
            ended = time.time()
            ledger += [(began, ended)] * len(held)
            if rounds % 2:
                _acked, result = s.ack_many_and_claim(held, queue, batch, 60)
            else:
                s.ack_many(held)
                result = s.claim(queue, batch, 60)
            began = time.time()
            held = [j.receipt for j in result.jobs]
            if held:
                empty = 0
                time.sleep(work)
            else:
                empty += 1
                time.sleep(0.01)
        return ledger
    finally:
        s.close()


def most_at_once(ledger: list[tuple[float, float]]) -> int:
    """The most intervals of ``ledger`` open at one moment."""
    edges = sorted([(start, 1) for start, _ in ledger] + [(end, -1) for _, end in ledger])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_racing_claimers_in_separate_processes_never_hold_more_than_the_limit(
    db_url: str, engine_name: str
) -> None:
    """Six claimers (processes; threads on the memory store, which one process holds)
    drain 300 jobs under a limit of 3, claiming up to 2 at a time: the ledger of their
    holds never has more than 3 open at once, and every job runs once."""
    import multiprocessing

    seed = open_store(db_url)
    seed.enqueue_many([job(payload=b"%d" % i) for i in range(300)])
    seed.limit("q", 3)
    args = (db_url, "q", 2, 0.005)
    try:
        if engine_name == "memory":
            results: list[list[tuple[float, float]]] = []
            threads = [
                threading.Thread(target=lambda: results.append(ledger_claimer(*args)))
                for _ in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        else:
            with multiprocessing.get_context("spawn").Pool(6) as pool:
                pending = [pool.apply_async(ledger_claimer, args) for _ in range(6)]
                results = [p.get(timeout=120) for p in pending]
        ledger = [hold for result in results for hold in result]
        assert len(ledger) == 300
        assert 2 <= most_at_once(ledger) <= 3
        assert seed.size("q") == 0
    finally:
        seed.close()


@pytest.mark.parametrize("settle", ["ack", "ack_many", "release", "dead_letter"])
def test_a_freed_slot_wakes_a_consumer_waiting_on_the_limit(
    store: JobContract, other: JobContract, engine_name: str, settle: str
) -> None:
    """The held job of a queue at its limit settles: an idle consumer of the queue is
    woken at once (PostgreSQL: a NOTIFY at the settlement's commit), not at its poll."""
    if engine_name == "mysql":
        pytest.skip("MariaDB has no wake-up: a freed slot is claimed within a poll")
    store.enqueue_many([job(payload=b"1"), job(payload=b"2")])
    store.limit("q", 1)
    (held,) = store.claim("q", 5, 60).jobs
    assert other.claim("q", 5, 60).jobs == []  # at the limit
    other.wait_for_jobs(0.01, ["q"])  # the listener (if any) open and listening
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(other.wait_for_jobs(60, ["q"])))
    waiter.start()
    time.sleep(0.5)  # the waiter is in its wait
    receipt = held.receipt
    if settle == "ack":
        assert store.ack(receipt)
    elif settle == "ack_many":
        assert store.ack_many([receipt]) == {receipt}
    elif settle == "release":
        assert store.release(receipt, delay=30)
    else:
        assert store.dead_letter(receipt, "boom")
    waiter.join(20)
    assert woke == [True]
    assert len(other.claim("q", 5, 60).jobs) == 1


def test_a_worker_over_several_controlled_queues_claims_each_under_its_control(
    store: JobContract,
) -> None:
    """``ack_and_claim`` over queues that have controls (the bridge's worker: ``--queue
    b,a``): b is paused, a is limited to 1 — the ack frees a's slot for the next job."""
    store.enqueue_many([job("a"), job("a"), job("b")])
    store.limit("a", 1)
    store.pause("b")
    (first,) = store.claim("a", 5, 60).jobs
    acked, after = store.ack_and_claim(first.receipt, (), ["b", "a"], 60)
    assert acked and after is not None and after.queue == "a"
    acked, last = store.ack_and_claim(after.receipt, (), ["b", "a"], 60)
    assert acked and last is None
    assert store.size("b") == 1


# -- rate limits -------------------------------------------------------------------------


def test_a_rate_limit_spaces_claims_and_says_when_the_next_is_due(
    store: JobContract, clock: Clock
) -> None:
    """10/s, burst 1: one job a tenth of a second, whatever a claim asks for; a claim held
    back says when the next job may be claimed; jobs past the rate wait, uncharged."""
    store.enqueue_many([job(payload=b"%d" % i) for i in range(20)])
    store.rate_limit("q", Rate(10, 1.0))
    first = store.claim("q", 5, 60)
    assert len(first.jobs) == 1 and first.retry_in == pytest.approx(0.1)
    held_back = store.claim("q", 5, 60)
    assert held_back.jobs == [] and held_back.retry_in == pytest.approx(0.1)
    clock.advance(0.05)
    assert store.claim("q", 5, 60).retry_in == pytest.approx(0.05)
    clock.advance(0.05)
    assert len(store.claim("q", 5, 60).jobs) == 1
    clock.advance(5.0)  # a quiet spell earns no burst beyond the one allowed
    assert len(store.claim("q", 5, 60).jobs) == 1
    waiting = [j for j in store.claim("q", 20, 60).jobs]  # nothing more yet
    assert waiting == []
    clock.advance(1.0)
    assert len(store.claim("q", 20, 60).jobs) == 1  # burst 1: spaced, never bunched
    assert store.size("q") == 16
    (control,) = store.controls()
    assert control.rate == Rate(10, 1.0) and control.concurrency is None


def test_a_burst_lets_that_many_out_at_once_after_a_quiet_spell(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue_many([job(payload=b"%d" % i) for i in range(30)])
    store.rate_limit("q", Rate(60, 60.0, burst=5))
    assert len(store.claim("q", 10, 60).jobs) == 5
    assert store.claim("q", 10, 60).retry_in == pytest.approx(1.0)
    clock.advance(2.0)
    assert len(store.claim("q", 10, 60).jobs) == 2
    clock.advance(60.0)
    assert len(store.claim("q", 10, 60).jobs) == 5


def test_rows_the_claim_does_not_hand_out_do_not_spend_the_rate(
    store: JobContract, clock: Clock
) -> None:
    """An exhausted row dead-lettered or an expired one discarded by a rate-limited claim
    is no work handed out: the rate is spent by what the claim returns."""
    store.enqueue_many([job(), job()])
    store.rate_limit("q", Rate(1, 1.0))
    assert store.claim("q", 5, 60).jobs != []
    clock.advance(1.0)
    empty = store.claim("q", 5, 60)  # one left: claimed
    assert len(empty.jobs) == 1
    clock.advance(1.0)
    nothing = store.claim("q", 5, 60)  # an empty queue spends nothing
    assert nothing.jobs == [] and nothing.retry_in is None
    store.enqueue(job())
    assert len(store.claim("q", 5, 60).jobs) == 1


def test_a_rate_and_a_concurrency_limit_hold_together(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(payload=b"%d" % i) for i in range(10)])
    store.limit("q", 2)
    store.rate_limit("q", Rate(100, 1.0, burst=10))
    assert len(store.claim("q", 10, 60).jobs) == 2  # the concurrency limit is the lesser
    assert store.claim("q", 10, 60).jobs == []
    store.limit("q", None)
    assert len(store.claim("q", 10, 60).jobs) == 8  # what the burst has left
    store.rate_limit("q", None)
    assert store.controls() == []  # nothing in force: the row goes, claims are plain


def test_a_rate_limit_a_store_has_not_seen_holds_its_next_claim(
    store: JobContract, other: JobContract
) -> None:
    store.enqueue_many([job(payload=b"%d" % i) for i in range(5)])
    assert len(store.claim("q", 1, 60).jobs) == 1  # a plain claim before the limit
    other.rate_limit("q", Rate(1, 3600.0))
    assert len(store.claim("q", 5, 60).jobs) == 1
    assert store.claim("q", 5, 60).jobs == []


@pytest.mark.parametrize(
    "rate",
    [
        Rate(0, 1.0),
        Rate(-1, 1.0),
        Rate(1, 0.0),
        Rate(1, -1.0),
        Rate(1, float("nan")),
        Rate(1, float("inf")),
        Rate(1, 86401.0),
        Rate(1, 1.0, burst=0),
        Rate(2**31, 1.0),
        Rate(True, 1.0),
        Rate(1.5, 1.0),  # type: ignore[arg-type]
    ],
)
def test_a_rate_that_is_not_one_is_refused_and_stores_nothing(
    store: JobContract, rate: Rate
) -> None:
    with pytest.raises(InvalidControl):
        store.rate_limit("q", rate)
    assert store.controls() == []


def rate_claimer(url: str, queue: str, jobs: int) -> list[float]:
    """Claim ``queue`` one job at a time (acked at once) until ``jobs`` were claimed by
    everyone or 60 s pass: the moment each of this claimer's claims returned a job."""
    s = open_store(url)
    claimed_at: list[float] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            result = s.claim(queue, 3, 60)
            if result.jobs:
                claimed_at += [time.time()] * len(result.jobs)
                s.ack_many([j.receipt for j in result.jobs])
            elif s.size(queue) == 0:
                break
            else:
                time.sleep(min(result.retry_in or 0.01, 0.05))
        return claimed_at
    finally:
        s.close()


def test_racing_claimers_in_separate_processes_never_pass_the_rate(
    db_url: str, engine_name: str
) -> None:
    """Four claimers (processes; threads on the memory store) drain 60 jobs limited to
    40/s: however they race, the jobs come out no faster than the rate — 60 take at
    least (60 - 1) / 40 s, and no half-second holds more than 20 + 1."""
    import multiprocessing

    rate = Rate(40, 1.0)
    seed = open_store(db_url)
    seed.enqueue_many([job(payload=b"%d" % i) for i in range(60)])
    seed.rate_limit("q", rate)
    args = (db_url, "q", 60)
    try:
        if engine_name == "memory":
            results: list[list[float]] = []
            threads = [
                threading.Thread(target=lambda: results.append(rate_claimer(*args)))
                for _ in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        else:
            with multiprocessing.get_context("spawn").Pool(4) as pool:
                pending = [pool.apply_async(rate_claimer, args) for _ in range(4)]
                results = [p.get(timeout=120) for p in pending]
        times = sorted(t for result in results for t in result)
        assert len(times) == 60 and seed.size("q") == 0
        # The claims' own clocks spaced them; these are when the claims returned, up to a
        # transaction later: a few milliseconds of slack.
        assert times[-1] - times[0] >= (60 - 1) / 40 - 0.05
        most = max(sum(1 for t in times[i:] if t < start + 0.5) for i, start in enumerate(times))
        assert most <= 0.5 * 40 + 1 + 1
    finally:
        seed.close()


def test_a_claim_held_back_by_the_rate_waits_no_longer_than_it_must(
    store: JobContract,
) -> None:
    """What a consumer's wait is capped by: the claim says how long until the next job."""
    store.enqueue_many([job(), job()])
    store.rate_limit("q", Rate(4, 1.0))
    assert len(store.claim("q", 2, 60).jobs) == 1
    retry_in = store.claim("q", 2, 60).retry_in
    assert retry_in is not None and 0 < retry_in <= 0.25
    time.sleep(retry_in + 0.01)
    assert len(store.claim("q", 2, 60).jobs) == 1


def test_a_controls_table_from_before_rate_limits_gains_their_columns(
    db_url: str, engine_name: str
) -> None:
    """askr_queue_controls shipped without the rate columns: a store opened on such a
    table adds them (nullable, additive) and keeps the controls it holds."""
    if engine_name == "memory":
        pytest.skip("the in-memory store has no tables from an earlier release")
    import sqlalchemy as sa

    from kombu_sqlqueue.store import JobStore

    first = JobStore(db_url)
    first.pause("q")
    engine = sa.create_engine(first.url)
    first.close()
    with engine.begin() as conn:
        for column in (
            "rate_count", "rate_period_ms", "rate_burst", "rate_tat_us", "key_concurrency",
        ):  # fmt: skip
            conn.exec_driver_sql(f"ALTER TABLE askr_queue_controls DROP COLUMN {column}")
    engine.dispose()
    store = JobStore(db_url)
    try:
        (control,) = store.controls()
        assert control.paused and control.rate is None
        store.rate_limit("q", Rate(5, 1.0))
        assert [c.rate for c in store.controls()] == [Rate(5, 1.0)]
    finally:
        store.close()


def test_a_faster_rate_takes_over_at_once(store: JobContract, clock: Clock) -> None:
    """A slow rate's next job is due far ahead; set a faster one and that due time is
    the new rate's, not the old one's (never more than a burst of intervals ahead)."""
    store.enqueue_many([job(payload=b"%d" % i) for i in range(5)])
    store.rate_limit("q", Rate(1, 86400.0))
    assert len(store.claim("q", 5, 60).jobs) == 1
    store.rate_limit("q", Rate(10, 1.0))
    clock.advance(0.1)
    assert len(store.claim("q", 5, 60).jobs) == 1


def test_a_host_whose_clock_runs_ahead_holds_the_others_back_one_interval_at_most(
    store: JobContract, clock: Clock, other: JobContract
) -> None:
    """The rate is kept by the claimers' clocks: a host five minutes ahead that claims
    sets the next due time by its clock, which the others read as at most one burst of
    intervals ahead of theirs."""
    ahead = Clock(clock.now + 300)
    other.clock = ahead
    store.enqueue_many([job(payload=b"%d" % i) for i in range(5)])
    store.rate_limit("q", Rate(2, 1.0))
    assert len(other.claim("q", 1, 60).jobs) == 1
    held_back = store.claim("q", 1, 60)
    assert held_back.jobs == [] and held_back.retry_in is not None
    assert held_back.retry_in <= 0.5 + 1e-6
    clock.advance(0.5)
    assert len(store.claim("q", 1, 60).jobs) == 1


def test_a_stored_rate_that_is_not_one_is_ignored_not_fatal(
    store: JobContract, engine_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A row written by hand with a rate of 0 a period: the queue is claimed as if it had
    no rate (said once a read, at warning), not refused forever."""
    if engine_name == "memory":
        pytest.skip("the in-memory store's controls are checked objects, not rows")
    import sqlalchemy as sa

    store.enqueue_many([job(), job()])
    store.rate_limit("q", Rate(5, 1.0))
    engine = sa.create_engine(store.url)  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE askr_queue_controls SET rate_count = 0, rate_period_ms = 0")
    engine.dispose()
    with caplog.at_level("WARNING"):
        assert len(store.claim("q", 5, 60).jobs) == 2
    assert "ignoring its stored rate limit" in caplog.text


# -- per-key concurrency -----------------------------------------------------------------


def keyed(key: str | None, payload: bytes = b"p") -> NewJob:
    return NewJob(queue="q", payload=payload, concurrency_key=key)


def test_a_per_key_limit_holds_back_a_busy_key_and_claims_past_it(store: JobContract) -> None:
    """One at a time per key: a claim takes the first job of each key and the keyless
    ones, skipping the rest of a busy key (waiting, uncharged); settling frees the key."""
    ids = store.enqueue_many(
        [keyed("a", b"a1"), keyed("a", b"a2"), keyed("b", b"b1"), keyed(None, b"n1"),
         keyed("a", b"a3"), keyed("b", b"b2")]
    )  # fmt: skip
    store.key_limit("q", 1)
    first = store.claim("q", 10, 60).jobs
    assert sorted(j.payload for j in first) == [b"a1", b"b1", b"n1"]
    assert store.claim("q", 10, 60).jobs == []
    (a1,) = [j for j in first if j.payload == b"a1"]
    assert store.ack(a1.receipt)
    assert [j.payload for j in store.claim("q", 10, 60).jobs] == [b"a2"]
    waiting = [store.get_job(job_id) for job_id in (ids[4], ids[5])]
    assert [row["attempts"] for row in waiting if row] == [0, 0]  # never charged
    (control,) = store.controls()
    assert control.key_concurrency == 1 and control.concurrency is None
    store.key_limit("q", None)
    assert sorted(j.payload for j in store.claim("q", 10, 60).jobs) == [b"a3", b"b2"]
    assert store.controls() == []


def test_a_per_key_limit_counts_every_store_s_holds(store: JobContract, other: JobContract) -> None:
    store.enqueue_many([keyed("k", b"%d" % i) for i in range(6)])
    store.key_limit("q", 2)
    assert len(store.claim("q", 1, 60).jobs) == 1
    assert len(other.claim("q", 5, 60).jobs) == 1
    assert store.claim("q", 5, 60).jobs == [] and other.claim("q", 5, 60).jobs == []


def test_a_per_key_and_a_queue_limit_hold_together(store: JobContract) -> None:
    store.enqueue_many([keyed(k, b"%s%d" % (k.encode(), i)) for i in range(3) for k in "abc"])
    store.key_limit("q", 2)
    store.limit("q", 4)
    assert len(store.claim("q", 10, 60).jobs) == 4
    store.limit("q", None)
    assert len(store.claim("q", 10, 60).jobs) == 2  # 2 per key of 3 keys: 6 in all


@pytest.mark.parametrize("key", ["", "x" * 256, "a\x00b", "a\ud800b", 3.5, b"bytes", ["k"]])
def test_a_concurrency_key_that_is_not_one_is_refused_and_nothing_stored(
    store: JobContract, key: object
) -> None:
    with pytest.raises(InvalidControl, match="concurrency_key"):
        store.enqueue(NewJob(queue="q", payload=b"p", concurrency_key=key))  # type: ignore[arg-type]
    assert store.size("q") == 0


def test_a_key_of_the_column_s_length_in_any_script_is_kept_whole(store: JobContract) -> None:
    key = "ключ-" + "é" * 240 + "🔑" * 10
    assert len(key) == 255
    store.enqueue(keyed(key))
    store.key_limit("q", 1)
    (claimed,) = store.claim("q", 1, 60).jobs
    assert store.get_job(claimed.id)["concurrency_key"] == key  # type: ignore[index]


def keyed_claimer(url: str, batch: int, work: float) -> list[tuple[str, float, float]]:
    """Drain ``q``: for each job, its key, the moment its claim returned and the moment
    before its ack."""
    s = open_store(url)
    ledger: list[tuple[str, float, float]] = []
    try:
        empty = 0
        while empty < 20:
            result = s.claim("q", batch, 60)
            began = time.time()
            if not result.jobs:
                empty += 1
                time.sleep(0.01)
                continue
            empty = 0
            time.sleep(work)
            ended = time.time()
            ledger += [(j.payload.decode().split(":")[0], began, ended) for j in result.jobs]
            s.ack_many([j.receipt for j in result.jobs])
        return ledger
    finally:
        s.close()


def test_racing_claimers_in_separate_processes_never_hold_more_of_a_key_than_its_limit(
    db_url: str, engine_name: str
) -> None:
    """Six claimers (processes; threads on the memory store) drain 160 jobs of four keys
    under a per-key limit of 2, claiming up to 3 at a time: no key ever has more than 2
    open holds in the ledger, while the keys run side by side."""
    import multiprocessing

    seed = open_store(db_url)
    seed.enqueue_many(
        [keyed(k, b"%s:%d" % (k.encode(), i)) for i in range(40) for k in ("a", "b", "c", "d")]
    )
    seed.key_limit("q", 2)
    args = (db_url, 3, 0.005)
    try:
        if engine_name == "memory":
            results: list[list[tuple[str, float, float]]] = []
            threads = [
                threading.Thread(target=lambda: results.append(keyed_claimer(*args)))
                for _ in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        else:
            with multiprocessing.get_context("spawn").Pool(6) as pool:
                pending = [pool.apply_async(keyed_claimer, args) for _ in range(6)]
                results = [p.get(timeout=120) for p in pending]
        ledger = [hold for result in results for hold in result]
        assert len(ledger) == 160 and seed.size("q") == 0
        for key in "abcd":
            assert most_at_once([(b, e) for k, b, e in ledger if k == key]) <= 2, key
        assert most_at_once([(b, e) for _k, b, e in ledger]) > 2  # keys side by side
    finally:
        seed.close()


def test_a_keyed_claim_says_a_lapsed_job_it_takes_was_redelivered(
    store: JobContract, clock: Clock
) -> None:
    """A1 (key a) and B1 (key b) held briefly, A2 (key a) held long: once A1 and B1 lapse,
    key a is still busy, so the claim takes B1 — and says B1 was redelivered."""
    store.enqueue_many([keyed("a", b"A1"), keyed("b", b"B1"), keyed("a", b"A2")])
    assert len(store.claim("q", 2, 1).jobs) == 2
    assert [j.payload for j in store.claim("q", 1, 100).jobs] == [b"A2"]
    store.key_limit("q", 1)
    clock.advance(10)
    assert [(j.payload, j.lapsed) for j in store.claim("q", 1, 60).jobs] == [(b"B1", True)]


def test_a_keyed_claim_takes_no_more_than_asked_past_expired_and_exhausted_rows(
    store: JobContract, clock: Clock
) -> None:
    """Rounds that meet an expired or an exhausted row go on, and still take no more than
    the claim asked for (nor than the queue's limit)."""
    store.enqueue(NewJob(queue="q", payload=b"E", concurrency_key="a", expires_in=1))
    clock.advance(5)
    store.enqueue(NewJob(queue="q", payload=b"X", concurrency_key="a", max_attempts=1, attempts=1))
    store.enqueue_many([keyed("a", b"A"), keyed("b", b"B"), keyed("c", b"C")])
    store.key_limit("q", 5)
    store.limit("q", 2)
    result = store.claim("q", 2, 60)
    assert sorted(j.payload for j in result.jobs) == [b"A", b"B"]
    assert (result.expired, result.dead_lettered) == (1, 1)


def test_a_retried_dead_letter_keeps_its_key(store: JobContract, engine_name: str) -> None:
    if engine_name == "memory":
        pytest.skip("the in-memory store has no failed-jobs admin to retry with")
    from kombu_sqlqueue.store.admin import ContractAdmin

    store.enqueue(keyed("acct-9", b"x"))
    (held,) = store.claim("q", 1, 60).jobs
    assert store.dead_letter(held.receipt, "boom")
    (dead,) = store.dead_letters()
    assert ContractAdmin(store).retry_failed([dead.id]) == 1  # type: ignore[arg-type]
    (again,) = store.claim("q", 1, 60).jobs
    assert store.get_job(again.id)["concurrency_key"] == "acct-9"  # type: ignore[index]
