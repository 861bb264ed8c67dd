"""A pause from the operator's CLI reaches real ``celery worker`` processes, on every engine:
two workers (prefork, two children each: two hosts, as processes) draining a queue stop
starting its tasks once ``kombu-sqlqueue pause`` returned — the jobs they held finish and
settle —, publishes go on being stored, and ``resume`` drains the rest, each task once.
Limits from the CLI hold across three workers: never more than the concurrency limit
running at once (a ledger of task starts and ends), never faster than the rate."""

from __future__ import annotations

import json
import signal
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


def most_at_once(holds: list[tuple[float, float]]) -> int:
    """The most intervals of ``holds`` open at one moment."""
    edges = sorted([(start, 1) for start, _ in holds] + [(end, -1) for _, end in holds])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_limits_set_from_the_cli_hold_for_every_worker(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    out_file: Path,
    app: Celery,
) -> None:
    """Three workers (prefork, two children each: six tasks at once unlimited) on a queue
    limited to two at once: no moment has more than two tasks running across them, and
    every task runs once. Then a rate limit of 10/s instead: 20 tasks start no faster."""
    for n in range(30):  # (the first publish makes the tables the CLI writes to)
        app.send_task("e2e.record_late", args=[f"c{n}"], kwargs={"sleep": TASK_SECONDS})
    assert "at most 2 job(s) held at once" in operator(
        "limit", broker_url, "e2e", "--concurrency", "2"
    )
    workers = [
        spawn(
            f"worker{n}",
            celery_worker_args(f"lim{n}"),
            E2E_BROKER_URL=broker_url,
            E2E_DB_URL=db_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(E2E_VISIBILITY),
        )
        for n in range(3)
    ]
    for worker in workers:
        worker.wait_text("ready.", timeout=30)
    wait_until(lambda: len(task_events(out_file, "ran")) >= 30, 60, what="30 tasks ran")
    started = {e["label"]: e["t"] for e in task_events(out_file, "started")}
    holds = [(started[e["label"]], e["t"]) for e in task_events(out_file, "ran")]
    assert most_at_once(holds) == 2  # the limit, reached and never passed
    assert len({e["pid"] for e in task_events(out_file, "ran")}) >= 2  # shared out

    said = operator("limit", broker_url, "e2e", "--concurrency", "off", "--rate", "10/s")
    assert "at most 10/s handed out, no concurrency limit" in said
    for n in range(20):
        app.send_task("e2e.record_late", args=[f"r{n}"])
    wait_until(lambda: len(task_events(out_file, "ran")) >= 50, 60, what="20 more tasks ran")
    times = sorted(e["t"] for e in task_events(out_file, "started") if e["label"][0] == "r")
    # Claimed one a tenth of a second; a task starts a moment after its claim (a pool
    # child takes it), so the starts are compared with some slack.
    assert times[-1] - times[0] >= (20 - 1) / 10 - 0.3
    assert max(sum(1 for t in times if s <= t < s + 1.0) for s in times) <= 10 + 1 + 2
    ran = Counter(e["label"] for e in task_events(out_file, "ran"))
    assert len(ran) == 50 and max(ran.values()) == 1
    for worker in workers:
        assert "Traceback" not in worker.output, worker.output[-3000:]


def test_a_per_key_limit_holds_across_workers_and_keys_run_side_by_side(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    out_file: Path,
    app: Celery,
) -> None:
    """Tasks sent with ``headers={"concurrency_key": customer}`` on a queue limited to one
    per key, three workers (six children): no customer ever has two tasks running at
    once, customers run side by side, every task once."""
    for n in range(8):
        for customer in ("acme", "globex", "initech"):
            app.send_task(
                "e2e.record_late", args=[f"{customer}:{n}"], kwargs={"sleep": TASK_SECONDS},
                headers={"concurrency_key": customer},
            )  # fmt: skip
    said = operator("limit", broker_url, "e2e", "--per-key", "1")
    assert "at most 1 job(s) of one concurrency key held at once" in said
    workers = [
        spawn(
            f"worker{n}",
            celery_worker_args(f"key{n}"),
            E2E_BROKER_URL=broker_url,
            E2E_DB_URL=db_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(E2E_VISIBILITY),
        )
        for n in range(3)
    ]
    for worker in workers:
        worker.wait_text("ready.", timeout=30)
    wait_until(lambda: len(task_events(out_file, "ran")) >= 24, 60, what="24 tasks ran")
    started = {e["label"]: e["t"] for e in task_events(out_file, "started")}
    ran = task_events(out_file, "ran")
    for customer in ("acme", "globex", "initech"):
        holds = [(started[e["label"]], e["t"]) for e in ran if e["label"].startswith(customer)]
        assert most_at_once(holds) == 1, customer
    assert most_at_once([(started[e["label"]], e["t"]) for e in ran]) >= 2
    assert Counter(e["label"] for e in ran).most_common(1)[0][1] == 1
    for worker in workers:
        assert "Traceback" not in worker.output, worker.output[-3000:]


def test_a_limited_queue_s_holder_killed_with_9_frees_its_slots_and_loses_nothing(
    spawn: Callable[..., Proc],
    broker_url: str,
    db_url: str,
    out_file: Path,
    app: Celery,
) -> None:
    """Two workers on a queue limited to two at once; the first is killed with SIGKILL (its
    pool too) while it holds tasks: its reservations lapse after the visibility timeout,
    the other worker takes those jobs, every task runs, and no moment — the killed runs
    cut at the kill — has more than two running."""
    labels = [f"k{n}" for n in range(40)]
    for label in labels:
        app.send_task("e2e.record_late", args=[label], kwargs={"sleep": 0.5})
    operator("limit", broker_url, "e2e", "--concurrency", "2")

    def start(n: int) -> Proc:
        worker = spawn(
            f"worker{n}",
            celery_worker_args(f"kill{n}"),
            E2E_BROKER_URL=broker_url,
            E2E_DB_URL=db_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(E2E_VISIBILITY),
        )
        worker.wait_text("ready.", timeout=30)
        return worker

    # The first alone until it runs tasks (both slots its), then the second beside it.
    workers = [start(0)]
    wait_until(lambda: len(task_events(out_file, "ran")) >= 2, 30, what="the first worker's tasks")
    workers.append(start(1))
    held_by_first = (  # node kill0@<host>: names from 'kill0@' up to (not) 'kill0A'
        "SELECT count(*) FROM askr_jobs WHERE reserved_by >= 'kill0@' AND reserved_by < 'kill0A'"
    )
    wait_until(
        lambda: int(sql(db_url, held_by_first)[0][0]) > 0, 30, what="the first worker holding"
    )
    workers[0].kill_group(signal.SIGKILL)
    killed_at = time.time()
    wait_until(
        lambda: {e["label"] for e in task_events(out_file, "ran")} >= set(labels),
        90,
        what="every task run after the kill",
    )
    # Each run: from its start to the end its pool child wrote, or to the kill for a run
    # that never ended (its child killed). A job can run twice (its ack lost in the kill).
    ended = {(e["label"], e["pid"]): e["t"] for e in task_events(out_file, "ran")}
    runs = [
        (e["t"], ended.get((e["label"], e["pid"]), killed_at))
        for e in task_events(out_file, "started")
    ]
    assert most_at_once(runs) <= 2
    assert any(e["redelivered"] for e in task_events(out_file, "started"))  # taken over
    assert "Traceback" not in workers[1].output, workers[1].output[-3000:]
