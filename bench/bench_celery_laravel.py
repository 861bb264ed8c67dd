"""A Celery worker on a Laravel queue against Laravel's own worker on the same table, and the
cost of the queue-format layer on an ordinary queue.

Usage::

    python bench/bench_celery_laravel.py [--engines sqlite postgresql mariadb] [--jobs N]
                                         [--repeat R] [--sqlite-synchronous FULL|NORMAL|default]
                                         [--messages M] [--json out.json]

1. ``drain`` — jobs/s draining N waiting ``App\\Jobs\\Noop`` jobs (``bench_laravel.py``'s job:
   two public properties, a ``handle()`` that only counts), on a fresh database per cell whose
   tables Laravel 8.83's own migration made, filled with payloads byte-identical to Laravel's
   ``dispatch()``:

   * ``laravel`` — ``Illuminate\\Queue\\Worker::daemon()`` (``bench/php/laravel_queue_bench.php
     work``: one process, timed by itself after boot);
   * ``celery solo`` — a real ``celery worker -P solo`` (one process) with a plain
     ``@app.task(name="App\\Jobs\\Noop")`` on the queue, the transport option
     ``queue_formats={"default": "laravel"}``, ``acks_late=True`` (Laravel's rule: deleted when
     done), prefetch 8;
   * ``celery prefork -c 2`` — the same with two pool processes, beside ``laravel x2``: two
     Laravel workers at once (timed from the first start to the last exit).

   A Celery cell is timed from the first task's start to the last task's end (each task
   appends its time to a file; boot is not counted). Afterwards no row is left in ``jobs``,
   none in ``failed_jobs``, and N tasks ran. Target (issue 15): celery solo >= 1.5x laravel.
2. ``format layer`` — an ordinary Kombu queue (Kombu's envelope in ``askr_jobs``) published
   and drained M messages (one Kombu consumer, prefetch 32, ack each) with ``queue_formats``
   empty vs naming another queue ``laravel``, alternated in the same run; the ratio should be
   1.0 within noise.

Ratios are medians over ``--repeat`` runs, sides alternating which goes first. Servers and
temporary files are removed on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_laravel as bl  # noqa: E402
from kombu import Connection, Consumer, Exchange, Producer, Queue  # noqa: E402

#: The Celery app a bench worker runs (``-A bench_celery_laravel_app``), written to the workdir.
CELERY_APP = """
import os, time
from celery import Celery

app = Celery("bench_celery_laravel", broker=os.environ["BENCH_BROKER"], set_as_current=False)
app.conf.update(
    broker_transport_options={"queue_formats": {"default": "laravel"}, "polling_interval": 0.01,
                              "max_polling_interval": 0.2, "claim_batch_size": 8},
    task_acks_late=True, task_ignore_result=True, worker_prefetch_multiplier=8,
    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
)
OUT = os.environ["BENCH_OUT"]


@app.task(name="App\\\\Jobs\\\\Noop")
def noop(id, name):
    started = time.time()
    with open(OUT, "a") as f:
        f.write(f"{started}\\n")
"""


def celery_drain(env: bl.Env, db: bl.Database, n: int, pool: list[str], timeout: float) -> float:
    """Seconds a ``celery worker`` takes from its first task to its last on ``db``'s ``jobs``."""
    out = env.workdir / f"celery-{time.monotonic_ns()}.txt"
    log = env.workdir / f"celery-{time.monotonic_ns()}.log"
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(env.workdir), str(HERE.parent)]),
        "BENCH_BROKER": f"sqlqueue+{db.url}",
        "BENCH_OUT": str(out),
    }
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench_celery_laravel_app", "worker", *pool,
             "-Q", "default", "-l", "warning", "--without-mingle", "--without-gossip",
             "--without-heartbeat", "-n", f"bench{time.monotonic_ns()}@%h"],
            env=environ, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = out.read_text().count("\n") if out.exists() else 0
            if done >= n and bl.counts(db)[0] == 0:
                break
            if proc.poll() is not None:
                raise bl.BenchError(f"celery worker exited: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        else:
            raise bl.BenchError(f"celery drained {done} of {n} in {timeout}s")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    times = sorted(float(t) for t in out.read_text().split())
    jobs, failed = bl.counts(db)
    if len(times) != n or jobs or failed:
        raise bl.BenchError(f"celery ran {len(times)} of {n}; {jobs} rows left, {failed} failed")
    # n - 1 intervals between the first task's start and the last's: the last task's own
    # run (a few µs) is not counted, nor the first's wait.
    return (times[-1] - times[0]) * n / max(1, n - 1)


def laravel_drain(env: bl.Env, db: bl.Database, n: int, workers: int, timeout: float) -> float:
    """Seconds ``workers`` Laravel workers take to drain ``db`` (each times itself after boot;
    with several, from the first one's start to the last one's end)."""
    if workers == 1:
        r = bl.php(env, "work", db, n, timeout)
        if r["handled"] != n:
            raise bl.BenchError(f"laravel handled {r['handled']} of {n}")
        return float(r["seconds"])
    cmd = ["php", *env.php_args, str(bl.PHP_SCRIPT), "work", json.dumps(db.php), str(n)]
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(workers)]
    results = [
        json.loads(p.communicate(timeout=timeout)[0].strip().splitlines()[-1]) for p in procs
    ]
    wall = time.perf_counter() - started
    handled = sum(r["handled"] for r in results)
    if handled != n or bl.counts(db) != (0, 0):
        raise bl.BenchError(f"{workers} laravel workers handled {handled} of {n}")
    # Boot is not counted: the slowest worker's own time, at most the wall time.
    return min(wall, max(float(r["seconds"]) for r in results))


SIDES = {
    "laravel": lambda env, db, n, t: laravel_drain(env, db, n, 1, t),
    "celery solo": lambda env, db, n, t: celery_drain(env, db, n, ["-P", "solo"], t),
    "laravel x2": lambda env, db, n, t: laravel_drain(env, db, n, 2, t),
    "celery prefork -c 2": lambda env, db, n, t: celery_drain(
        env, db, n, ["-P", "prefork", "-c", "2"], t
    ),
}


def drain_cells(env: bl.Env, engine: str, args: argparse.Namespace) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    for rep in range(args.repeat):
        order = list(SIDES) if rep % 2 == 0 else list(reversed(SIDES))
        for side in order:
            db = env.fresh(engine)
            bl.prepare(env, db, args.timeout)
            bl.fill(env, db, args.jobs)
            seconds = SIDES[side](env, db, args.jobs, args.timeout)
            rates[side].append(args.jobs / seconds)
            print(f"[{engine:<10} {side:<20} rep {rep + 1}] {args.jobs / seconds:,.0f} jobs/s",
                  flush=True)  # fmt: skip
    return rates


def ordinary_queue_rate(url: str, formats: dict[str, Any], m: int) -> float:
    """Messages/s publishing then draining ``m`` messages of an ordinary queue."""
    options = {"queue_formats": formats, "polling_interval": 0.01}
    exchange = Exchange("bench", "direct")
    queue = Queue(f"plain{time.monotonic_ns()}", exchange, "plain")
    got = 0

    def on_message(body: Any, message: Any) -> None:
        nonlocal got
        got += 1
        message.ack()

    with Connection(f"sqlqueue+{url}", transport_options=options) as conn:
        conn.connect()  # tables made ready (the format's too) before the clock starts
        started = time.perf_counter()
        with conn.channel() as channel:
            producer = Producer(channel, exchange, routing_key="plain")
            queue(channel).declare()
            for i in range(m):
                producer.publish({"i": i})
            consumer = Consumer(channel, [queue], callbacks=[on_message], prefetch_count=32)
            with consumer:
                while got < m:
                    conn.drain_events(timeout=10)
        return m / (time.perf_counter() - started)


def format_layer_cells(
    env: bl.Env, engine: str, args: argparse.Namespace
) -> dict[str, list[float]]:
    configs = {"no queue_formats": {}, "queue_formats (another queue)": {"php": "laravel"}}
    rates: dict[str, list[float]] = {c: [] for c in configs}
    for rep in range(args.repeat * 2):
        order = list(configs) if rep % 2 == 0 else list(reversed(configs))
        for config in order:
            db = env.fresh(engine)
            rates[config].append(ordinary_queue_rate(db.url, configs[config], args.messages))
    return rates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", nargs="+", default=list(bl.ENGINES), choices=bl.ENGINES)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sqlite-synchronous", choices=bl.SYNC_MODES, default="FULL")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.php_opcache, args.mysql_driver = False, "pymysql"
    report: dict[str, Any] = {"jobs": args.jobs, "messages": args.messages, "engines": {}}
    with bl.environment(args) as env:
        (env.workdir / "bench_celery_laravel_app.py").write_text(CELERY_APP)
        for engine in args.engines:
            drain = drain_cells(env, engine, args)
            layer = format_layer_cells(env, engine, args)
            report["engines"][engine] = {"drain": drain, "format_layer": layer}
    med = statistics.median
    print(f"\n{args.jobs} jobs per drain, {args.messages} messages per ordinary-queue cell, "
          f"medians of {args.repeat} (format layer: {args.repeat * 2}); "
          f"sqlite synchronous={args.sqlite_synchronous}\n")  # fmt: skip
    print(f"{'engine':<11}{'laravel':>9}{'celery solo':>13}{'ratio':>7}"
          f"{'laravel x2':>12}{'prefork -c 2':>14}{'ratio':>7}{'format layer':>14}")  # fmt: skip
    for engine, cells in report["engines"].items():
        d, layer = cells["drain"], cells["format_layer"]
        lv, cs, l2, c2 = (med(d[k]) for k in SIDES)
        plain, with_formats = (med(v) for v in layer.values())
        print(f"{engine:<11}{lv:>9,.0f}{cs:>13,.0f}{cs / lv:>6.2f}x{l2:>12,.0f}{c2:>14,.0f}"
              f"{c2 / l2:>6.2f}x{with_formats / plain:>13.2f}x")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
