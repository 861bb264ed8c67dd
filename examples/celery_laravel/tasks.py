"""The Celery side of the example: a plain task named after the PHP job class.

It runs ``App\\Jobs\\ResizeImage`` that Laravel dispatched, then hands work back to PHP
with ``send_task("App\\Jobs\\NotifyUser", …)``: a Laravel payload in the same ``jobs`` table,
which Laravel's own worker runs.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from celery import Celery

app = Celery(
    "celery_laravel", broker=os.environ.get("BROKER_URL", "sqlqueue+sqlite:///celery-laravel.db")
)
app.conf.update(
    broker_transport_options={
        "queue_formats": {"default": "laravel"},  # Laravel's jobs / failed_jobs tables
        "visibility_timeout": 90,  # Laravel's retry_after
        "polling_interval": 0.1,
    },
    task_acks_late=True,  # Laravel's rule: a job is deleted once it succeeded
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)


@app.task(name="App\\Jobs\\ResizeImage")
def resize_image(path: str, width: int) -> None:
    print(f"Celery ran App\\Jobs\\ResizeImage: resize {path} to {width}px", flush=True)
    app.send_task(
        "App\\Jobs\\NotifyUser",
        kwargs={"userId": 7, "message": f"{path} is ready", "resizedAt": datetime.now(UTC)},
        queue="default",
    )
    print("Celery sent App\\Jobs\\NotifyUser back to PHP", flush=True)
