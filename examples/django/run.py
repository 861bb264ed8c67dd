"""The Django example end to end: views, a worker, results through the ORM, beat — one database.

``DATABASE_URL`` picks the database (``postgresql://…`` or the default SQLite file
``shop.sqlite3``). The run: ``manage.py migrate``; then ``celery -A shop worker``,
``celery -A shop beat`` (django-celery-beat's DatabaseScheduler) and ``manage.py runserver``;
POST /orders/ enqueues a task per order, GET /tasks/<id>/ reads its django-celery-results row,
GET /orders/<id>/ the total the task wrote, GET /heartbeats/ what beat's schedule ran. Lists the
tables to show the app, the queue, the results and the schedule share the database. Exits 1
if anything is missing or wrong.

    python examples/django/run.py
    DATABASE_URL=postgresql://app:secret@127.0.0.1/shop python examples/django/run.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.chdir(HERE)
sys.path.insert(0, str(HERE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
LOGS = Path(os.environ.get("EXAMPLE_LOGS", HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(base: str, path: str, form: dict[str, str] | None = None) -> Any:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    with urllib.request.urlopen(base + path, data=data, timeout=10) as response:
        return json.load(response)


def start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
    with (LOGS / f"{name}.log").open("wb") as out:
        return subprocess.Popen(args, cwd=HERE, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise SystemExit(f"FAILED: {what} within {timeout:.0f}s (logs in {LOGS})")


def main() -> int:
    if "DATABASE_URL" not in os.environ:
        for stale in HERE.glob("shop.sqlite3*"):
            stale.unlink()  # a fresh single-file database each run
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=HERE, check=True)

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    # The queue's tables, made at deploy time as migrate makes the app's: a view enqueues
    # inside its transaction, where SQLite (one writer at a time) could not create them.
    kombu_sqlqueue = str(Path(sys.executable).with_name("kombu-sqlqueue"))
    subprocess.run([kombu_sqlqueue, "create-tables", settings.CELERY_BROKER_URL], check=True)
    db = settings.DATABASES["default"]
    print(f"database: {db['ENGINE']} {db['NAME']}; broker: {settings.CELERY_BROKER_URL}")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    celery = [sys.executable, "-m", "celery", "-A", "shop"]
    procs = [
        start("worker", [*celery, "worker", "-c", "2", "-l", "info"]),
        start("beat", [*celery, "beat", "-l", "info"]),
        start("web", [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"]),
    ]
    try:
        wait_for("the web server to listen", lambda: _listening(port))
        orders = [
            call(base, "/orders/", {"quantity": str(q), "unit_price_cents": "250"})
            for q in range(1, 6)
        ]
        print(f"{base}: POST /orders/ ×{len(orders)} enqueued {[o['task_id'][:8] for o in orders]}")
        for q, order in enumerate(orders, start=1):
            status = wait_for(
                f"task {order['task_id']} to succeed",
                lambda o=order: (
                    (s := call(base, f"/tasks/{o['task_id']}/"))["status"] == "SUCCESS" and s
                ),
            )
            total = call(base, f"/orders/{order['order_id']}/")["total_cents"]
            task, order_id = order["task_id"][:8], order["order_id"]
            print(f"  /tasks/{task}/ -> {status['status']} result={status['result']}"
                  f" by {status['worker']}; /orders/{order_id}/ total_cents={total}")  # fmt: skip
            if json.loads(status["result"]) != q * 250 or total != q * 250:
                print(f"FAILED: expected {q * 250}")
                return 1
        # A view that fails after it enqueued: its transaction rolls back, and the task too.
        try:
            call(base, "/orders/", {"quantity": "9", "unit_price_cents": "1", "reject": "1"})
            print("FAILED: the rejected order was accepted")
            return 1
        except urllib.error.HTTPError as exc:
            rejected = json.load(exc)
        from kombu_sqlqueue.store import JobStore

        queue = JobStore(settings.CELERY_BROKER_URL.removeprefix("sqlqueue+"))
        waiting, failed = queue.backlog("celery").total, queue.dead_letters("celery")
        queue.close()
        status = call(base, f"/tasks/{rejected['task_id']}/")["status"]
        if waiting or failed or status != "PENDING":
            print(f"FAILED: a rolled-back order left a task ({waiting} waiting, {status})")
            return 1
        print(f"  POST /orders/ rejected after enqueueing -> rolled back: task "
              f"{rejected['task_id'][:8]} never stored, never run ({status})")  # fmt: skip
        beats = wait_for(
            "beat's heartbeat schedule to run twice",
            lambda: (h := call(base, "/heartbeats/"))["count"] >= 2 and h,
        )
        print(
            f"  /heartbeats/ -> {beats['count']} runs of the beat schedule, by {beats['workers']}"
        )
        tables = set(connection.introspection.table_names())
        shared = ["orders_order", "askr_jobs", "django_celery_results_taskresult",
                  "django_celery_beat_periodictask"]  # fmt: skip
        missing = [t for t in shared if t not in tables]
        if missing:
            print(f"FAILED: tables missing from the one database: {missing}")
            return 1
        print(f"one database holds the app, the queue, the results and the schedule: {shared}")
        print("django example finished: views, worker, results and beat all ran.")
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        connection.close()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
