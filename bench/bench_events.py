"""The per-task cost of Celery events (``celery worker -E``) on this broker, beside Redis.

Usage::

    python bench/bench_events.py [--configs sqlite pg mariadb redis] [--tasks N]
                                 [--repeat K] [--json out.json]

For each broker config — ``sqlite`` (``sqlqueue+sqlite://``), ``pg``
(``sqlqueue+postgresql://``), ``mariadb`` (``sqlqueue+mysql://``) and ``redis``
— and each mode, N ``.delay()`` calls are queued, then a real ``celery worker``
drains them (``bench_transports.py``'s Celery scenario: prefork ``-c 2``,
``task_acks_late``, prefetch multiplier 8, the app of ``celery_bench_app.py``);
the rate runs from the first to the last task completion (worker start-up
excluded). Modes:

1. ``off``      — no ``-E``: the worker sends no events;
2. ``E``        — ``-E`` and no monitor: events go to the ``celeryev`` topic
   exchange, where nothing is bound;
3. ``E_mon``    — ``-E`` and a monitor in another process
   (``app.events.Receiver(conn, handlers={"*": ...}).capture()``, what
   ``celery events`` and Flower use) counting what it receives, so every event
   is routed, stored and consumed. The monitor's count is reported: 3 task
   events per task (received, started, succeeded); the worker runs
   ``--without-heartbeat`` as in ``bench_transports.py``, so it sends no
   ``worker-heartbeat``/``-online``/``-offline``.

The table gives tasks/s per config and mode (median of ``--repeat``), the
overhead per task in microseconds, ``(1/rate_E - 1/rate_off) * 1e6``, and the
ratios sqlqueue/redis. Note that with Redis the worker's event loop (hub)
buffers task events and publishes them in batches (``task.multi``, up to 24);
the SQL transport is not asynchronous, so it publishes each event on its own.

A fresh database (or flushed Redis DB) per cell; the modes of one config run
one after another in each repetition, so drift hits them alike. PostgreSQL and
MariaDB are throwaway servers (``tests/servers.py``), ``redis-server`` is
started on a free port; a config whose server is missing is skipped with a
note. Every wait is bounded; every process, server and temp dir this script
creates is removed on exit, error or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_engines as be  # noqa: E402 - also puts tests/ on sys.path
import bench_transports as bt  # noqa: E402
import servers  # noqa: E402

CONFIGS = ("sqlite", "pg", "mariadb", "redis")
SQL_CONFIGS = ("sqlite", "pg", "mariadb")
MODES = ("off", "E", "E_mon")
MODE_LABELS = {"off": "events off", "E": "-E no monitor", "E_mon": "-E + monitor"}
PREFETCH_MULTIPLIER = 8  # bench_transports' default, same for every config
# Indexes into the monitor's shared counters.
ALL_EVENTS, TASK_EVENTS, SUCCEEDED, LAST_TASK_EVENT = range(4)


# -- environment ----------------------------------------------------------------------------


@contextlib.contextmanager
def environment(workdir: Path, configs: list[str]) -> Iterator[be.Env]:
    """The servers ``configs`` need; a missing one is noted and its config skipped."""
    env = be.Env(workdir)
    try:
        if "pg" in configs:
            print("starting PostgreSQL ...", flush=True)
            try:
                env.pg = servers.start_postgresql()
            except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
                print(f"PostgreSQL unavailable, skipping pg: {exc}", flush=True)
        if "mariadb" in configs:
            print("starting MariaDB ...", flush=True)
            try:
                env.maria = servers.start_mariadb()
            except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
                print(f"MariaDB unavailable, skipping mariadb: {exc}", flush=True)
        if "redis" in configs:
            with bt.redis_server(workdir) as redis_url:  # prints its own note when missing
                env.redis_url = redis_url
                yield env
        else:
            yield env
    finally:
        for server in (env.pg, env.maria):
            if server is not None:
                server.stop()


def url_for(env: be.Env, config: str) -> str | None:
    """A broker URL with a fresh database for ``config``; None when its server is missing."""
    if (config == "pg" and env.pg is None) or (config == "mariadb" and env.maria is None):
        return None
    return env.url(config)


# -- the monitor process --------------------------------------------------------------------


def _monitor(url: str, counts: Any, ready: Any, stop: Any, deadline: float) -> None:
    """Capture every event on ``url`` into ``counts`` until ``stop`` is set (spawned)."""
    from celery_bench_app import make_app

    app = make_app(url, PREFETCH_MULTIPLIER)

    def on_event(event: dict[str, Any]) -> None:
        counts[ALL_EVENTS] += 1  # this process is the only writer
        kind = str(event.get("type", ""))
        if kind.startswith("task-"):
            counts[TASK_EVENTS] += 1
            counts[LAST_TASK_EVENT] = time.time()
            if kind == "task-succeeded":
                counts[SUCCEEDED] += 1

    with app.connection_for_read() as conn:
        receiver: Any = app.events.Receiver(conn, handlers={"*": on_event})

        def on_consume_ready(*_args: Any, **_kwargs: Any) -> None:
            ready.set()  # the event queue is declared and bound

        def on_iteration() -> None:
            if stop.is_set() or time.time() > deadline:
                receiver.should_stop = True

        receiver.on_consume_ready = on_consume_ready
        receiver.on_iteration = on_iteration
        receiver.capture(limit=None, timeout=None, wakeup=False)
    app.close()


def _wait_until_quiet(counts: Any, quiet: float, bound: float) -> None:
    """Wait until the monitor's count stops moving for ``quiet`` seconds (at most ``bound``)."""
    deadline = time.monotonic() + bound
    last, since = counts[ALL_EVENTS], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = counts[ALL_EVENTS]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


# -- one cell -------------------------------------------------------------------------------


def run_cell(
    url: str, n: int, timeout: float, workdir: Path, config: str, mode: str, run: int
) -> bt.Result:
    """Queue ``n`` tasks, drain them with a worker in ``mode``; the rate and monitor counts."""
    from celery_bench_app import make_app

    events, monitor = mode != "off", mode == "E_mon"
    cdir = workdir / f"{config}-{mode}-{run}"
    cdir.mkdir()
    done_file = cdir / "done.txt"
    ctx = mp.get_context("spawn")
    counts = ctx.Array("d", 4, lock=False)
    procs: list[BaseProcess] = []
    proc: subprocess.Popen[bytes] | None = None
    log_path = cdir / "worker.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
    stop = ctx.Event()
    result = bt.Result(config, mode, n)
    try:
        if monitor:
            ready = ctx.Event()
            mon = ctx.Process(
                target=_monitor,
                args=(url, counts, ready, stop, time.time() + timeout + 120),
                daemon=True,
            )
            mon.start()
            procs.append(mon)
            if not ready.wait(timeout=60):
                raise bt.BenchTimeout("the monitor did not bind its event queue within 60s")

        app = make_app(url, PREFETCH_MULTIPLIER)
        noop = app.tasks["bench.noop"]
        for i in range(n):
            noop.delay(i)
        app.close()

        env = dict(os.environ)
        env.update(
            BENCH_BROKER_URL=url,
            BENCH_PREFETCH_MULTIPLIER=str(PREFETCH_MULTIPLIER),
            BENCH_DONE_FILE=str(done_file),
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        )
        cmd = [
            sys.executable, "-m", "celery", "-A", "celery_bench_app", "worker",
            "-P", "prefork", "-c", "2", "-l", "WARNING", "-Q", "bench_celery",
            "-n", f"bench-{config}-{mode}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            *(["-E"] if events else []),
        ]  # fmt: skip
        started = time.time()
        proc = subprocess.Popen(
            cmd, env=env, cwd=cdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout + 30  # + worker start-up
        while True:
            count, _ = bt._count_lines(done_file)
            if count >= n:
                break
            if proc.poll() is not None:
                raise RuntimeError(
                    f"celery worker exited ({proc.returncode}) after {count} of {n} tasks; "
                    f"log tail: {log_path.read_text(errors='replace')[-800:]}"
                )
            if time.monotonic() > deadline:
                raise bt.BenchTimeout(f"{count} of {n} tasks done in {timeout:.0f}s")
            time.sleep(0.05)
        _, (first, last) = bt._count_lines(done_file)
        result.seconds = last - first
        result.rate = (n - 1) / (last - first) if last > first else float("nan")
        result.extra["run"] = run
        result.extra["wall_seconds"] = last - started

        if monitor:
            # The monitor may trail the worker: wait (bounded) for every task-succeeded.
            bound = time.monotonic() + timeout
            while counts[SUCCEEDED] < n and time.monotonic() < bound:
                time.sleep(0.05)
            result.extra["monitor_lag_seconds"] = counts[LAST_TASK_EVENT] - last
        bt._stop_process(proc, grace=15)  # a -E worker says worker-offline on the way out
        if monitor:
            _wait_until_quiet(counts, quiet=0.5, bound=5)
            result.extra["events"] = counts[ALL_EVENTS]
            result.extra["task_events"] = counts[TASK_EVENTS]
            result.extra["succeeded_events"] = counts[SUCCEEDED]
        return result
    finally:
        if proc is not None:
            bt._stop_process(proc, grace=15)
        log.close()
        stop.set()
        for p in procs:
            p.join(timeout=10)
        bt._terminate(procs)


# -- driver ---------------------------------------------------------------------------------


def run_all(args: argparse.Namespace, env: be.Env, workdir: Path) -> list[bt.Result]:
    results: list[bt.Result] = []
    for config in args.configs:
        for run in range(args.repeat):
            for mode in MODES:
                label = f"[{config:<7} {MODE_LABELS[mode]:<13} run {run + 1}/{args.repeat}]"
                url = url_for(env, config)
                if url is None:
                    if run == 0:
                        print(f"{label} skipped: no server", flush=True)
                    results.append(bt.Result(config, mode, args.tasks, note="skipped"))
                    continue
                print(f"{label} running (N={args.tasks}) ...", end=" ", flush=True)
                try:
                    r = run_cell(url, args.tasks, args.timeout, workdir, config, mode, run)
                except Exception as exc:  # report and go on with the next cell
                    print(f"FAILED: {type(exc).__name__}: {exc}", flush=True)
                    results.append(bt.Result(config, mode, args.tasks, note=type(exc).__name__))
                    continue
                results.append(r)
                extra = ""
                if mode == "E_mon":
                    extra = (
                        f"; monitor got {r.extra['events']:.0f} events "
                        f"({r.extra['task_events']:.0f} task events, "
                        f"lag {r.extra['monitor_lag_seconds']:.2f}s)"
                    )
                print(f"{r.rate:,.0f} tasks/s ({r.seconds:.2f}s){extra}", flush=True)
    return results


def summarize(results: list[bt.Result], configs: list[str]) -> dict[str, dict[str, Any]]:
    """Per config and mode: the median rate, its runs, and the median monitor counts."""
    out: dict[str, dict[str, Any]] = {}
    for config in configs:
        row: dict[str, Any] = {}
        for mode in MODES:
            runs = [r for r in results if r.transport == config and r.scenario == mode]
            rates = [r.rate for r in runs if r.rate]
            cell: dict[str, Any] = {
                "rate": statistics.median(rates) if rates else None,
                "rates": rates,
                "note": next((r.note for r in runs if r.note), ""),
            }
            for key in ("events", "task_events", "monitor_lag_seconds"):
                got = [r.extra[key] for r in runs if key in r.extra]
                if got:
                    cell[key] = statistics.median(got)
            row[mode] = cell
        off = row["off"]["rate"]
        for mode in ("E", "E_mon"):
            on = row[mode]["rate"]
            row[mode]["overhead_us"] = (1 / on - 1 / off) * 1e6 if on and off else None
        out[config] = row
    return out


def _rate(cell: dict[str, Any]) -> str:
    return f"{cell['rate']:,.0f}" if cell["rate"] else (cell["note"] or "-")


def _us(value: float | None) -> str:
    return f"{value:+,.0f}" if value is not None else "n/a"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b and b > 0 else "n/a"


def print_table(summary: dict[str, dict[str, Any]], n: int) -> None:
    headers = [
        "config (tasks/s)",
        MODE_LABELS["off"],
        MODE_LABELS["E"],
        MODE_LABELS["E_mon"],
        "us/task -E",
        "us/task -E+mon",
        "monitor events (task/3N)",
    ]
    rows: list[list[str]] = []
    for config, row in summary.items():
        mon = row["E_mon"]
        events = (
            f"{mon['events']:,.0f} ({mon['task_events'] / (3 * n):.0%})"
            if "events" in mon
            else "n/a"
        )
        rows.append(
            [
                config,
                *(_rate(row[m]) for m in MODES),
                _us(row["E"]["overhead_us"]),
                _us(row["E_mon"]["overhead_us"]),
                events,
            ]
        )
    redis = summary.get("redis")
    if redis is not None:
        for config in SQL_CONFIGS:
            ours = summary.get(config)
            if ours is None:
                continue
            rows.append(
                [
                    f"{config}/redis",
                    *(_x(ours[m]["rate"], redis[m]["rate"]) for m in MODES),
                    _x(ours["E"]["overhead_us"], redis["E"]["overhead_us"]),
                    _x(ours["E_mon"]["overhead_us"], redis["E_mon"]["overhead_us"]),
                    "",
                ]
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print()
    print(fmt.format(*headers))
    print("  ".join("-" * w for w in widths))
    for i, row_cells in enumerate(rows):
        if i == len(summary):
            print("  ".join("-" * w for w in widths))
        print(fmt.format(*row_cells))
    print(
        "\nus/task = (1/rate_E - 1/rate_off) * 1e6 (medians); ratios are sqlqueue/redis "
        "(rates: higher is better for us; overheads: lower is better for us).\n"
        "monitor events: all events the monitor received, and its task events as a share "
        "of 3 per task (received, started, succeeded)."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", "-n", type=int, default=2000, help="tasks per cell")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is shown")
    p.add_argument("--timeout", type=float, default=120.0, help="bound on each wait, seconds")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (worker logs)")
    a = p.parse_args(argv)
    if a.tasks < 2 or a.repeat < 1:
        p.error("--tasks must be >= 2 and --repeat >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, bt.raise_on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="sqlqueue-bench-events-"))
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    try:
        with environment(workdir, args.configs) as env:
            results = run_all(args, env, workdir)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    import celery
    import kombu
    import sqlalchemy

    summary = summarize(results, args.configs)
    print(
        f"\nN={args.tasks}  repeat={args.repeat}  prefork -c 2  "
        f"prefetch_multiplier={PREFETCH_MULTIPLIER}  python {sys.version.split()[0]}  "
        f"kombu {kombu.__version__}  celery {celery.__version__}  "
        f"sqlalchemy {sqlalchemy.__version__}  cpus {os.cpu_count()}  "
        f"load {load_before:.2f}->{os.getloadavg()[0]:.2f}  code {bt.code_version()}  "
        f"total {time.perf_counter() - started:.0f}s"
    )
    print_table(summary, args.tasks)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "code": bt.code_version(),
                    "summary": summary,
                    "results": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
