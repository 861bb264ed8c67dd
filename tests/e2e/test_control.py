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
from e2e_harness import E2E_DIR, Proc, celery_worker_args, sql, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def start_workers(
    spawn: Callable[..., Proc], broker_url: str, tmp_path: Path, pool: str = "solo"
) -> list[Proc]:
    started = []
    for name in ("alpha", "beta"):
        worker = spawn(
            name,
            celery_worker_args(name, pool=pool),
            E2E_BROKER_URL=broker_url,
            E2E_OUT=str(tmp_path / "tasks.jsonl"),
        )  # fmt: skip
        started.append(worker)
    for worker in started:
        worker.wait_text("ready.", timeout=60)
    return started


@pytest.fixture
def workers(spawn: Callable[..., Proc], broker_url: str, tmp_path: Path) -> list[Proc]:
    return start_workers(spawn, broker_url, tmp_path)


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
        # The countdown outlasts the `celery control revoke` CLI's start and its reply wait on
        # a loaded machine (seen: a 3 s countdown ran out before the revoke arrived).
        result = record.apply_async(("revoked",), countdown=8)
        sent = time.time()
        done = celery_cli(broker_url, tmp_path, "control", "revoke", result.id, "--timeout", "5",
                          "--json")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        # `celery control --json` prints a list of {node: reply}.
        replies = {k: v for reply in json.loads(done.stdout) for k, v in reply.items()}
        assert sorted(name.split("@")[0] for name in replies) == ["alpha", "beta"]
        assert all(result.id in reply["ok"] for reply in replies.values()), replies
        # Past the countdown, a later task runs; the revoked one never did.
        time.sleep(max(0.0, sent + 9 - time.time()))
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


def by_node(replies: list[dict[str, Any]] | dict[str, Any] | None) -> dict[str, Any]:
    """``{"alpha": reply, …}`` from a list of {node: reply} (control) or one dict (inspect)."""
    if isinstance(replies, list):
        replies = {k: v for reply in replies for k, v in reply.items()}
    return {name.split("@")[0]: reply for name, reply in (replies or {}).items()}


def test_inspect_and_control_commands_reach_both_workers_and_act(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    # A thread pool: a solo worker answers nothing while it runs a task, on any broker.
    workers = start_workers(spawn, broker_url, tmp_path, "threads")
    app = create_app(broker_url)
    try:
        # `limit=2`: return as soon as both workers replied (the CLI waits out its timeout).
        inspect = app.control.inspect(timeout=20, limit=2)
        stats = by_node(inspect.stats())
        assert sorted(stats) == ["alpha", "beta"]
        assert {s["broker"]["transport"] for s in stats.values()} == {"sqlqueue"}
        assert sorted(s["pid"] for s in stats.values()) == sorted(w.pid for w in workers)

        busy = app.tasks["e2e.record_late"].delay("busy", sleep=6)
        wait_until(lambda: "busy" in [e["label"] for e in started(tmp_path)], 30,
                   what="the long task to start")  # fmt: skip
        active = by_node(inspect.active())
        assert sorted(active) == ["alpha", "beta"]
        running = [t["id"] for tasks in active.values() for t in tasks]
        assert running == [busy.id]
        assert sorted(by_node(inspect.reserved())) == ["alpha", "beta"]

        def control(command: str, **arguments: Any) -> dict[str, Any]:
            replies = app.control.broadcast(command, arguments=arguments, reply=True,
                                            timeout=20, limit=2)  # fmt: skip
            return by_node(replies)

        limited = control("rate_limit", task_name="e2e.record", rate_limit="100/m")
        assert sorted(limited) == ["alpha", "beta"]
        assert all("rate limit set" in r["ok"] for r in limited.values()), limited

        added = control("add_consumer", queue="extra")
        assert sorted(added) == ["alpha", "beta"]
        assert all("extra" in r["ok"] for r in added.values()), added
        app.tasks["e2e.record"].apply_async(("on-extra",), queue="extra")
        wait_until(lambda: "on-extra" in ran(tmp_path), 30, what="a task on the added queue")
        consuming = by_node(inspect.active_queues())
        assert all("extra" in [q["name"] for q in qs] for qs in consuming.values()), consuming

        cancelled = control("cancel_consumer", queue="extra")
        assert sorted(cancelled) == ["alpha", "beta"]
        consuming = by_node(inspect.active_queues())
        assert all("extra" not in [q["name"] for q in qs] for qs in consuming.values())
        app.tasks["e2e.record"].apply_async(("stays-queued",), queue="extra")
    finally:
        app.close()

    # `celery control shutdown` from another process: both workers stop cleanly. (A worker
    # sends no reply to shutdown, on any broker: the CLI says "No nodes replied".)
    celery_cli(broker_url, tmp_path, "control", "shutdown", "--timeout", "2")
    for worker in workers:
        assert worker.wait(timeout=60) == 0, worker.output[-3000:]
        assert "Got shutdown from remote" in worker.output
    assert "stays-queued" not in ran(tmp_path)  # nobody consumed "extra" after the cancel
    assert sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = 'extra'") == [(1,)]
    left = sql(db_url, "SELECT exchange FROM askr_bindings WHERE exchange IN (?, ?)",
               "celery.pidbox", "reply.celery.pidbox")  # fmt: skip
    assert left == []


def started(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "tasks.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in lines if e["event"] == "started"]
