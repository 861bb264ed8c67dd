"""kill -9 of consumers whose acks are held to be written in a batch (kombu_sqlqueue/acks.py):
nothing is lost, and what runs again is bounded by what a killed process held.

Each consumer process records a message's id (flushed to the file) before it acks it; a
process killed outright loses the acks it held — at most ``ack_batch_size`` — plus the
message it was running, so those run again; none may be missing, and the queue ends empty.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_harness import Proc, consumer_args, producer_args, sql, wait_until

from kombu_sqlqueue.options import TransportOptions
from kombu_sqlqueue.store import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

QUEUE = "killq"
JOBS = 2000
KILLS = 3
#: What one kill may make run again: the acks its process held, and the message it ran.
PER_KILL = TransportOptions().ack_batch_size + 1


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize(
    "mode",
    [
        "ack",  # acked in the callbacks: written when drain_events returns
        "ack-after",  # acked after it returns: written with the next claim, one transaction
    ],
)
def test_kill_9_while_acks_are_held_loses_nothing_and_repeats_at_most_a_batch(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    store: JobStore,
    tmp_path: Path,
    mode: str,
) -> None:
    producer = spawn("producer", producer_args(broker_url, QUEUE, JOBS, "k"))
    assert producer.wait(timeout=120) == 0, producer.output
    outs: list[Path] = []
    for k in range(KILLS):
        out = tmp_path / f"victim-{k}.txt"
        outs.append(out)
        victim = spawn(f"victim-{k}", consumer_args(
            broker_url, QUEUE, mode, "--prefetch", "32", "--visibility", "30", "--out", str(out),
        ))  # fmt: skip
        # Killed mid-stream: its acks are being held and written a round at a time.
        wait_until(lambda out=out: len(lines(out)) >= 300, 90, what=f"victim {k} consuming")
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
    # The next process of the same name hands back a killed one's holds when it starts.
    final_out, stop = tmp_path / "final.txt", tmp_path / "stop"
    outs.append(final_out)
    final = spawn("final", consumer_args(
        broker_url, QUEUE, mode, "--prefetch", "32", "--visibility", "30",
        "--out", str(final_out), "--stop-file", str(stop),
    ))  # fmt: skip

    def drained() -> bool:
        return sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0] == 0

    wait_until(drained, 120, interval=0.2, what="every job consumed")
    stop.touch()
    assert final.wait(timeout=30) == 0, final.output[-4000:]

    ran: Counter[str] = Counter()
    for out in outs:
        ran.update(lines(out))
    expected = {f"k-{n}" for n in range(JOBS)}
    missing = expected - set(ran)
    assert not missing, f"{len(missing)} never ran, e.g. {sorted(missing)[:10]}"
    assert set(ran) == expected
    again = sum(n - 1 for n in ran.values())
    print(f"ran again after {KILLS} kills: {again} (bound {KILLS * PER_KILL})")
    assert again <= KILLS * PER_KILL
    assert store.dead_letters() == []
    assert "Traceback" not in final.output, final.output[-4000:]
