"""The Celery app the Celery ⇄ Laravel e2e tests run in a real ``celery worker``
(``-A laravel_celery_app``): plain ``@app.task(name=<PHP class>)`` tasks on Laravel queues.

Environment: ``LC_BROKER_URL`` (``sqlqueue+…``), ``LC_OUT`` (the file each task appends one
JSON line to), ``LC_LAYOUT`` (``laravel`` or ``askr``), ``LC_QUEUES`` (the Laravel-format
queues, comma-separated), ``LC_VISIBILITY`` (seconds), ``LC_MARKER`` (a file whose presence
makes ``App\\Jobs\\Flaky`` succeed), ``LC_FAIL_TUNED`` (``App\\Jobs\\Tuned`` always
raises), ``LC_CLASSES`` (the only classes with tasks, comma-separated; default
:data:`CLASSES`), ``LC_FAIL_CLASSES`` (classes whose task always raises),
``LC_UNIQUE_LOCKS`` (the format's ``unique_locks``: Laravel's ``cache_locks`` table),
``LC_COMPLETE_CLASSES`` (classes whose task writes an ``effects`` row and completes its job
in that transaction: ``kombu_sqlqueue.complete``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import sqlalchemy as sa
from celery import Celery
from laravel_support import APP_KEY

from kombu_sqlqueue import complete
from kombu_sqlqueue.store import parse_store_url
from laravel_bridge.messages import to_message

#: Every class the tests' Laravel jobs name, each a Celery task of that name.
CLASSES = (
    "App\\Jobs\\Scalars",
    "App\\Jobs\\Unicode",
    "App\\Jobs\\Floats",
    "App\\Jobs\\Nested",
    "App\\Jobs\\Dates",
    "App\\Jobs\\Enums",
    "App\\Jobs\\Promoted",
    "App\\Jobs\\Ping",
    "App\\Jobs\\Tuned",
    "App\\Jobs\\ChainStep",
    "App\\Jobs\\SecretWork",
    "App\\Jobs\\Flaky",
    "App\\Jobs\\AlwaysFails",
    "App\\Jobs\\Slow",
    "App\\Things\\SendShipmentNotification",
    "App\\Things\\OrderShippedMail",
    "App\\Things\\BatchStep",
    "App\\Things\\ExportOrders",
)


def record(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    meta = getattr(task.request, "laravel", None) or {}
    line = {
        "runner": "celery",
        "class": task.name,
        "args": to_message(list(args)),
        "kwargs": to_message(kwargs),
        "retries": task.request.retries,
        "attempts": meta.get("attempts"),
        "queue": (task.request.delivery_info or {}).get("routing_key"),
        "uuid": task.request.id,
        "pid": os.getpid(),
        "ran_at": time.time(),
    }
    # One short O_APPEND write per line: lines from several pool processes never interleave.
    with open(os.environ["LC_OUT"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return line


_engines: dict[int, sa.Engine] = {}


def complete_with_effect(task: Any) -> None:
    """Write one ``effects`` row (the task's id) and complete the job in that transaction."""
    engine = _engines.get(os.getpid())  # one per process: connections do not cross a fork
    if engine is None:
        url = parse_store_url(os.environ["LC_BROKER_URL"].removeprefix("sqlqueue+"))[1]
        engine = _engines[os.getpid()] = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO effects (label) VALUES (:id)"), {"id": task.request.id})
        complete(conn, task)


def behave(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What each job does in Celery: record the run, then fail or sleep as the test asks."""
    line = record(task, args, kwargs)
    name, attempts = task.name, line["attempts"]
    if name in os.environ.get("LC_COMPLETE_CLASSES", "").split(","):
        complete_with_effect(task)
    if name in os.environ.get("LC_FAIL_CLASSES", "").split(","):
        raise RuntimeError(f"{name} fails here")
    if name == "App\\Jobs\\AlwaysFails":
        raise RuntimeError(kwargs.get("message", "boom"))
    if name == "App\\Jobs\\Tuned" and os.environ.get("LC_FAIL_TUNED"):
        raise RuntimeError(f"tuned attempt {attempts}")
    if name == "App\\Jobs\\Flaky" and not os.path.exists(
        os.environ.get("LC_MARKER", "/nonexistent")
    ):
        raise RuntimeError(f"flaky attempt {attempts}")
    if name == "App\\Jobs\\Slow":
        time.sleep(float(kwargs["seconds"]))  # past its timeout: Celery's hard time limit
    label = str(kwargs.get("label", ""))
    if name in ("App\\Jobs\\Ping", "App\\Things\\BatchStep") and label.startswith("fail"):
        raise RuntimeError(f"{label}: attempt {attempts}")
    if name == "App\\Jobs\\Ping" and label.startswith("sleep-once") and attempts == 1:
        time.sleep(120)  # killed meanwhile


def make_task(app: Celery, name: str) -> None:
    @app.task(name=name, bind=True, shared=False)
    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        behave(self, args, kwargs)


def create_app() -> Celery:
    app = Celery("laravel_celery", broker=os.environ["LC_BROKER_URL"], set_as_current=False)
    layout = os.environ.get("LC_LAYOUT", "laravel")
    fmt = {"format": "laravel", "layout": layout, "app_key": APP_KEY}
    if os.environ.get("LC_UNIQUE_LOCKS"):
        fmt["unique_locks"] = os.environ["LC_UNIQUE_LOCKS"]
    queues = os.environ.get("LC_QUEUES", "default,emails").split(",")
    app.conf.update(
        broker_transport_options={
            "queue_formats": {q: fmt for q in queues},
            "visibility_timeout": float(os.environ.get("LC_VISIBILITY", "10")),
            "polling_interval": 0.05,
            "max_polling_interval": 0.5,
        },
        # Laravel's rules: a job is deleted when it succeeds, and comes back if its worker dies.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=queues[0],
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
    )
    only = os.environ.get("LC_CLASSES")
    for name in only.split(",") if only else CLASSES:
        make_task(app, name)
    return app


app = create_app() if "LC_BROKER_URL" in os.environ else Celery("laravel_celery")
