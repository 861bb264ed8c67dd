"""How long PHP-only jobs wait on a queue shared with a Python worker, beside PHP alone.

Usage::

    python bench/bench_shared_queue.py [--engines sqlite postgresql mariadb] [--mails 40]
                                       [--sleeps 0.1 3] [--cap 90] [--repeat 1] [--json out.json]

Laravel 8.83 queues ``--mails`` mailables (``Mail::to()->queue()``, through
``tests/e2e_laravel/php/queue_harness.php``) on a fresh ``jobs`` table; then a PHP worker
(``queue:work`` as a daemon, ``--sleep S``) sends them with the array transport, alone or
beside one Python worker (the real ``laravel-bridge work`` CLI, same ``--sleep``, handlers for
another class only: the mails are not its to run):

* ``php alone``
* ``+ python --claim all``: the Python worker reserves every job, and hands a job it has no
  handler for back with ``--unknown-delay`` (60 s): what issue 14 found;
* ``+ python --claim handled`` (the default since): the Python worker reserves only jobs of
  classes it has handlers for.

Measured: seconds from the PHP worker's start until the last mail went out (the time PHP
records it sent; the Python worker was started ``WARM_UP`` = 3 s before); ``≥ cap`` when
not all were sent within ``--cap`` seconds (then how many were). Ratios are against
``php alone`` with the same ``--sleep``. Every process is stopped (SIGTERM) and every
server and file removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e_laravel"))

import servers  # noqa: E402
from laravel_harness import LaravelQueueHarness  # noqa: E402

HANDLERS = """
from laravel_bridge import handles


@handles("App\\\\Jobs\\\\SomethingElse")
def something_else(job):
    pass
"""

#: Seconds the Python worker runs before the PHP worker starts (its interpreter's start-up).
WARM_UP = 3.0

CONFIGS = ("php alone", "+ python --claim all", "+ python --claim handled")


def run_cell(db_url: str, workdir: Path, mails: int, sleep: float, config: str, cap: float) -> Any:
    log = workdir / f"log-{time.monotonic_ns()}.jsonl"
    php = LaravelQueueHarness(_php(), db_url, log)
    php.migrate()
    php.run("queue-things", *["mailable"] * mails, with_key=True)
    python = None
    if config != "php alone":
        claim = config.rsplit(" ", 1)[1]
        python = subprocess.Popen(
            [sys.executable, "-m", "laravel_bridge", "work", "--url", db_url,
             "--layout", "laravel", "--sleep", str(sleep), "--claim", claim,
             "--handlers", "bench_shared_handlers"],
            env={**os.environ, "PYTHONPATH": f"{workdir}{os.pathsep}{HERE.parent}"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(WARM_UP)  # in service before PHP starts, as a deployed worker is
    started = time.time()
    worker = php.start_work(sleep=sleep)
    try:
        deadline = time.monotonic() + cap
        while time.monotonic() < deadline and len(php.runs()) < mails:
            time.sleep(0.05)
    finally:
        for proc in (worker, python):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
        if python is not None:
            python.wait(timeout=60)
    sent = [r["ran_at"] for r in php.runs() if r["class"] == "mail"]
    if len(sent) < mails:
        return {"seconds": None, "sent": len(sent)}
    return {"seconds": max(sent) - started, "sent": len(sent)}


def _php() -> str:
    return os.environ.get("PHP", "php")


def database(engine: str, server: Any, workdir: Path, n: int) -> str:
    if engine == "sqlite":
        return f"sqlite:///{workdir / f'shared-{n}.db'}"
    return str(server.create_database(f"shared_{n}"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", nargs="+", default=["sqlite"],
                   choices=["sqlite", "postgresql", "mariadb"])  # fmt: skip
    p.add_argument("--mails", type=int, default=40)
    p.add_argument("--sleeps", type=float, nargs="+", default=[0.1, 3.0])
    p.add_argument("--cap", type=float, default=90.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        workdir = Path(tmp)
        (workdir / "bench_shared_handlers.py").write_text(HANDLERS)
        n = 0
        for engine in args.engines:
            server = None
            if engine != "sqlite":
                pg = engine == "postgresql"
                server = servers.start_postgresql() if pg else servers.start_mariadb()
            try:
                for sleep in args.sleeps:
                    for config in CONFIGS:
                        cells = []
                        for _ in range(args.repeat):
                            n += 1
                            url = database(engine, server, workdir, n)
                            cell = run_cell(url, workdir, args.mails, sleep, config, args.cap)
                            cells.append(cell)
                        done = [c["seconds"] for c in cells if c["seconds"] is not None]
                        row = {
                            "engine": engine, "sleep": sleep, "config": config,
                            "seconds": statistics.median(done) if len(done) == len(cells) else None,
                            "sent": min(c["sent"] for c in cells), "runs": cells,
                        }  # fmt: skip
                        results.append(row)
                        print(_line(row, results, args), flush=True)
            finally:
                if server is not None:
                    server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _line(row: dict[str, Any], results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    alone = next(
        r["seconds"]
        for r in results
        if r["engine"] == row["engine"] and r["sleep"] == row["sleep"] and r["config"] == CONFIGS[0]
    )
    if row["seconds"] is None:
        shown, ratio = f"≥ {args.cap:.0f} s ({row['sent']} of {args.mails} sent)", "—"
    else:
        shown = f"{row['seconds']:.1f} s"
        ratio = f"{row['seconds'] / alone:.2f}×" if alone else "—"
    return f"| {row['engine']} | {row['sleep']:g} | {row['config']} | {shown} | {ratio} |"


if __name__ == "__main__":
    sys.exit(main())
