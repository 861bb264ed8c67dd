"""A Celery app with a beat schedule, on the SQLite default.

``celery -A tasks beat`` sends ``tasks.tick`` every second — with this package's
``DatabaseScheduler``, as many beats as you start send each tick once; any number of
``celery -A tasks worker`` processes share the queue, and each tick runs once.
Each run appends one line (its task id, the worker's name) to ``TICKS_FILE``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from celery import Celery

HERE = Path(__file__).resolve().parent
BROKER_URL = os.environ.get("BROKER_URL", f"sqlqueue+sqlite:///{HERE / 'beat-example.db'}")
TICKS_FILE = Path(os.environ.get("TICKS_FILE", HERE / "ticks.jsonl"))

app = Celery("tasks", broker=BROKER_URL)
app.conf.update(
    beat_schedule={"tick-every-second": {"task": "tasks.tick", "schedule": 1.0}},
    # the schedule and each entry's last run in the broker's database: a beat on every
    # host, each tick sent once (docs/periodic-tasks.md)
    beat_scheduler="kombu_sqlqueue.beat:DatabaseScheduler",
    beat_max_loop_interval=1,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True)
def tick(self) -> str:
    line = {"id": self.request.id, "worker": self.request.hostname}
    # one short append per run: O_APPEND keeps lines of concurrent workers whole
    with TICKS_FILE.open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
    return str(self.request.id)
