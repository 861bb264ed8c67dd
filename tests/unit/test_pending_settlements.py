"""Acks and rejects refused by a full or read-only database are kept, written later in
order, still fenced, and never raised into the consumer (kombu_sqlqueue/qos.py), over the
in-memory store with a switch that makes it refuse writes."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pytest
from kombu import Connection, Consumer, Message, Producer, Queue

from kombu_sqlqueue.exceptions import StoreConnectionError, StoreError, StoreFullError
from kombu_sqlqueue.qos import Held, PendingSettlements, Settlement
from kombu_sqlqueue.store import JobContract, MemoryJobStore, NewJob, Receipt


class Refusing:
    """A store whose settlements raise StoreFullError while ``full`` is set."""

    def __init__(self, store: MemoryJobStore) -> None:
        self.store = store
        self.full = False
        self.writes: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.store, name)
        if name not in ("ack", "release", "dead_letter", "return_job"):
            return real

        def settle(receipt: Receipt, *args: Any, **kwargs: Any) -> bool:
            if self.full:
                raise StoreFullError("database memory://x is full")
            self.writes.append((name, receipt.job_id))
            return bool(real(receipt, *args, **kwargs))

        return settle


def claimed(store: MemoryJobStore, n: int) -> list[Held]:
    store.enqueue_many([NewJob("q", b"{}") for _ in range(n)])
    return [Held(j.receipt, "q", j.attempts) for j in store.claim("q", n, 30).jobs]


def ack(held: Held) -> Settlement:
    return Settlement(held, "ack", lambda s: s.ack(held.receipt))


def dead_letter(held: Held) -> Settlement:
    return Settlement(held, "reject", lambda s: s.dead_letter(held.receipt, "rejected"))


def release(held: Held) -> Settlement:
    return Settlement(held, "reject", lambda s: s.release(held.receipt, delay=5))


def kept_acks(refusing: Refusing, n: int) -> tuple[PendingSettlements, list[Held]]:
    """``n`` deliveries whose acks the store refused, kept; the store accepts writes again."""
    held = claimed(refusing.store, n)
    pending = pending_on(refusing)
    refusing.full = True
    for h in held:
        pending.settle(ack(h))
    refusing.full = False
    assert len(pending) == n
    return pending, held


@pytest.fixture
def refusing(url: str) -> Refusing:
    return Refusing(MemoryJobStore(url))


def pending_on(refusing: Refusing) -> PendingSettlements:
    store: JobContract = refusing  # type: ignore[assignment]
    return PendingSettlements(store)


def test_refused_settlements_are_kept_reported_once_and_written_in_order(
    refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c = claimed(refusing.store, 3)
    pending = pending_on(refusing)
    caplog.set_level(logging.WARNING, logger="kombu_sqlqueue")
    refusing.full = True
    pending.settle(ack(a))
    pending.settle(release(b))
    refusing.full = False
    pending.settle(dead_letter(c))  # behind the kept ones: not written ahead of them
    assert len(pending) == 3 and refusing.writes == []
    assert len([r for r in caplog.records if "cannot settle" in r.getMessage()]) == 1

    refusing.full = True
    pending.retry()  # still refused: kept, not reported again
    assert len(pending) == 3
    assert len([r for r in caplog.records if "cannot settle" in r.getMessage()]) == 1

    refusing.full = False
    pending.retry()
    assert len(pending) == 0
    assert refusing.writes == [("ack", a.receipt.job_id), ("release", b.receipt.job_id),
                               ("dead_letter", c.receipt.job_id)]  # fmt: skip
    assert any("settling deliveries again" in r.getMessage() for r in caplog.records)
    store = refusing.store
    assert store.get_job(a.receipt.job_id) is None
    assert store.get_job(b.receipt.job_id)["reserved_until"] is None  # type: ignore[index]
    assert [d.exception for d in store.dead_letters("q")] == ["rejected"]


def test_a_late_settlement_is_fenced_like_any_other(
    refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    store = refusing.store
    (held,) = claimed(store, 1)
    pending = pending_on(refusing)
    refusing.full = True
    pending.settle(ack(held))
    refusing.full = False
    store.clock = lambda: 10**10  # the reservation lapses; another consumer takes it
    (taken,) = store.claim("q", 1, 30).jobs
    caplog.set_level(logging.WARNING, logger="kombu_sqlqueue")
    pending.retry()
    assert len(pending) == 0
    assert any("stale ack" in r.getMessage() for r in caplog.records)
    assert store.get_job(taken.id) is not None  # the new holder's job is untouched


def test_another_failure_drops_the_settlement_and_the_rest_go_on(
    refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    pending, (a, b) = kept_acks(refusing, 2)

    def broken(_store: object) -> bool:
        raise StoreError("connection lost for good")

    pending._pending[0] = Settlement(a, "ack", broken)
    pending.retry()
    assert len(pending) == 0
    assert refusing.writes == [("ack", b.receipt.job_id)]
    assert any("could not settle job" in r.getMessage() for r in caplog.records)


def test_give_up_waits_for_a_retry_under_way_and_counts_what_is_left(
    refusing: Refusing, caplog: pytest.LogCaptureFixture
) -> None:
    pending, (a, b) = kept_acks(refusing, 2)
    entered, release_write = threading.Event(), threading.Event()

    def slow(store: JobContract) -> bool:
        entered.set()
        release_write.wait(5)
        return store.ack(a.receipt)

    pending._pending[0] = Settlement(a, "ack", slow)
    errors: list[BaseException] = []

    def retry() -> None:
        try:
            pending.retry()
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=retry)
    worker.start()
    assert entered.wait(5)
    closer = threading.Thread(target=pending.give_up)
    closer.start()
    release_write.set()
    worker.join(5)
    closer.join(5)
    assert errors == [] and len(pending) == 0
    # The retry under way finished before close counted: both written, in order.
    assert refusing.writes == [("ack", a.receipt.job_id), ("ack", b.receipt.job_id)]
    assert not any("unwritten" in r.getMessage() for r in caplog.records)


def test_a_consumer_acking_on_a_full_database_goes_on(url: str) -> None:
    got: list[Message] = []
    with Connection(f"sqlqueue+{url}", transport_options={"polling_interval": 0.01}) as conn:
        Producer(conn.channel()).publish({"n": 1}, routing_key="acks", declare=[Queue("acks")])
        store = conn.transport.store
        real_ack = store.ack
        full = True

        def ack(receipt: Receipt) -> bool:
            if full:
                raise StoreFullError("database memory:// is full")
            return bool(real_ack(receipt))

        store.ack = ack
        with Consumer(conn, [Queue("acks")], callbacks=[lambda _b, m: got.append(m)]):
            conn.drain_events(timeout=2)
            got[0].ack()  # does not raise
            assert len(conn.transport.pending) == 1
            full = False
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.1)  # the next poll writes it
            assert len(conn.transport.pending) == 0
        assert store.size("acks") == 0 and store.backlog("acks").total == 0


def test_a_stale_ack_whose_settled_check_fails_is_warned_of_never_raised(
    refusing: Refusing, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a stale ack's job was settled already only chooses its log line: a database
    that cannot answer then (connection lost) gives the warning, and the ack returns."""
    (held,) = claimed(refusing.store, 1)
    assert refusing.store.ack(held.receipt)  # settled elsewhere: the ack below is stale

    def unreachable(_ids: Any) -> set[int]:
        raise StoreConnectionError("database memory://x connection failed")

    monkeypatch.setattr(refusing.store, "gone", unreachable)
    pending = pending_on(refusing)
    with caplog.at_level(logging.WARNING, logger="kombu_sqlqueue"):
        pending.settle(ack(held))
    assert "stale ack" in caplog.text and pending.settled_elsewhere == 0
