"""Acks written in batches (kombu_sqlqueue/acks.py), over the in-memory store: a delivery
round's acks in one statement, a sporadic ack at once, a stale ack in a batch alone in
changing nothing, a refused batch kept and written later, the batch size a bound."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kombu import Connection, Consumer, Message, Producer, Queue

from kombu_sqlqueue.acks import AckBatcher
from kombu_sqlqueue.exceptions import InvalidQueueName, StoreFullError
from kombu_sqlqueue.qos import Held, PendingSettlements, Settlement
from kombu_sqlqueue.store import ClaimResult, JobContract, MemoryJobStore, NewJob, Receipt


class Recording:
    """A store that records its ack writes, and refuses them while ``full`` is set."""

    def __init__(self, store: MemoryJobStore) -> None:
        self.store = store
        self.full = False
        self.singles: list[int] = []
        self.batches: list[list[int]] = []
        self.with_claim: list[list[int]] = []  # acks written with a claim

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def ack(self, receipt: Receipt) -> bool:
        if self.full:
            raise StoreFullError("database memory://x is full")
        self.singles.append(receipt.job_id)
        return self.store.ack(receipt)

    def ack_many(self, receipts: list[Receipt]) -> set[Receipt]:
        if self.full:
            raise StoreFullError("database memory://x is full")
        self.batches.append([r.job_id for r in receipts])
        return self.store.ack_many(receipts)

    def ack_many_and_claim(
        self, receipts: list[Receipt], queue: str, n: int, visibility: float, limit: int | None
    ) -> tuple[set[Receipt], ClaimResult]:
        self.with_claim.append([r.job_id for r in receipts])  # tried, written or not
        if self.full:
            raise StoreFullError("database memory://x is full")
        return self.store.ack_many_and_claim(receipts, queue, n, visibility, limit)


def publish(conn: Connection, count: int) -> None:
    producer = Producer(conn.channel())
    for n in range(count):
        producer.publish({"n": n}, routing_key="acks", declare=[Queue("acks")])


def recording_on(conn: Connection) -> Recording:
    """Records the transport's ack statements from now on."""
    recording = Recording(conn.transport.store)
    conn.transport.store = recording
    return recording


@contextmanager
def drained_acking(conn: Connection, count: int) -> Iterator[None]:
    """One delivery round of ``count`` messages, each acked in its callback; the consumer
    is still open in the ``with`` block."""

    def on_message(_body: Any, message: Message) -> None:
        message.ack()

    with Consumer(conn, [Queue("acks")], callbacks=[on_message], prefetch_count=count):
        conn.drain_events(timeout=5)
        yield


def test_the_acks_of_one_delivery_round_are_written_in_one_statement(url: str) -> None:
    with Connection(f"sqlqueue+{url}") as conn:
        publish(conn, 10)
        recording = recording_on(conn)
        with drained_acking(conn, 10):
            # Written when drain_events returned: none left for another reader to see.
            assert recording.store.backlog("acks").total == 0
        # With the next round's claim, which found the queue empty.
        assert recording.singles == [] and recording.batches == []
        assert len(recording.with_claim) == 1
        assert sorted(recording.with_claim[0]) == list(range(1, 11))
        assert conn.transport.acks.batched == 10


def test_a_consumer_that_acks_is_handed_round_after_round_each_claim_writing_its_acks(
    url: str,
) -> None:
    """Prefetch 1, acked in the callback: one drain_events delivers the backlog a round at a
    time, each round's claim writing the acks of the round before (one write per message,
    not two), and returns with every ack written."""
    with Connection(f"sqlqueue+{url}") as conn:
        publish(conn, 5)
        recording = recording_on(conn)
        with drained_acking(conn, 1):
            assert recording.store.backlog("acks").total == 0
        assert recording.with_claim == [[1], [2], [3], [4], [5]]
        assert recording.singles == [] and recording.batches == []


def test_a_consumer_that_holds_its_messages_is_handed_one_round(url: str) -> None:
    got: list[Message] = []
    with Connection(f"sqlqueue+{url}") as conn:
        publish(conn, 5)
        with Consumer(
            conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)], prefetch_count=2
        ):
            conn.drain_events(timeout=5)
            assert len(got) == 2  # no room freed: no second round


def test_a_sporadic_ack_is_written_before_ack_returns(url: str) -> None:
    got: list[Message] = []
    # A burst is acks within ack_flush_interval of the last written: 60 s, so that the
    # second ack below is one however slowly this test runs.
    with Connection(f"sqlqueue+{url}", transport_options={"ack_flush_interval": 60}) as conn:
        publish(conn, 2)
        recording = Recording(conn.transport.store)
        conn.transport.store = recording
        with Consumer(
            conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)], prefetch_count=2
        ):
            conn.drain_events(timeout=5)
            assert len(got) == 2
            got[0].ack()  # outside any delivery round, none written just before: at once
            assert recording.singles == [1] and recording.store.backlog("acks").total == 1
            got[1].ack()  # just after another: held, written by the batcher's thread
            conn.transport.acks.flush()
            assert recording.store.backlog("acks").total == 0


def test_acks_held_at_the_next_claim_are_written_in_its_transaction(url: str) -> None:
    """Acks made outside a delivery round (a Celery worker's, as its tasks finish) and still
    held when the consumer claims again are written by the claim's own transaction."""
    got: list[Message] = []
    with Connection(f"sqlqueue+{url}", transport_options={"ack_flush_interval": 60}) as conn:
        publish(conn, 4)
        recording = recording_on(conn)
        with Consumer(
            conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)], prefetch_count=2
        ):
            conn.drain_events(timeout=5)
            got[0].ack()  # sporadic: at once
            got[1].ack()  # held
            assert recording.singles == [1] and len(conn.transport.acks) == 1
            conn.drain_events(timeout=5)  # claims 2 more, with the held ack
            assert recording.with_claim == [[2]] and recording.batches == []
            assert [m.payload["n"] for m in got] == [0, 1, 2, 3]
            assert recording.store.backlog("acks").total == 2  # the two just claimed


def test_acks_refused_with_their_claim_are_kept_and_written_later(url: str) -> None:
    got: list[Message] = []
    with Connection(f"sqlqueue+{url}", transport_options={"ack_flush_interval": 60}) as conn:
        publish(conn, 3)
        recording = recording_on(conn)
        with Consumer(
            conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)], prefetch_count=2
        ):
            conn.drain_events(timeout=5)
            got[0].ack()
            got[1].ack()  # held
            recording.full = True  # refuses acks (this store's claims alone still pass)
            conn.drain_events(timeout=5)  # acks and claim refused; claimed again, alone
            assert [m.payload["n"] for m in got] == [0, 1, 2]
            assert recording.with_claim == [[2]] and len(conn.transport.pending) == 1
            assert recording.store.backlog("acks").total == 2  # 2 (kept) and 3 (held)
            recording.full = False
            conn.transport.pending.retry()
            assert len(conn.transport.pending) == 0
            assert recording.store.backlog("acks").total == 1  # the last, held


def claimed(store: MemoryJobStore, n: int) -> list[Held]:
    store.enqueue_many([NewJob("q", b"{}") for _ in range(n)])
    return [Held(j.receipt, "q", j.attempts) for j in store.claim("q", n, 30).jobs]


def ack(held: Held) -> Settlement:
    return Settlement(held, "ack", lambda s: s.ack(held.receipt))


def batcher_on(recording: Recording, batch_size: int = 64) -> AckBatcher:
    store: JobContract = recording  # type: ignore[assignment]
    return AckBatcher(PendingSettlements(store), interval=60.0, batch_size=batch_size)


def test_held_acks_are_written_when_their_claim_fails_before_the_database(url: str) -> None:
    """A claim refused before any statement (here a queue name the store rejects) must not
    take the acks held for it along: they are written on their own, and the error goes on."""
    store = MemoryJobStore(url)
    recording = Recording(store)
    held = claimed(store, 2)
    batcher = batcher_on(recording)
    with batcher.delivering():
        for h in held:
            batcher.ack(ack(h))
        with pytest.raises(InvalidQueueName):
            batcher.flush_and_claim(recording, "no spaces allowed " * 20, 1, 30, None)  # type: ignore[arg-type]
    assert store.backlog("q").total == 0 and len(batcher) == 0


def test_a_stale_ack_in_a_batch_changes_nothing_and_fails_none_of_the_others(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryJobStore(url)
    recording = Recording(store)
    a, b, c = claimed(store, 3)
    # b's reservation is taken over: handed back and claimed by another consumer.
    assert store.release(b.receipt)
    (other,) = store.claim("q", 1, 30).jobs
    batcher = batcher_on(recording)
    with caplog.at_level(logging.WARNING, logger="kombu_sqlqueue"), batcher.delivering():
        for held in (a, b, c):
            batcher.ack(ack(held))
        assert recording.batches == []  # held until the round ends
    assert recording.batches == [[a.receipt.job_id, b.receipt.job_id, c.receipt.job_id]]
    assert store.get_job(a.receipt.job_id) is None and store.get_job(c.receipt.job_id) is None
    row = store.get_job(b.receipt.job_id)
    assert row is not None and row["reserved_token"] == other.receipt.token
    assert "stale ack" in caplog.text and f"job {b.receipt.job_id}" in caplog.text


def test_a_refused_batch_is_kept_and_written_once_the_database_accepts_writes(
    url: str,
) -> None:
    store = MemoryJobStore(url)
    recording = Recording(store)
    held = claimed(store, 3)
    batcher = batcher_on(recording)
    recording.full = True
    with batcher.delivering():
        for h in held:
            batcher.ack(ack(h))
    assert len(batcher.pending) == 3 and store.backlog("q").total == 3
    recording.full = False
    batcher.pending.retry()
    assert len(batcher.pending) == 0 and store.backlog("q").total == 0


def test_no_more_than_the_batch_size_is_ever_held(url: str) -> None:
    store = MemoryJobStore(url)
    recording = Recording(store)
    held = claimed(store, 7)
    batcher = batcher_on(recording, batch_size=3)
    with batcher.delivering():
        for h in held:
            batcher.ack(ack(h))
            assert len(batcher) < 3
    assert [len(b) for b in recording.batches] == [3, 3, 1]
    assert store.backlog("q").total == 0


def test_with_no_flush_interval_every_ack_is_written_alone(url: str) -> None:
    with Connection(f"sqlqueue+{url}", transport_options={"ack_flush_interval": 0}) as conn:
        publish(conn, 3)
        recording = recording_on(conn)
        with drained_acking(conn, 3):
            pass
        assert recording.singles == [1, 2, 3] and recording.batches == []


def test_held_acks_are_written_when_the_connection_closes(url: str) -> None:
    got: list[Message] = []
    conn = Connection(f"sqlqueue+{url}", transport_options={"ack_flush_interval": 60})
    publish(conn, 2)
    with Consumer(conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)], prefetch_count=2):
        conn.drain_events(timeout=5)
        got[0].ack()
        got[1].ack()  # held (just after another)
    assert len(conn.transport.acks) == 1
    conn.release()
    assert MemoryJobStore(url).backlog("acks").total == 0
