"""Laravel and Python on one queue, end to end, on an SQLite file.

    python examples/laravel_queue/run.py [DATABASE_FILE]

1. Python dispatches jobs exactly as Laravel's `dispatch()` would (`LaravelQueue`) into
   Laravel's own `jobs` table — `php artisan queue:work` could run these rows too.
2. If PHP and Debian's Laravel 8.83 are installed, `dispatch.php` (real Illuminate queue code)
   dispatches one more job from PHP into the same table.
3. The Python worker (`laravel-bridge work`, here through its Python API) runs them all; a job
   that keeps failing lands in `failed_jobs`, where `php artisan queue:failed` lists it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import handlers  # noqa: E402,F401 — registers the @handles functions

from laravel_bridge import LaravelQueue, Worker, WorkerOptions  # noqa: E402

LARAVEL = Path("/usr/share/php/Illuminate/autoload.php")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="  (log) %(levelname)s %(message)s")
    db = Path(sys.argv[1] if len(sys.argv) > 1 else "laravel-demo.db").resolve()
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    queue = LaravelQueue(url)  # layout="laravel": Laravel's jobs / failed_jobs tables

    queue.dispatch("App\\Jobs\\ResizeImage", {"path": "/img/cat.png", "width": 640})
    queue.dispatch(
        "App\\Jobs\\SendInvoice",
        {"invoiceId": 7, "email": "ada@example.com"},
        queue="mail",
        tries=3,
        backoff=[0, 0],
    )
    queue.dispatch("App\\Jobs\\SendInvoice", {"invoiceId": 8, "email": None}, queue="mail", tries=2)
    print(f"Python dispatched 3 jobs into {db.name}")

    php = shutil.which("php")
    if php and LARAVEL.exists():
        out = subprocess.run(
            [php, str(HERE / "dispatch.php"), str(db)], check=True, capture_output=True, text=True
        )
        print(out.stdout.strip())
    else:
        print("(PHP or Laravel not installed: skipping the PHP dispatch)")

    worker = Worker(
        queue.table,
        WorkerOptions(queues=["mail", "default"], stop_when_empty=True, sleep=0),
        output=print,
    )
    worker.run()

    for row in queue.table.store.failed_jobs():  # type: ignore[attr-defined]
        print(f"failed_jobs: {row['uuid']} {row['queue']} {row['exception'].splitlines()[0]}")
    queue.close()


if __name__ == "__main__":
    main()
