"""Celery app the e2e tests run in a real ``celery worker`` subprocess.

Configured only through environment variables, so the worker and the test
process (which sends tasks) build the same app:

* ``E2E_BROKER_URL`` — ``sqlqueue+sqlite:////abs/path/q.db``
* ``E2E_OUT`` — file each task appends one line to (the "result backend")
* ``E2E_VISIBILITY`` — transport ``visibility_timeout`` in seconds (default 3)
* ``E2E_PREFETCH`` — ``worker_prefetch_multiplier`` (default 1)
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery

app = Celery("e2e_app", broker=os.environ["E2E_BROKER_URL"])
app.conf.update(
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("E2E_VISIBILITY", "3")),
        "polling_interval": 0.1,
    },
    broker_connection_retry_on_startup=True,
    task_default_queue="e2e",
    worker_prefetch_multiplier=int(os.environ.get("E2E_PREFETCH", "1")),
    task_ignore_result=True,
)


def _record(event: str, label: str, **extra: object) -> None:
    line = json.dumps({"event": event, "label": label, "t": time.time(), "pid": os.getpid(), **extra})
    # One short O_APPEND write per line: lines from several pool children never interleave.
    with open(os.environ["E2E_OUT"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


@app.task(bind=True)
def record(self, label: str) -> None:
    """Append a line saying this task ran."""
    info = self.request.delivery_info or {}
    _record("ran", label, redelivered=bool(info.get("redelivered")))


@app.task(bind=True, acks_late=True)
def record_late(self, label: str, sleep: float = 0.0) -> None:
    """acks_late: the message is acked after the task returns; optionally slow."""
    info = self.request.delivery_info or {}
    _record("started", label, redelivered=bool(info.get("redelivered")))
    time.sleep(sleep)
    _record("ran", label, redelivered=bool(info.get("redelivered")))
