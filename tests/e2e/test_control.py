"""Celery's remote control over the SQL broker: real workers, a real ``celery`` CLI.

Two ``celery worker`` processes with different node names and a third process that runs
``celery inspect`` / ``celery control``: the broadcast reaches both workers through the
fanout exchange's stored bindings, and their replies come back through the reply exchange.
On every engine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apps.celery_app import create_app
from e2e_harness import E2E_DIR, Proc, sql, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


@pytest.fixture
def workers(spawn: Callable[..., Proc], broker_url: str, tmp_path: Path) -> list[Proc]:
    started = []
    for name in ("alpha", "beta"):
        worker = spawn(
            name,
            [sys.executable, "-m", "celery", "-A", "apps.celery_app", "worker",
             "--pool=solo", "-l", "info", "-n", f"{name}@%h"],
            E2E_BROKER_URL=broker_url,
            E2E_OUT=str(tmp_path / "tasks.jsonl"),
        )  # fmt: skip
        started.append(worker)
    for worker in started:
        worker.wait_text("ready.", timeout=60)
    return started


def celery_cli(broker_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PYTHONPATH": str(E2E_DIR),
        "E2E_BROKER_URL": broker_url,
        "E2E_OUT": str(tmp_path / "tasks.jsonl"),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "apps.celery_app", *args],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


def ran(tmp_path: Path) -> list[str]:
    path = tmp_path / "tasks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["label"] for line in path.read_text().splitlines() if line.strip()]


def test_inspect_ping_reaches_both_workers_and_replies_come_back(
    workers: list[Proc], broker_url: str, tmp_path: Path
) -> None:
    done = celery_cli(broker_url, tmp_path, "inspect", "ping", "--timeout", "5", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    replies = json.loads(done.stdout)
    nodes = sorted(name.split("@")[0] for name in replies)
    assert nodes == ["alpha", "beta"], replies
    assert all(reply == {"ok": "pong"} for reply in replies.values())
    done = celery_cli(broker_url, tmp_path, "inspect", "registered", "--timeout", "5", "--json")
    registered = json.loads(done.stdout)
    assert len(registered) == 2
    assert all("e2e.record" in tasks for tasks in registered.values())


def test_control_revoke_of_a_queued_task_reaches_both_workers_and_it_never_runs(
    workers: list[Proc], broker_url: str, tmp_path: Path
) -> None:
    app = create_app(broker_url)
    try:
        record = app.tasks["e2e.record"]
        result = record.apply_async(("revoked",), countdown=3)
        sent = time.time()
        done = celery_cli(broker_url, tmp_path, "control", "revoke", result.id, "--timeout", "5",
                          "--json")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        # `celery control --json` prints a list of {node: reply}.
        replies = {k: v for reply in json.loads(done.stdout) for k, v in reply.items()}
        assert sorted(name.split("@")[0] for name in replies) == ["alpha", "beta"]
        assert all(result.id in reply["ok"] for reply in replies.values()), replies
        # Past the countdown, a later task runs; the revoked one never did.
        time.sleep(max(0.0, sent + 4 - time.time()))
        record.delay("after")
        wait_until(lambda: "after" in ran(tmp_path), 30, what="the task sent after the revoke")
        assert "revoked" not in ran(tmp_path)
    finally:
        app.close()


def test_workers_leave_no_pidbox_queue_or_binding_behind(
    workers: list[Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    done = celery_cli(broker_url, tmp_path, "inspect", "ping", "--timeout", "3", "--json")
    assert done.returncode == 0, done.stderr
    pidbox: list[Any] = sql(
        db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celery.pidbox'"
    )
    assert len(pidbox) == 2
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=30)
    left = sql(db_url, "SELECT exchange, queue FROM askr_bindings WHERE exchange <> 'e2e'")
    assert left == []  # pidbox and reply queues went with their consumers
    assert sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0] == 0


def test_a_killed_workers_pidbox_queue_expires_and_broadcasts_stop_filling_it(
    workers: list[Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    alpha = workers[0]
    alpha.kill_group(signal.SIGKILL)  # no clean shutdown: its pidbox queue stays bound

    def alpha_bound() -> bool:
        rows = sql(db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celery.pidbox'")
        return any(str(r[0]).startswith("alpha@") for r in rows)

    assert alpha_bound()
    # Celery declares pidbox queues with expires=10 s; beta's keeper sweeps expired queues.
    wait_until(lambda: not alpha_bound(), 60, what="the dead worker's pidbox queue to expire")
    done = celery_cli(broker_url, tmp_path, "inspect", "ping", "--timeout", "3", "--json")
    assert [name.split("@")[0] for name in json.loads(done.stdout)] == ["beta"]
    assert sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue LIKE ?", "alpha@%")[0][0] == 0
