"""Celery app the e2e tests run in a real ``celery worker`` subprocess.

The worker builds it from environment variables (``-A apps.celery_app``); a
test builds its own copy with :func:`create_app` to send tasks with ``.delay()``.

* ``E2E_BROKER_URL`` — ``sqlqueue+sqlite:////abs/path/q.db``
* ``E2E_OUT`` — file each task appends one JSON line to (there is no result backend)
* ``E2E_VISIBILITY`` — transport ``visibility_timeout`` in seconds (default 3)
* ``E2E_PREFETCH`` — ``worker_prefetch_multiplier`` (default 1)
* ``E2E_MAX_ATTEMPTS`` — transport ``max_attempts`` (default 25)
* ``E2E_DB_URL`` — the broker's database as the application sees it (``e2e.effect`` writes
  its effect row there and completes in that transaction)
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import sqlalchemy as sa
from celery import Celery

QUEUE = "e2e"
_engines: dict[int, sa.Engine] = {}


def _app_engine() -> sa.Engine:
    """The application's engine on the broker's database, one per process (a pool child
    opens its own: connections do not cross a fork)."""
    engine = _engines.get(os.getpid())
    if engine is None:
        from kombu_sqlqueue.store import parse_store_url  # the package's drivers

        url = parse_store_url(os.environ["E2E_DB_URL"])[1]
        engine = _engines[os.getpid()] = sa.create_engine(url)
    return engine


def _record(event: str, label: str, request: Any) -> None:
    info = request.delivery_info or {}
    line = json.dumps(
        {
            "event": event,
            "label": label,
            "t": time.time(),
            "pid": os.getpid(),
            "redelivered": bool(info.get("redelivered")),
        }
    )
    # One short O_APPEND write per line: lines from several pool children never interleave.
    with open(os.environ["E2E_OUT"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


def create_app(
    broker_url: str, visibility: float = 3.0, prefetch: int = 1, max_attempts: int = 25
) -> Celery:
    app = Celery("e2e_app", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_transport_options={
            "visibility_timeout": visibility,
            "polling_interval": 0.1,
            "max_attempts": max_attempts,
        },
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        worker_prefetch_multiplier=prefetch,
        task_ignore_result=True,
    )

    @app.task(bind=True, name="e2e.record", shared=False)
    def record(self: Any, label: str) -> None:
        """Append a line saying this task ran."""
        _record("ran", label, self.request)

    @app.task(bind=True, name="e2e.record_late", acks_late=True, shared=False)
    def record_late(
        self: Any, label: str, sleep: float = 0.0, sleep_redelivered: float = 0.0
    ) -> None:
        """acks_late; sleeps ``sleep`` (``sleep_redelivered`` when redelivered)."""
        redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
        _record("started", label, self.request)
        time.sleep(sleep_redelivered if redelivered else sleep)
        _record("ran", label, self.request)

    @app.task(
        bind=True, name="e2e.die_once", acks_late=True, reject_on_worker_lost=True, shared=False
    )
    def die_once(self: Any, label: str) -> None:
        """The pool child dies on the first delivery; the redelivery completes."""
        _record("started", label, self.request)
        if not (self.request.delivery_info or {}).get("redelivered"):
            os._exit(1)
        _record("ran", label, self.request)

    @app.task(bind=True, name="e2e.kill_worker", acks_late=True, shared=False)
    def kill_worker(self: Any, label: str) -> None:
        """Kills the process running it (with --pool=solo: the worker itself), every time."""
        _record("started", label, self.request)
        os._exit(1)

    @app.task(bind=True, name="e2e.limited", rate_limit="1/m", shared=False)
    def limited(self: Any, label: str) -> None:
        """Rate-limited: the worker holds the later messages (unacked) in its token bucket."""
        _record("ran", label, self.request)

    @app.task(bind=True, name="e2e.effect", acks_late=True, shared=False)
    def effect(
        self: Any,
        label: str,
        hold: float = 0.0,
        *,
        before: float = 0.0,
        after: float = 0.0,
        completes: bool = True,
        quiet: bool = False,
        retry: str = "",
    ) -> None:
        """Writes one effect row and (``completes``) completes its delivery in the same
        transaction (``kombu_sqlqueue.complete``); on a first delivery it holds ``hold``
        seconds between the two. ``before``/``after``: work outside the transaction.
        ``quiet``: no task lines (a run of thousands). ``retry`` (first delivery only):
        ``"after"`` — ``self.retry()`` once the transaction committed; ``"inside"`` — raised
        inside it, after ``complete()``, so the transaction rolls back."""
        from kombu_sqlqueue import complete

        redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
        if not quiet:
            _record("started", label, self.request)
        time.sleep(before)
        with _app_engine().begin() as conn:
            conn.execute(
                sa.text("INSERT INTO effects (label, pid) VALUES (:label, :pid)"),
                {"label": label, "pid": os.getpid()},
            )
            if not redelivered:
                time.sleep(hold)
            if completes:
                complete(conn)
            if retry == "inside" and self.request.retries == 0:
                raise self.retry(countdown=0)
        time.sleep(after)
        if not quiet:
            _record("ran", label, self.request)
        if retry == "after" and self.request.retries == 0:
            raise self.retry(countdown=0)

    @app.task(bind=True, name="e2e.fail", shared=False)
    def fail(self: Any, label: str) -> None:
        """Raises: a task-failed event for monitors."""
        _record("started", label, self.request)
        raise RuntimeError(f"{label} fails on purpose")

    return app


if "E2E_BROKER_URL" in os.environ:
    app = create_app(
        os.environ["E2E_BROKER_URL"],
        visibility=float(os.environ.get("E2E_VISIBILITY", "3")),
        prefetch=int(os.environ.get("E2E_PREFETCH", "1")),
        max_attempts=int(os.environ.get("E2E_MAX_ATTEMPTS", "25")),
    )
