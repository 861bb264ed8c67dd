"""Celery and Laravel on one queue, end to end, on an SQLite file.

    python examples/celery_laravel/run.py [DATABASE_FILE]

1. Laravel (PHP, Debian's Laravel 8.83: real Illuminate queue code, ``laravel.php``) dispatches
   ``App\\Jobs\\ResizeImage`` into its own ``jobs`` table.
2. A real ``celery worker`` (``tasks.py``: ``@app.task(name="App\\Jobs\\ResizeImage")``, broker
   ``sqlqueue+sqlite:///…`` with ``queue_formats={"default": "laravel"}``) runs it, and sends
   ``App\\Jobs\\NotifyUser`` back with ``send_task``.
3. Laravel's own worker (``Illuminate\\Queue\\Worker``) runs ``NotifyUser``.

Needs PHP (``php-cli``, ``php-sqlite3``) and ``php-laravel-framework``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LARAVEL = Path("/usr/share/php/Illuminate/autoload.php")

from laravel_bridge import LaravelQueue  # noqa: E402


def php(*args: str) -> str:
    done = subprocess.run(
        [shutil.which("php") or "php", str(HERE / "laravel.php"), *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def main() -> int:
    if not (shutil.which("php") and LARAVEL.exists()):
        print("this example needs PHP and Laravel (apt-get install php-cli php-sqlite3 "
              "php-laravel-framework)")  # fmt: skip
        return 1
    db = Path(sys.argv[1] if len(sys.argv) > 1 else "celery-laravel.db").resolve()
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    tables = LaravelQueue(url)  # Laravel's jobs / failed_jobs, as its migrations make them
    tables.size()
    tables.close()

    print(php("dispatch", str(db)))

    log = db.with_suffix(".celery.log")
    env = {**os.environ, "BROKER_URL": f"sqlqueue+{url}", "PYTHONPATH": str(HERE)}
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-P", "solo", "-Q",
             "default", "-l", "warning", "--without-mingle", "--without-gossip"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "sent App\\Jobs\\NotifyUser" not in log.read_text() and time.monotonic() < deadline:
            if worker.poll() is not None:
                break
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
    text = log.read_text()
    # The task's print()s, as Celery's worker logs them (stdout redirected to its log).
    print("\n".join(line.split("] ", 1)[-1] for line in text.splitlines() if "] Celery " in line))
    if "sent App\\Jobs\\NotifyUser" not in text:
        print(text[-3000:], file=sys.stderr)
        return 1

    ran = php("work", str(db))
    print(ran)
    queue = LaravelQueue(url)
    left = queue.size()
    queue.close()
    print(f"jobs left in the table: {left}")
    return 0 if left == 0 and "ran NotifyUser" in ran else 1


if __name__ == "__main__":
    sys.exit(main())
