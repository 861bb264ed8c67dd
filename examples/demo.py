"""The README's demo: a real Celery worker on the SQLite default, processing tasks.

Starts ``celery -A tasks worker`` as a subprocess, sends tasks (plain, with a
countdown, with priorities), prints each result as it arrives and the queue's
backlog as it drains, then stops the worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.chdir(HERE)

from tasks import add, app, resize  # noqa: E402

from kombu_sqlqueue.store import JobStore  # noqa: E402


def describe(store: JobStore) -> str:
    b = store.backlog("celery")
    return f"queue 'celery': {b.total} waiting ({b.ready} ready now, {b.total - b.ready} delayed)"


#: The start of the warning Celery prints when its worker runs as root.
ROOT_WARNING = "You're running the worker with superuser privileges"


def worker_environment() -> dict[str, str]:
    """The worker's environment. As root (a container, a CI machine), Celery prints a
    SecurityWarning in the middle of the demo's output: said here once, and silenced."""
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        print(
            "note: running as root, so Celery would warn that its worker has superuser "
            "privileges; harmless for this demo (the worker accepts JSON only, not pickle), "
            "and silenced here. In production, run workers as a normal user "
            "(celery worker --uid)."
        )
        previous = env.get("PYTHONWARNINGS")
        env["PYTHONWARNINGS"] = ",".join(filter(None, [previous, f"ignore:{ROOT_WARNING}"]))
    return env


def main() -> int:
    for stale in HERE.glob("demo-*.db*"):
        stale.unlink()
    broker = app.conf.broker_url
    print(f"broker: {broker}")
    store = JobStore(broker.removeprefix("sqlqueue+"))

    sent = time.monotonic()
    results = [add.delay(i, i) for i in range(20)]
    results += [resize.apply_async((f"photo-{i}.jpg",), priority=i % 10) for i in range(10)]
    later = add.apply_async((40, 2), countdown=3)
    print(f"sent {len(results) + 1} tasks; {describe(store)}")

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-c", "2", "-l", "warning"],
        cwd=HERE,
        env=worker_environment(),
    )
    try:
        for r in results:
            print(f"  {r.id[:8]} -> {r.get(timeout=60)!r}")
        print(f"after the worker ran them: {describe(store)}")
        print(f"countdown task -> {later.get(timeout=60)!r} "
              f"({time.monotonic() - sent:.1f}s after sending; countdown was 3s)")  # fmt: skip
        print("demo finished: every task ran exactly as sent.")
        return 0
    finally:
        worker.send_signal(signal.SIGTERM)  # warm shutdown: finish, settle, stop
        worker.wait(timeout=30)
        store.close()


if __name__ == "__main__":
    sys.exit(main())
