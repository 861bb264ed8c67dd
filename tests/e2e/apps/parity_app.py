"""Celery app with a result backend, for the canvas and Redis-parity e2e tests.

Unlike ``apps.celery_app`` (no result backend), this app stores results with Celery's own
SQLAlchemy backend (``db+<url>``), so a test asserts on ``AsyncResult.get()`` and on states
such as ``REVOKED``. The worker builds it from environment variables
(``-A apps.parity_app``); a test builds its own copy with :func:`create_app`.

* ``E2E_BROKER_URL`` — the broker, e.g. ``sqlqueue+sqlite:////abs/q.db`` (Kombu's
  ``;``-separated failover list also works: Kombu splits it)
* ``E2E_RESULT_BACKEND`` — e.g. ``db+sqlite:////abs/results.db`` (see :func:`result_backend`)
* ``E2E_OUT`` — file the recording tasks append one JSON line to
* ``E2E_BACKOFF_BASE`` — transport ``backoff_base`` in seconds (default 1)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from celery import Celery
from celery.exceptions import Reject

QUEUE = "parity"
#: The transport's visibility timeout (seconds): short, so a lost delivery shows quickly.
VISIBILITY = 3.0


def result_backend(db_url: str, tmp_path: Path) -> str:
    """Celery's database result backend on the engine under test.

    PostgreSQL and MariaDB: the test's own database on the same server (Celery's
    ``celery_taskmeta`` tables sit next to ``askr_jobs``). SQLite: a separate file, so the
    backend's writers do not contend with the queue's for one database's write lock.
    ``db_url`` is a test's ``db_url`` fixture (no ``sqlqueue+`` prefix).
    """
    scheme, rest = db_url.split("://", 1)
    if scheme == "sqlite":
        return f"db+sqlite:///{tmp_path / 'results.db'}"
    # The tests' server URLs name no driver (the store picks one); SQLAlchemy's default for
    # mysql:// is MySQLdb, which is not installed: name the drivers the store uses.
    driver = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}.get(scheme, scheme)
    return f"db+{driver}://{rest}"


def worker_command(name: str, *pool: str) -> list[str]:
    """``celery worker`` for this app (default pool: prefork, two children)."""
    return [
        sys.executable, "-m", "celery", "-A", "apps.parity_app", "worker",
        *(pool or ("--pool=prefork", "-c", "2")), "-l", "info", "-n", f"{name}@%h",
    ]  # fmt: skip


def _record(event: str, label: str) -> None:
    line = json.dumps({"event": event, "label": label, "t": time.time(), "pid": os.getpid()})
    # One short O_APPEND write per line: lines from several pool children never interleave.
    with open(os.environ["E2E_OUT"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _count(label: str, event: str) -> int:
    path = os.environ["E2E_OUT"]
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return sum(1 for r in lines if r["event"] == event and r["label"] == label)


def create_app(broker_url: str, backend_url: str, backoff_base: float = 1.0) -> Celery:
    app = Celery("e2e_parity", broker=broker_url, backend=backend_url, set_as_current=False)
    app.conf.update(
        broker_transport_options={
            "visibility_timeout": VISIBILITY,
            "polling_interval": 0.1,
            "backoff_base": backoff_base,
        },
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        worker_prefetch_multiplier=1,
        # chord_unlock polls the group's results; its default (1 s) is fine, said for the reader.
        result_chord_retry_interval=1.0,
    )

    @app.task(name="parity.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="parity.mul", shared=False)
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="parity.tsum", shared=False)
    def tsum(values: list[int]) -> int:
        """A chord's body: gets the header's results as a list."""
        return sum(values)

    @app.task(name="parity.gate", shared=False)
    def gate(path: str, value: int) -> int:
        """Return ``value`` once the file ``path`` exists (the test opens the gate; 60 s max)."""
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {path} never opened")
            time.sleep(0.05)
        return value

    @app.task(name="parity.record", shared=False)
    def record(label: str) -> str:
        """Append a line saying this task ran; return the label."""
        _record("ran", label)
        return label

    @app.task(name="parity.reject_once", acks_late=True, shared=False)
    def reject_once(label: str) -> str:
        """``Reject(requeue=True)`` on the first attempt (counted in ``E2E_OUT``), then runs."""
        _record("started", label)
        if _count(label, "started") == 1:
            raise Reject("first attempt: requeue", requeue=True)
        _record("ran", label)
        return label

    return app


if "E2E_BROKER_URL" in os.environ:
    app = create_app(
        os.environ["E2E_BROKER_URL"],
        os.environ["E2E_RESULT_BACKEND"],
        backoff_base=float(os.environ.get("E2E_BACKOFF_BASE", "1")),
    )
