"""A pause from the operator's CLI reaches real ``celery worker`` processes, on every engine:
two workers (prefork, two children each: two hosts, as processes) draining a queue stop
starting its tasks once ``kombu-sqlqueue pause`` returned — the jobs they held finish and
settle —, publishes go on being stored, and ``resume`` drains the rest, each task once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from e2e_harness import E2E_VISIBILITY, Proc, celery_worker_args, sql, task_events, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

TASKS = 120
#: What one task takes: a worker with two children and a prefetch of one holds two.
TASK_SECONDS = 0.2


def operator(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kombu_sqlqueue", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_paused_queue_stops_every_worker_and_resume_drains_it(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    out_file: Path,
    app: Celery,
) -> None:
    for n in range(TASKS):
        app.send_task("e2e.record_late", args=[f"t{n}"], kwargs={"sleep": TASK_SECONDS})
    workers = [
        spawn(
            f"worker{n}",
            celery_worker_args(f"fc{n}"),
            E2E_BROKER_URL=broker_url,
            E2E_DB_URL=db_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(E2E_VISIBILITY),
        )
        for n in range(2)
    ]
    for worker in workers:
        worker.wait_text("ready.", timeout=30)
    wait_until(lambda: len(task_events(out_file, "ran")) >= 20, 60, what="20 tasks ran")

    assert "paused queue 'e2e'" in operator("pause", broker_url, "e2e")
    paused_at = time.time()
    # While paused: publishes are stored; what the workers held finishes and settles.
    for n in range(TASKS, TASKS + 10):
        app.send_task("e2e.record_late", args=[f"t{n}"], kwargs={"sleep": TASK_SECONDS})
    time.sleep(3)
    ran_while_paused = len(task_events(out_file, "ran"))
    time.sleep(3)
    started = task_events(out_file, "started")
    late = [e for e in started if e["t"] > paused_at]
    # Only the jobs held when the pause landed (two per worker) start after it, and they
    # start at once: nothing claimed later.
    assert len(late) <= 2 * len(workers), late
    assert all(e["t"] < paused_at + 2 for e in late), late
    assert len(task_events(out_file, "ran")) == ran_while_paused
    assert len(started) == ran_while_paused  # every started task finished
    left = int(sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0])
    assert left == TASKS + 10 - ran_while_paused > 0
    (row,) = json.loads(operator("stats", broker_url, "e2e", "--json"))
    assert (row["paused"], row["reserved"]) == (True, 0)

    assert operator("resume", broker_url, "e2e").strip() == "resumed queue 'e2e'"
    wait_until(
        lambda: int(sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0]) == 0,
        60,
        what="the queue drained after resume",
    )
    wait_until(lambda: len(task_events(out_file, "ran")) == TASKS + 10, 20, what="every task ran")
    ran = Counter(e["label"] for e in task_events(out_file, "ran"))
    assert set(ran) == {f"t{n}" for n in range(TASKS + 10)}
    assert max(ran.values()) == 1, [label for label, count in ran.items() if count > 1]
    assert not any(e["redelivered"] for e in task_events(out_file, "ran"))
    for worker in workers:
        assert "Traceback" not in worker.output, worker.output[-3000:]
