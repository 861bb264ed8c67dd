"""Celery events over the SQL broker: a worker run with ``-E`` and a monitor in another process.

The monitor is ``app.events.Receiver`` (what ``celery events`` and Flower use): its event queue is
bound to the ``celeryev`` topic exchange in ``askr_bindings``, so the worker's events reach it
although the worker never declared that binding. On every engine.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apps.celery_app import create_app
from e2e_harness import Proc, sql, wait_until

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
            [sys.executable, "-m", "celery", "-A", "apps.celery_app", "worker",
             "--pool=solo", "-E", "-l", "info", "-n", "evented@%h"],
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
