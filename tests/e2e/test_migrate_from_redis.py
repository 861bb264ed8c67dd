"""Draining a Redis broker into ours: ``kombu-sqlqueue move`` (docs/migrating-from-redis.md).

Against a real ``redis-server`` and a real worker: tasks waiting in Redis — plain, with a
priority, with a countdown, and one a killed worker left unacknowledged — are counted by
``kombu-sqlqueue move … --check`` and moved by ``kombu-sqlqueue move REDIS_URL sqlqueue+… e2e
--restore-unacked``; Redis is left empty, and a worker on the new broker runs every task
once, the countdown one no earlier than its ``eta``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from apps.celery_app import QUEUE, create_app
from e2e_harness import Proc, celery_worker_args, task_events, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

COUNTDOWN = 4.0

#: Takes one message without acknowledging it, then dies the way SIGKILL or the OOM killer
#: would leave it (no channel close, so Kombu cannot put it back).
KILLED_WORKER = """
import os, sys
from kombu import Connection, Queue
with Connection(sys.argv[1]) as conn:
    held = Queue(sys.argv[2])(conn.default_channel).get(no_ack=False)
    assert held is not None
    os._exit(3)
"""


def test_celery_migrate_moves_a_redis_backlog_and_a_worker_runs_it_once(
    redis_url: str, broker_url: str, spawn: Callable[..., Proc], out_file: Path
) -> None:
    old = create_app(redis_url)
    try:
        record = old.tasks["e2e.record"]
        for i in range(12):
            record.delay(f"plain-{i}")
        for i in range(4):
            record.apply_async((f"prio-{i}",), priority=9 - i)
        sent_at = time.time()
        record.apply_async(("countdown",), countdown=COUNTDOWN)
    finally:
        old.close()
    r = redis.Redis.from_url(redis_url)
    waiting_lists = [k for k in r.keys(f"{QUEUE}*") if r.type(k) == b"list"]
    assert sum(r.llen(k) for k in waiting_lists) == 17  # priorities live in their own lists

    # A worker killed while it held one: Redis keeps it in its "unacked" hash.
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WORKER, redis_url, QUEUE], timeout=30, check=False
    )
    assert killed.returncode == 3

    cli = [str(Path(sys.executable).with_name("kombu-sqlqueue")), "move", redis_url, broker_url]
    counted = subprocess.run(
        [*cli, QUEUE, "--check", "--json"], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(counted.stdout) == {"queues": {QUEUE: 16}, "unacked": 1}

    moved = subprocess.run(
        [*cli, QUEUE, "--restore-unacked"], capture_output=True, text=True, timeout=60, check=False
    )
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert moved.stdout.count("moved e2e: e2e.record ") == 17
    assert moved.stdout.endswith("e2e: 17 moved\n")
    assert sum(r.llen(k) for k in waiting_lists) == 0  # acked in Redis: nothing left behind
    assert not r.hlen("unacked")  # and nothing held back in its unacked hash
    counted = subprocess.run(
        [*cli, QUEUE, "--check", "--json"], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(counted.stdout) == {"queues": {QUEUE: 0}, "unacked": 0}  # Redis: gone

    worker = spawn(
        "worker",
        celery_worker_args("migrated", "-Q", QUEUE),
        E2E_BROKER_URL=broker_url,
        E2E_OUT=str(out_file),
    )  # fmt: skip
    worker.wait_text("ready.", timeout=30)
    ran = wait_until(
        lambda: len(got := task_events(out_file)) >= 17 and got, timeout=60, what="17 tasks"
    )
    time.sleep(0.5)  # a task that ran twice would show up by now
    labels = [event["label"] for event in task_events(out_file)]
    assert sorted(labels) == sorted(
        [f"plain-{i}" for i in range(12)] + [f"prio-{i}" for i in range(4)] + ["countdown"]
    )
    countdown = next(event for event in ran if event["label"] == "countdown")
    assert countdown["t"] >= sent_at + COUNTDOWN - 0.5  # the eta came along


def test_a_message_move_cannot_copy_is_dead_lettered_and_the_backlog_still_moves(
    redis_url: str, broker_url: str
) -> None:
    """One task in Redis whose ``expiration`` is no number (another client wrote it): the
    move says so on stderr, keeps it here as a dead letter with its bytes, acks it in Redis
    and moves the rest — it used to stop there with a traceback."""
    old = create_app(redis_url)
    try:
        sent = [old.tasks["e2e.record"].delay(f"task-{i}").id for i in range(3)]
    finally:
        old.close()
    r = redis.Redis.from_url(redis_url)
    stored = [json.loads(m) for m in r.lrange(QUEUE, 0, -1)]
    (index,) = [i for i, m in enumerate(stored) if m["headers"]["id"] == sent[1]]
    stored[index]["properties"]["expiration"] = "soon"
    r.lset(QUEUE, index, json.dumps(stored[index]))

    cli = [str(Path(sys.executable).with_name("kombu-sqlqueue"))]
    moved = subprocess.run(
        [*cli, "move", redis_url, broker_url, QUEUE],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert moved.returncode == 0, moved.stdout + moved.stderr
    reason = (
        f"not moved from {redis_url}: "
        "its expiration property 'soon' is not a number of milliseconds"
    )
    assert moved.stderr == f"dead-lettered {QUEUE}: e2e.record {sent[1]}: {reason}\n"
    assert moved.stdout.endswith(
        f"{QUEUE}: 2 moved, 1 dead-lettered (kombu-sqlqueue failed list URL --queue {QUEUE})\n"
    )
    assert r.llen(QUEUE) == 0 and not r.hlen("unacked")  # nothing left behind in Redis

    shown = subprocess.run(
        [*cli, "failed", "show", broker_url, sent[1], "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (letter,) = json.loads(shown.stdout)
    assert (letter["kind"], letter["name"]) == ("celery", "e2e.record")  # read as a task
    assert letter["exception"] == reason and letter["queue"] == QUEUE
    assert json.loads(letter["payload"]) == stored[index]  # as Redis held it
