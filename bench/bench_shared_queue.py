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

With ``--mixed N`` it measures instead 2 PHP and 2 Python workers (``--sleep 0.1``) draining
N ``App\\Jobs\\Ping`` jobs both can run: seconds to drain, how many each side ran, and the
rows left reserved because Laravel's own delete was refused (SQLite's ``database is locked``:
those jobs would run again after ``retry_after``).

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

PING_HANDLERS = """
import json, os
from laravel_bridge import handles


@handles("App\\\\Jobs\\\\Ping")
def ping(job):
    with open(os.environ["PY_RUNS"], "a") as f:
        f.write(json.dumps({"uuid": job.uuid}) + "\\n")
"""

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


def run_mixed(db_url: str, workdir: Path, jobs: int, cap: float) -> dict[str, Any]:
    """2 PHP + 2 Python workers on ``jobs`` Pings: seconds, runs by side, rows left."""
    from laravel_bridge import LaravelQueue

    tag = time.monotonic_ns()
    php = LaravelQueueHarness(_php(), db_url, workdir / f"mixed-{tag}.jsonl")
    php.migrate()
    lq = LaravelQueue(db_url, "laravel", create_tables=False)
    lq.dispatch_many([("App\\Jobs\\Ping", {"label": f"p{i}"}) for i in range(jobs)])
    py_runs = workdir / f"mixed-py-{tag}.jsonl"
    env = {
        **os.environ,
        "PY_RUNS": str(py_runs),
        "PYTHONPATH": f"{workdir}{os.pathsep}{HERE.parent}",
    }
    err = (workdir / f"mixed-{tag}.err").open("w")
    started = time.monotonic()
    workers = [php.start_work(workdir / f"mixed-{tag}-{n}.out", sleep=0.1) for n in range(2)]
    workers += [
        subprocess.Popen(
            [sys.executable, "-m", "laravel_bridge", "work", "--url", db_url, "--layout", "laravel",
             "--sleep", "0.1", "--handlers", "bench_mixed_handlers"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
        for _ in range(2)
    ]  # fmt: skip

    def ran() -> tuple[int, int]:
        by_python = len(py_runs.read_text().splitlines()) if py_runs.exists() else 0
        return len(php.runs()), by_python

    try:
        deadline = time.monotonic() + cap
        while time.monotonic() < deadline and sum(ran()) < jobs:
            time.sleep(0.05)
        seconds = time.monotonic() - started
        time.sleep(0.5)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        stderr = "".join(proc.communicate(timeout=60)[1] or "" for proc in workers[:2])
        for proc in workers[2:]:
            proc.wait(timeout=60)
        err.close()
    by_php, by_python = ran()
    left = lq.size("default")
    lq.close()
    locked = stderr.count("database is locked")
    return {"seconds": seconds, "php": by_php, "python": by_python, "left": left,
            "locked": locked}  # fmt: skip


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
    p.add_argument("--mixed", type=int, default=0, help="2 PHP + 2 Python workers on N jobs")
    args = p.parse_args(argv)
    if args.mixed:
        return mixed(args)

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


def mixed(args: argparse.Namespace) -> int:
    results: list[dict[str, Any]] = []
    print(
        "| engine | run | seconds | by PHP | by Python | left reserved (Laravel's delete refused) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-mixed-") as tmp:
        workdir = Path(tmp)
        (workdir / "bench_mixed_handlers.py").write_text(PING_HANDLERS)
        n = 0
        for engine in args.engines:
            server = None
            if engine != "sqlite":
                pg = engine == "postgresql"
                server = servers.start_postgresql() if pg else servers.start_mariadb()
            try:
                for rep in range(args.repeat):
                    n += 1
                    url = database(engine, server, workdir, n)
                    cell = run_mixed(url, workdir, args.mixed, args.cap)
                    results.append({"engine": engine, **cell})
                    print(f"| {engine} | {rep + 1} | {cell['seconds']:.1f} | {cell['php']} | "
                          f"{cell['python']} | {cell['left']} |", flush=True)  # fmt: skip
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
