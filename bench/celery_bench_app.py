"""The tiny Celery app of ``bench_transports.py``'s Celery scenario.

The worker subprocess imports this module (``celery -A celery_bench_app``); the
broker URL, prefetch multiplier and completion file come from the environment,
so one module serves every transport. The benchmark process builds its
publishing app with :func:`make_app` too, so both sides share one config.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery

QUEUE = "bench_celery"
TASK_NAME = "bench.noop"


def make_app(
    broker_url: str,
    prefetch_multiplier: int,
    transport_options: dict[str, Any] | None = None,
    *,
    remote_control: bool = False,
    task_seconds: float = 0.0,
) -> Celery:
    """A Celery app with no result backend, late acks and the given prefetch.
    ``remote_control``: Celery's default (a broadcast ``pidbox`` queue beside the task
    queue); ``task_seconds``: what each task sleeps (a task that does some work)."""
    app = Celery("celery_bench_app", broker=broker_url, backend=None, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        worker_prefetch_multiplier=prefetch_multiplier,
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        # Identical for every transport: no remote control unless asked (pidbox is a
        # fanout exchange, which Kombu's SQLAlchemy transport lacks), no events, no gossip.
        worker_enable_remote_control=remote_control,
        worker_send_task_events=False,
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_transport_options=transport_options or {},
    )

    _fd: list[int] = []

    @app.task(name=TASK_NAME, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def noop(i: int) -> None:
        # Completion marker: one timestamped line per task in a shared file
        # (O_APPEND writes of a few bytes are atomic across processes).
        if task_seconds:
            time.sleep(task_seconds)
        path = os.environ.get("BENCH_DONE_FILE")
        if path is None:
            return None
        if not _fd:
            _fd.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        os.write(_fd[0], f"{time.time():.6f}\n".encode())
        return None

    return app


app = make_app(
    os.environ.get("BENCH_BROKER_URL", "memory://"),
    int(os.environ.get("BENCH_PREFETCH_MULTIPLIER", "8")),
    json.loads(os.environ.get("BENCH_TRANSPORT_OPTIONS", "{}")),
    remote_control=os.environ.get("BENCH_REMOTE_CONTROL") == "1",
    task_seconds=float(os.environ.get("BENCH_TASK_SECONDS", "0")),
)
