"""A stock Celery app. The broker URL is the only kombu-sqlqueue-specific line."""

from __future__ import annotations

import os
import time

from celery import Celery

app = Celery(
    "tasks",
    broker=os.environ.get("BROKER_URL", "sqlqueue+sqlite:///demo-queue.db"),
    # Celery's own SQLAlchemy result backend, on a second SQLite file.
    backend=os.environ.get("RESULT_BACKEND", "db+sqlite:///demo-results.db"),
)
app.conf.update(
    task_acks_late=True,  # ack after the task ran: a crash mid-task redelivers it
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=4,
    broker_transport_options={"visibility_timeout": 60},
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def resize(image: str, seconds: float = 0.2) -> str:
    time.sleep(seconds)  # stands in for real work
    return f"{image} resized"
