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

from kombu_sqlqueue.exceptions import InvalidQueueName
from kombu_sqlqueue.store import JobContract, NewJob, QueueControl, Receipt, open_store


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
                time.sleep(0.001)  # a consumer's work: the pause lands mid-queue
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
