"""Celery draining a waiting backlog: this transport on PostgreSQL beside Celery on Redis.

Usage::

    python bench/bench_celery_drain.py [--tasks 3000] [--rounds 3] [--concurrency 4]
        [--prefetch-multiplier 4] [--workers 1] [--task-ms 0] [--remote-control]

Per round and broker, on a fresh throwaway server (``tests/servers.py``: PostgreSQL with
``synchronous_commit=on`` and fsync, ``redis-server`` without persistence): ``--tasks`` no-op
tasks are sent (``send_task``, one committed row each) with no worker running; then
``--workers`` ``celery worker -P prefork -c C`` processes start, and the rate is tasks /
(last task run − first task run), so worker start-up is excluded. The app is
``celery_bench_app.py``'s (``task_acks_late``, ``worker_prefetch_multiplier``, no results,
no events; ``--remote-control``: Celery's default, a broadcast queue beside the task queue;
``--task-ms``: each task sleeps that long). Exactly ``--tasks`` runs must be recorded
(checked again 1 s after the last), else the run fails.
The brokers alternate within a round, the order flipping each round; printed: each round's
rate, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import servers  # noqa: E402
from bench_common import code_version, raise_on_sigterm  # noqa: E402
from celery_bench_app import TASK_NAME, make_app  # noqa: E402

BROKERS = ("sqlqueue-pg", "redis")


def start(broker: str) -> tuple[servers.Server, str]:
    if broker == "redis":
        server = servers.start_redis()
        return server, server.url("0")
    server = servers.start_postgresql()
    url = server.create_database("drain").replace("postgresql://", "postgresql+psycopg://")
    return server, f"sqlqueue+{url}"


def drain_once(broker: str, args: argparse.Namespace, workdir: Path) -> float:
    server, url = start(broker)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        app = make_app(url, args.prefetch_multiplier)
        with app.connection_for_write() as conn:
            for i in range(args.tasks):
                app.send_task(TASK_NAME, args=(i,), connection=conn)
        done = workdir / f"{broker}.done"
        done.unlink(missing_ok=True)
        env = dict(
            os.environ,
            BENCH_BROKER_URL=url,
            BENCH_PREFETCH_MULTIPLIER=str(args.prefetch_multiplier),
            BENCH_DONE_FILE=str(done),
            BENCH_REMOTE_CONTROL="1" if args.remote_control else "0",
            BENCH_TASK_SECONDS=str(args.task_ms / 1000),
        )
        celery = Path(sys.executable).with_name("celery")
        for k in range(args.workers):
            workers.append(
                subprocess.Popen(
                    [str(celery), "-A", "celery_bench_app", "worker", "-P", "prefork",
                     "-c", str(args.concurrency), "-l", "WARNING", "-n", f"w{k}@%h",
                     "--without-mingle", "--without-gossip"],
                    cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        deadline = time.monotonic() + args.timeout
        lines: list[str] = []
        while len(lines) < args.tasks:
            if time.monotonic() > deadline:
                raise SystemExit(f"{broker}: {len(lines)} of {args.tasks} tasks ran in time")
            time.sleep(0.2)
            lines = done.read_text().split() if done.exists() else []
        time.sleep(1.0)  # a task run twice would show here
        lines = done.read_text().split()
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        server.stop()
    if len(lines) != args.tasks:
        raise SystemExit(f"{broker}: {len(lines)} runs of {args.tasks} tasks")
    times = sorted(float(line) for line in lines)
    return args.tasks / (times[-1] - times[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", "-c", type=int, default=4)
    p.add_argument("--prefetch-multiplier", type=int, default=4)
    p.add_argument("--workers", type=int, default=1, help="celery worker processes")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--task-ms", type=float, default=0.0, help="each task sleeps this long")
    p.add_argument(
        "--remote-control", action="store_true", help="Celery's default: a broadcast queue too"
    )
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    rates: dict[str, list[float]] = {b: [] for b in BROKERS}
    print(
        f"{args.tasks} tasks, {args.workers} x celery worker -P prefork -c {args.concurrency}, "
        f"prefetch multiplier {args.prefetch_multiplier}, acks late, tasks of "
        f"{args.task_ms:g} ms, remote control {'on' if args.remote_control else 'off'}; "
        f"code {code_version()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-celery-drain-") as tmp:
        for r in range(args.rounds):
            for broker in BROKERS if r % 2 == 0 else BROKERS[::-1]:
                rate = drain_once(broker, args, Path(tmp))
                rates[broker].append(rate)
                print(f"round {r + 1}  {broker:<12} {rate:8,.0f} tasks/s", flush=True)
    medians = {b: statistics.median(v) for b, v in rates.items()}
    for b, m in medians.items():
        print(f"median {b:<12} {m:8,.0f} tasks/s")
    print(f"sqlqueue-pg / redis: {medians['sqlqueue-pg'] / medians['redis']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
