"""Who holds what, with real ``celery worker`` processes: every reservation is signed with
the worker's node name and process; a worker restarted under the node name of a SIGKILLed
one hands that one's holds back at once (not after the visibility timeout), and never a
live worker's — not even one running under the same name."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from e2e_harness import Proc, celery_worker_args, sql, wait_until

from kombu_sqlqueue.store import JobStore
from kombu_sqlqueue.store.model import Holding

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: Far longer than the test: a hold that comes back came back by recovery, not by lapse.
VISIBILITY = 600


def worker(spawn: Callable[..., Proc], broker_url: str, out_file: Path, name: str) -> Proc:
    proc = spawn(
        f"worker-{name}-{time.monotonic_ns()}",
        celery_worker_args(
            name, "--without-gossip", "--without-mingle", "--without-heartbeat", concurrency=1
        ),
        E2E_BROKER_URL=broker_url,
        E2E_OUT=str(out_file),
        E2E_VISIBILITY=str(VISIBILITY),
        E2E_PREFETCH="4",
    )  # fmt: skip
    proc.wait_text("ready.", timeout=40)
    return proc


def held_by(db_url: str, pid: int) -> set[tuple[int, str]]:
    """(job id, token) of the jobs the process ``pid`` of this host holds."""
    rows = sql(
        db_url,
        "SELECT id, reserved_token FROM askr_jobs"
        " WHERE reserved_until IS NOT NULL AND reserved_instance = ?",
        f"{socket.gethostname()}:{pid}",
    )
    return {(int(i), str(t)) for i, t in rows}


def test_a_restarted_worker_takes_back_a_killed_ones_holds_and_no_live_ones(
    app: Celery, spawn: Callable[..., Proc], broker_url: str, db_url: str, out_file: Path
) -> None:
    store = JobStore(db_url)
    try:
        dead = worker(spawn, broker_url, out_file, "billing")
        live = worker(spawn, broker_url, out_file, "billing")  # the same name, alive
        for i in range(10):
            app.tasks["e2e.record_late"].delay(f"slow-{i}", sleep=60, sleep_redelivered=60)

        def both_hold() -> bool:
            return bool(held_by(db_url, dead.pid)) and bool(held_by(db_url, live.pid))

        wait_until(both_hold, 30, what="both workers holding jobs")
        signed: list[Holding] = store.holders()
        assert {h.holder for h in signed} == {f"billing@{socket.gethostname()}"}
        lost, kept = held_by(db_url, dead.pid), held_by(db_url, live.pid)

        dead.kill_group(signal.SIGKILL)
        dead.wait(timeout=10)
        assert held_by(db_url, dead.pid) == lost  # nothing lapses for VISIBILITY seconds

        started = time.monotonic()
        worker(spawn, broker_url, out_file, "billing")
        wait_until(lambda: not held_by(db_url, dead.pid), 30, what="the killed worker's holds back")
        print(f"holds back {time.monotonic() - started:.2f}s after the restart began")
        assert held_by(db_url, live.pid) == kept  # same jobs, same tokens: never touched
    finally:
        store.close()
