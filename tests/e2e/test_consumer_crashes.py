"""Crash, stall and poison scenarios with plain Kombu consumer processes (apps/consumer.py).

Visibility timeout is 2 s here. Reservations are stored in whole seconds,
rounded up, so one made at t lapses somewhere in [t + 2, t + 3).
"""

from __future__ import annotations

import base64
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_harness import Proc, consumer_args, producer_args, sql

from kombu_sqlqueue.store import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

VISIBILITY = "2"
QUEUE = "crashq"


def publish(spawn: Callable[..., Proc], broker_url: str, count: int, *extra: str) -> None:
    producer = spawn("producer", producer_args(broker_url, QUEUE, count, "m", *extra))
    assert producer.wait(timeout=30) == 0, producer.output
    assert producer.events("done"), producer.output


def only_job_id(db_url: str) -> int:
    rows = sql(db_url, "SELECT id FROM askr_jobs WHERE queue = ?", QUEUE)
    assert len(rows) == 1, rows
    return int(rows[0][0])


def test_killed_consumer_message_redelivered_after_visibility_timeout(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """kill -9 of a consumer holding an unacked message: B gets it after the lapse, attempts 2
    (B does not hand back A's holds at start, which the next test does)."""
    publish(spawn, broker_url, 1)
    job_id = only_job_id(db_url)
    ack_b = tmp_path / "ack-b"
    never = tmp_path / "never"

    a = spawn("consumer-a", consumer_args(broker_url, QUEUE, "hold", "--visibility", VISIBILITY,
                                          "--ack-file", str(never)))  # fmt: skip
    got_a = a.wait_event("received", timeout=20)
    assert got_a["job_id"] == job_id and got_a["attempts"] == 1 and not got_a["redelivered"]
    a.send_signal(signal.SIGKILL)
    assert a.wait(timeout=10) == -signal.SIGKILL
    row = store.get_job(job_id)
    assert row is not None and row["attempts"] == 1  # still reserved by the dead consumer
    lapses_at = row["reserved_until"]  # whole seconds: claimable once int(now) reaches it

    b = spawn("consumer-b", consumer_args(broker_url, QUEUE, "hold", "--visibility", VISIBILITY,
                                          "--ack-file", str(ack_b),
                                          "--no-recover-holds"))  # fmt: skip
    got_b = b.wait_event("received", timeout=20)
    # Not before the dead consumer's reservation lapsed (it was made when A claimed, which
    # may be a moment before A's callback ran: compare with the stored deadline itself).
    assert got_b["t"] >= lapses_at - 0.01
    assert got_b["job_id"] == job_id
    assert got_b["attempts"] == 2
    assert got_b["redelivered"] is True
    assert got_b["body"] == got_a["body"]
    row = store.get_job(job_id)  # while B holds it
    assert row is not None and row["attempts"] == 2, row

    ack_b.touch()
    b.wait_event("acked", timeout=10)
    assert b.wait(timeout=10) == 0
    assert store.get_job(job_id) is None
    assert store.dead_letters() == []


def test_a_restarted_consumer_takes_a_killed_ones_message_back_at_once(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """Both consumers sign as ``consumer@<host>`` (the program's name): B, starting after A
    was killed, hands A's hold back at once (visibility 60 s) and gets it redelivered."""
    publish(spawn, broker_url, 1)
    job_id = only_job_id(db_url)
    never, ack_b = tmp_path / "never", tmp_path / "ack-b"
    a = spawn("consumer-a", consumer_args(broker_url, QUEUE, "hold", "--visibility", "60",
                                          "--ack-file", str(never)))  # fmt: skip
    got_a = a.wait_event("received", timeout=20)
    a.send_signal(signal.SIGKILL)
    assert a.wait(timeout=10) == -signal.SIGKILL
    (held,) = store.holders()
    assert held.holder is not None and held.holder.startswith("consumer@")

    b = spawn("consumer-b", consumer_args(broker_url, QUEUE, "hold", "--visibility", "60",
                                          "--ack-file", str(ack_b)))  # fmt: skip
    got_b = b.wait_event("received", timeout=30)  # well inside the 60 s visibility
    assert (got_b["job_id"], got_b["attempts"], got_b["redelivered"]) == (job_id, 2, True)
    print(f"redelivered {got_b['t'] - got_a['t']:.2f}s after A received it")
    ack_b.touch()
    b.wait_event("acked", timeout=10)
    assert b.wait(timeout=10) == 0
    assert store.get_job(job_id) is None


def test_stalled_consumer_ack_is_fenced_after_takeover(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore, tmp_path: Path
) -> None:
    """SIGSTOP A past the timeout; B takes over; A's late ack is stale; B's ack deletes the row."""
    publish(spawn, broker_url, 1)
    job_id = only_job_id(db_url)
    ack_a, ack_b = tmp_path / "ack-a", tmp_path / "ack-b"

    a = spawn("consumer-a", consumer_args(broker_url, QUEUE, "hold", "--visibility", VISIBILITY,
                                          "--ack-file", str(ack_a)))  # fmt: skip
    got_a = a.wait_event("received", timeout=20)
    assert got_a["attempts"] == 1
    # A's renewer keeps the reservation alive while A runs: wait out 1.5 timeouts first.
    time.sleep(3)
    row = store.get_job(job_id)
    assert row is not None and row["attempts"] == 1 and row["reserved_until"] > time.time() - 1

    a.send_signal(signal.SIGSTOP)  # freezes A's renewal thread too
    b = spawn("consumer-b", consumer_args(broker_url, QUEUE, "hold", "--visibility", VISIBILITY,
                                          "--ack-file", str(ack_b)))  # fmt: skip
    got_b = b.wait_event("received", timeout=20)
    assert got_b["job_id"] == job_id and got_b["attempts"] == 2
    held_by_b = store.get_job(job_id)
    assert held_by_b is not None

    ack_a.touch()  # A acks as soon as it runs again
    a.send_signal(signal.SIGCONT)
    a.wait_event("acked", timeout=10)
    assert a.wait(timeout=10) == 0
    assert "stale ack" in a.stderr, a.stderr
    after_a = store.get_job(job_id)
    assert after_a is not None, "A's stale ack deleted the row B holds"
    assert after_a["reserved_token"] == held_by_b["reserved_token"]
    assert after_a["attempts"] == 2

    # B's renewal is unaffected by A's stale ack; B still holds it past another timeout.
    time.sleep(float(VISIBILITY) + 0.5)
    row = store.get_job(job_id)
    assert row is not None and row["reserved_token"] == held_by_b["reserved_token"]

    ack_b.touch()
    b.wait_event("acked", timeout=10)
    assert b.wait(timeout=10) == 0
    assert "stale" not in b.stderr, b.stderr
    assert store.get_job(job_id) is None
    assert store.dead_letters() == []


def run_poison_loop(
    spawn: Callable[..., Proc], broker_url: str, *, max_consumers: int, visibility: str
) -> tuple[list[dict[str, Any]], Proc | None]:
    """Restart a consumer that dies on the message until one finds nothing (bounded).

    Returns the deliveries, and the consumer that went idle (None if the loop
    ran out of restarts with the message still being delivered).
    """
    deliveries: list[dict[str, Any]] = []
    for n in range(max_consumers):
        c = spawn(f"consumer-{n}", consumer_args(
            broker_url, QUEUE, "die", "--visibility", visibility, "--max-attempts", "3",
            "--idle-exit", str(float(visibility) + 3),
        ))  # fmt: skip
        code = c.wait(timeout=30)
        got = c.events("received")
        if code == 1:  # died on the message
            assert len(got) == 1, c.output
            deliveries.append(got[0])
            continue
        assert code == 0, c.output
        assert got == [] and c.events("idle"), c.output
        return deliveries, c
    return deliveries, None


def test_poison_message_dead_lettered_after_max_attempts(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore
) -> None:
    """A consumer that dies on every delivery: 3 deliveries, then askr_failed_jobs; loop ends."""
    publish(spawn, broker_url, 1, "--max-attempts", "3")
    job_id = only_job_id(db_url)
    row = store.get_job(job_id)
    assert row is not None and row["max_attempts"] == 3

    # Bounded restart loop; the poison must stop it well before 8 consumers.
    deliveries, idle = run_poison_loop(spawn, broker_url, max_consumers=8, visibility=VISIBILITY)
    assert idle is not None, f"poison message still delivered after 8 consumers: {deliveries}"
    assert "max attempts exceeded" in idle.stderr  # the claim's dead-letter warning

    assert [d["attempts"] for d in deliveries] == [1, 2, 3]
    assert [d["redelivered"] for d in deliveries] == [False, True, True]
    assert {d["job_id"] for d in deliveries} == {job_id}
    assert store.get_job(job_id) is None
    assert store.size(QUEUE) == 0
    (dead,) = store.dead_letters()
    assert dead.queue == QUEUE
    assert dead.exception is not None and "max attempts exceeded" in dead.exception, dead
    # The dead letter keeps the Kombu message as stored (body base64-encoded by Kombu).
    message = json.loads(dead.payload)
    assert json.loads(base64.b64decode(message["body"])) == {"id": "m-0"}
    # 3 deliveries happened; the refused 4th claim is not counted in the dead letter.
    assert dead.attempts == 3


def test_consumer_side_max_attempts_applies_to_rows_published_without_it(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, store: JobStore
) -> None:
    """Producer has no max_attempts option; the consumers say 3: the lower limit applies."""
    publish(spawn, broker_url, 1)  # no --max-attempts: the row stores the default, 25
    row = store.get_job(only_job_id(db_url))
    assert row is not None and row["max_attempts"] == 25
    deliveries, idle = run_poison_loop(spawn, broker_url, max_consumers=5, visibility="1")
    assert [d["attempts"] for d in deliveries] == [1, 2, 3], deliveries
    assert idle is not None
    assert len(store.dead_letters()) == 1
