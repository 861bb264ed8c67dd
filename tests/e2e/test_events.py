"""Celery events over the SQL broker: a worker run with ``-E`` and a monitor in another process.

The monitor is ``app.events.Receiver`` (what ``celery events`` and Flower use): its event queue is
bound to the ``celeryev`` topic exchange in ``askr_bindings``, so the worker's events reach it
although the worker never declared that binding. On every engine.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apps.celery_app import create_app
from e2e_harness import Proc, celery_worker_args, sql, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_monitor_receives_heartbeats_and_task_events_of_a_worker_run_with_E(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    app = create_app(broker_url)
    events: list[dict[str, Any]] = []
    ready = threading.Event()
    with app.connection_for_read() as conn:
        receiver = app.events.Receiver(conn, handlers={"*": events.append})

        def capture() -> None:
            ready.set()
            receiver.capture(limit=None, timeout=None, wakeup=False)

        thread = threading.Thread(target=capture, daemon=True)
        thread.start()
        ready.wait(10)
        worker = spawn(
            "evented",
            celery_worker_args("evented", "-E", pool="solo"),
            E2E_BROKER_URL=broker_url,
            E2E_OUT=str(tmp_path / "tasks.jsonl"),
        )  # fmt: skip
        worker.wait_text("ready.", timeout=60)
        ok = app.tasks["e2e.record"].delay("observed")
        bad = app.tasks["e2e.fail"].delay("doomed")

        def kinds(task_id: str | None = None) -> set[str]:
            return {
                e["type"] for e in list(events)
                if task_id is None or e.get("uuid") == task_id
            }  # fmt: skip

        wait_until(
            lambda: (
                {"task-received", "task-started", "task-succeeded"} <= kinds(ok.id)
                and "task-failed" in kinds(bad.id)
                and "worker-heartbeat" in kinds()
            ),
            60,
            what="heartbeats and task events at the monitor",
        )
        receiver.should_stop = True
        thread.join(15)
    failed = next(e for e in events if e["type"] == "task-failed")
    assert "fails on purpose" in failed["exception"]
    assert any(e["type"] == "worker-heartbeat" and e["hostname"].startswith("evented@")
               for e in events)  # fmt: skip
    # The monitor is gone: its event queue and binding went with it.
    time.sleep(0.5)
    left = sql(db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celeryev'")
    assert left == []
    app.close()


def test_celery_events_dump_shows_heartbeats_and_task_events_and_leaves_nothing(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    # The `celery events` CLI in its non-curses mode, as a user would run it beside a worker.
    monitor = spawn(
        "events",
        [sys.executable, "-m", "celery", "-A", "apps.celery_app", "events", "--dump"],
        E2E_BROKER_URL=broker_url,
    )  # fmt: skip

    def bound() -> list[tuple[Any, ...]]:
        try:
            return sql(db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celeryev'")
        except Exception as exc:  # the monitor has not created the tables yet
            if "askr_bindings" not in str(exc):
                raise
            return []

    monitor.wait_text("-> evdump: starting capture", timeout=60)
    wait_until(bound, 60, what="`celery events` bound to celeryev")
    worker = spawn(
        "evented",
        celery_worker_args("dumped", "-E", pool="solo"),
        E2E_BROKER_URL=broker_url,
        E2E_OUT=str(tmp_path / "tasks.jsonl"),
    )  # fmt: skip
    worker.wait_text("ready.", timeout=60)
    app = create_app(broker_url)
    try:
        task_id = app.tasks["e2e.record"].delay("dumped").id
    finally:
        app.close()

    def shown(kind: str) -> bool:
        return any(
            line.startswith("dumped@") and kind in line and task_id in line
            for line in monitor.output.splitlines()
        )

    wait_until(lambda: shown("task received") and shown("task succeeded"), 60,
               what="`celery events --dump` printing the task's events")  # fmt: skip
    wait_until(lambda: "] heartbeat" in monitor.output, 60, what="a worker heartbeat")
    # Stopped with Ctrl-C (SIGINT): it closes its connection and its queue goes at once. (A
    # SIGTERM kills `celery events` outright, as SIGKILL would: then the queue's x-expires,
    # Celery's event_queue_expires of 60 s, removes it; see test_control.py for a killed
    # worker's queue.)
    monitor.send_signal(signal.SIGINT)
    monitor.popen.wait(timeout=30)
    wait_until(lambda: not bound(), 15, what="the monitor's binding to go")
    queues = [str(r[0]) for r in sql(db_url, "SELECT name FROM askr_queues")]
    assert [q for q in queues if q.startswith("celeryev.")] == []
    worker.send_signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)


MONITOR = """
import sys
from apps.celery_app import create_app

app = create_app(sys.argv[1])
with app.connection_for_read() as conn:
    receiver = app.events.Receiver(conn, handlers={"*": lambda event: None},
                                   queue_expires=float(sys.argv[2]))
    print("capturing", flush=True)
    receiver.capture(limit=None, timeout=None, wakeup=False)
"""


def test_a_killed_monitors_queue_and_its_events_go_within_its_expiry(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    expires = 4.0  # Celery's event_queue_expires (default 60 s), shortened for the test
    worker = spawn(
        "evented",
        celery_worker_args("survivor", "-E", pool="solo"),
        E2E_BROKER_URL=broker_url,
        E2E_OUT=str(tmp_path / "tasks.jsonl"),
    )  # fmt: skip
    worker.wait_text("ready.", timeout=60)
    monitor = spawn("monitor", [sys.executable, "-c", MONITOR, broker_url, str(expires)])
    monitor.wait_text("capturing", timeout=60)

    def monitor_queues() -> set[str]:
        rows = sql(db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celeryev'")
        return {str(r[0]) for r in rows}

    (queue,) = wait_until(monitor_queues, 30, what="the monitor's binding")
    monitor.send_signal(signal.SIGKILL)  # no goodbye: nothing deletes its queue but expiry
    monitor.popen.wait(timeout=30)
    killed_at = time.monotonic()
    # The worker's heartbeats (every 2 s) keep being routed to the dead monitor's queue...
    wait_until(lambda: sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = ?", queue)[0][0],
               30, what="events piling up for the dead monitor")  # fmt: skip
    # ...until the surviving worker's queue keeper deletes it: within its lifetime plus the
    # keeper's period (a third of the worker's 10 s pidbox lifetime) and a margin.
    wait_until(lambda: not monitor_queues(), expires + 10 / 3 + 8,
               what="the dead monitor's queue to expire")  # fmt: skip
    gone_after = time.monotonic() - killed_at
    assert gone_after >= expires - 1.5, gone_after  # expiry, not something else, removed it
    assert sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = ?", queue) == [(0,)]
    assert sql(db_url, "SELECT count(*) FROM askr_queues WHERE name = ?", queue) == [(0,)]
    worker.send_signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)
