"""What flow control costs a queue without limits (claims/s before and after, one run), and
how a limited queue runs (throughput, the wait before a freed slot is used).

Usage::

    # a limited queue, this tree (its workers are threads, a store each):
    python bench/bench_flow_control.py --limited [--limit 2 --consumers 6 --work-ms 50 --rest-ms 10]

    # a queue under a per-key limit with a hot key's backlog ahead (this tree; for another
    # commit, PYTHONPATH=<its worktree>):
    python bench/bench_flow_control.py --keyed [--hot 20000 --keys 40 --per-key 1]

    # a rate-limited queue, this tree (Kombu consumers in threads, a connection each):
    python bench/bench_flow_control.py --rated [--rate 100/s --consumers 6 --rated-jobs 400]

    # this tree, in-process, once (starts a throwaway PostgreSQL and MariaDB):
    python bench/bench_flow_control.py [--engines sqlite,postgresql,mysql]
                                       [--jobs 5000] [--single 2000] [--empty 500]
    # two commits side by side (issue 30: the commit before flow control and its own):
    git worktree add /tmp/fc_before dfe5cf5
    git worktree add /tmp/fc_after bf02dde
    nice -n 10 python bench/bench_flow_control.py --ab /tmp/fc_before /tmp/fc_after [--rounds 3]
    git worktree remove --force /tmp/fc_before; git worktree remove --force /tmp/fc_after

Flow control (bf02dde) put ``AND NOT EXISTS (SELECT 1 FROM askr_queue_controls WHERE queue =
:queue)`` in the plain claim statement, and has ``JobStore.claim`` read the controls table
again after a plain claim that came back empty. The issue asks that a queue without limits
pay nothing measurable. One run, on a fresh database (SQLite: a fresh file) and one store:

* ``--jobs`` jobs (200-byte payloads) are stored with ``enqueue_many`` (500 a call, not
  timed), then drained with ``claim(q, 10, 60)`` + ``ack_many`` of the batch until a claim
  comes back empty: claims/s (every claim call, the last empty one too) and jobs/s;
* ``--single`` more jobs are stored the same way and drained with ``claim(q, 1, 60)`` +
  ``ack`` until empty: jobs/s;
* ``--empty`` claims of the now empty queue, one after another: claims/s (the path that
  reads the controls table again; SQLite's claim looks first and returns before it).

``--ab BEFORE AFTER`` runs that measurement in subprocesses whose ``PYTHONPATH`` is each tree
(checked: the ``kombu_sqlqueue`` each imported must be the tree's), interleaved A B B A in
each of ``--rounds`` rounds, on each engine (a fresh database per run), and prints per engine
the median of each side, the ratio after/before (> 1: after is faster) and the runs' range,
with the commit each tree is at. Without ``--ab`` the measurement runs in this process for the
``kombu_sqlqueue`` it imports, once per engine. The servers (``tests/servers.py``) and temp
files are removed at the end; every subprocess wait is bounded (``--timeout``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_common import code_version, raise_on_sigterm  # noqa: E402

ENGINES = ("sqlite", "postgresql", "mysql")
PAYLOAD = b"x" * 200
FILL_CHUNK = 500
QUEUE = "q"

#: What one run measures, in the order printed: key -> label (all rates, higher is better).
METRICS = {
    "batch_claims": "claim(10)+ack_many  claims/s",
    "batch_jobs": "claim(10)+ack_many  jobs/s",
    "single_jobs": "claim(1)+ack        jobs/s",
    "empty_claims": "claim of empty q    claims/s",
}


# -- one run --------------------------------------------------------------------------------


def measure(url: str, jobs: int, single: int, empty: int) -> dict[str, float | str]:
    """One run on the fresh database at ``url`` (a store URL, no ``sqlqueue+``), with the
    ``kombu_sqlqueue`` that ``sys.path`` finds; the rates of :data:`METRICS` and, under
    ``module``, where that package was imported from."""
    import kombu_sqlqueue
    from kombu_sqlqueue.store import JobStore, NewJob

    out: dict[str, float | str] = {"module": str(Path(kombu_sqlqueue.__file__).parent)}
    store = JobStore(url)
    try:
        store.ensure_ready()

        def fill(n: int) -> None:
            for start in range(0, n, FILL_CHUNK):
                count = min(FILL_CHUNK, n - start)
                store.enqueue_many([NewJob(QUEUE, PAYLOAD) for _ in range(count)])

        # -- a queue without limits -----------------------------------------------------------
        fill(jobs)
        claims = drained = 0
        started = time.perf_counter()
        while True:
            claims += 1
            batch = store.claim(QUEUE, 10, 60).jobs
            if not batch:
                break
            store.ack_many([job.receipt for job in batch])
            drained += len(batch)
        spent = time.perf_counter() - started
        if drained != jobs:
            raise RuntimeError(f"batch drain took {drained} jobs of {jobs}")
        out["batch_claims"] = claims / spent
        out["batch_jobs"] = drained / spent

        fill(single)
        drained = 0
        started = time.perf_counter()
        while one := store.claim(QUEUE, 1, 60).jobs:
            store.ack(one[0].receipt)
            drained += 1
        spent = time.perf_counter() - started
        if drained != single:
            raise RuntimeError(f"single drain took {drained} jobs of {single}")
        out["single_jobs"] = drained / spent

        if empty > 0:
            started = time.perf_counter()
            for _ in range(empty):
                if store.claim(QUEUE, 10, 60).jobs:
                    raise RuntimeError("a claim of the drained queue found a job")
            out["empty_claims"] = empty / (time.perf_counter() - started)

    finally:
        store.close()
    return out


# -- a limited queue (--limited: this tree, in-process) ------------------------------------


def measure_limited(
    url: str, jobs: int, limit: int, consumers: int, work: float, rest: float
) -> dict[str, float]:
    """``consumers`` threads (a store each: a worker each) drain ``jobs`` jobs of a queue
    limited to ``limit`` held at once; each job takes ``work`` seconds, and a worker rests
    ``rest`` seconds after an ack before it claims again — so a freed slot is taken by an
    idle worker woken for it, or, failing a wake-up, by the resting one (or a poll).

    The wait before a freed slot is used: the k-th ack (by time) frees the slot the
    (k + limit)-th claim takes, so that claim's time minus that ack's is the wait."""
    from kombu_sqlqueue.store import JobStore, NewJob, StoreOptions

    seed = JobStore(url)
    seed.ensure_ready()
    for start in range(0, jobs, FILL_CHUNK):
        seed.enqueue_many([NewJob(QUEUE, PAYLOAD) for _ in range(min(FILL_CHUNK, jobs - start))])
    seed.limit(QUEUE, limit)
    claims: list[float] = []
    acks: list[float] = []
    holds: list[tuple[float, float]] = []
    lock = threading.Lock()
    done = threading.Event()

    def worker() -> None:
        store = JobStore(url, StoreOptions())
        try:
            while not done.is_set():
                got = store.claim(QUEUE, 1, 60).jobs
                if not got:
                    if store.size(QUEUE) == 0:
                        done.set()
                        return
                    store.wait_for_jobs(1.0, [QUEUE])
                    continue
                claimed = time.perf_counter()
                time.sleep(work)
                before_ack = time.perf_counter()
                store.ack(got[0].receipt)
                acked = time.perf_counter()
                with lock:
                    claims.append(claimed)
                    acks.append(acked)
                    holds.append((claimed, before_ack))
                time.sleep(rest)
        finally:
            store.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent = time.perf_counter() - started
    seed.close()
    claims.sort()
    acks.sort()
    waits = [claims[k + limit] - acks[k] for k in range(len(claims) - limit)]
    edges = sorted([(a, 1) for a, _ in holds] + [(b, -1) for _, b in holds])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    waits.sort()
    return {
        "jobs": float(len(claims)),
        "jobs_per_s": len(claims) / spent,
        "ceiling_per_s": limit / (work + 0.0),
        "wait_p50_ms": 1000 * waits[len(waits) // 2],
        "wait_p99_ms": 1000 * waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "most_held": float(most),
    }


def run_limited(args: argparse.Namespace) -> None:
    rows: list[list[str]] = []
    with databases(args.engines) as dbs:
        for engine in args.engines:
            r = measure_limited(
                dbs.fresh(engine, "limited"),
                args.limited_jobs,
                args.limit,
                args.consumers,
                args.work_ms / 1000,
                args.rest_ms / 1000,
            )
            rows.append([
                engine, f"{r['jobs']:.0f}", f"{r['jobs_per_s']:,.1f}", f"{r['ceiling_per_s']:,.1f}",
                f"{r['wait_p50_ms']:.1f}", f"{r['wait_p99_ms']:.1f}", f"{r['most_held']:.0f}",
            ])  # fmt: skip
            print(f"{engine:<10} {rows[-1][1:]}", flush=True)
    print(
        f"\nlimit {args.limit}, {args.consumers} workers, {args.work_ms:g} ms a job, "
        f"rest {args.rest_ms:g} ms after an ack (code {code_version()})\n"
    )
    print_table(
        ["engine", "jobs", "jobs/s", "ceiling/s", "slot wait p50 ms", "p99 ms", "most held"],
        rows,
    )


def measure_rated(url: str, jobs: int, rate_spec: str, consumers: int) -> dict[str, float]:
    """``consumers`` Kombu consumers (threads, a connection each: the transport's own idle
    waits, which a rate-limited claim caps at the next job's due time) drain ``jobs``
    messages of a queue limited to ``rate_spec``: the rate achieved against the limit, the
    gaps between consecutive deliveries against the interval, the most in any second."""
    from kombu import Connection

    from kombu_sqlqueue.store import JobStore
    from kombu_sqlqueue.store.controls import parse_rate

    rate = parse_rate(rate_spec)
    broker = f"sqlqueue+{url}"
    options = {"polling_interval": 0.1, "max_polling_interval": 1.0}
    with Connection(broker, transport_options=options) as conn:
        queue = conn.SimpleQueue("rated")
        for n in range(jobs):
            queue.put(n)
        queue.close()
    seed = JobStore(url)
    seed.rate_limit("rated", rate)
    delivered: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    def consumer() -> None:
        with Connection(broker, transport_options=options) as conn:
            queue = conn.SimpleQueue("rated")
            try:
                while not done.is_set():
                    try:
                        message = queue.get(block=True, timeout=1.0)
                    except queue.Empty:
                        continue
                    message.ack()
                    with lock:
                        delivered.append(time.perf_counter())
                        if len(delivered) >= jobs:
                            done.set()
            finally:
                queue.close()

    threads = [threading.Thread(target=consumer) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(jobs / (rate.count / rate.period) * 3 + 60)
    done.set()
    seed.close()
    delivered.sort()
    spent = delivered[-1] - delivered[0]
    gaps = sorted(b - a for a, b in itertools.pairwise(delivered))
    most = max(
        sum(1 for t in delivered[i : i + rate.count * 3] if t < start + 1.0)
        for i, start in enumerate(delivered)
    )
    limit_per_s = rate.count / rate.period
    return {
        "jobs": float(len(delivered)),
        "jobs_per_s": (len(delivered) - 1) / spent,
        "limit_per_s": limit_per_s,
        "gap_p50_ms": 1000 * gaps[len(gaps) // 2],
        "gap_p99_ms": 1000 * gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))],
        "interval_ms": 1000 / limit_per_s,
        "most_in_a_second": float(most),
    }


def measure_keyed(url: str, hot: int, keys: int, per_key: int) -> dict[str, float]:
    """A queue under a per-key limit whose first ``hot`` jobs are one key's (its backlog,
    ahead of the rest in claim order), then ``keys`` other keys with 10 jobs each. One
    store: ``claim(32)`` + ``ack_many`` while the other keys have jobs (the hot key held at
    its limit all along: its first job is claimed first and never acked) — ms a claim —
    then, every key at its limit, the claim that finds nothing."""
    from kombu_sqlqueue.store import JobStore, NewJob

    store = JobStore(url)
    store.ensure_ready()
    jobs = [NewJob(QUEUE, PAYLOAD, concurrency_key="hot") for _ in range(hot)]
    jobs += [NewJob(QUEUE, PAYLOAD, concurrency_key=f"k{i % keys}") for i in range(keys * 10)]
    for start in range(0, len(jobs), FILL_CHUNK):
        store.enqueue_many(jobs[start : start + FILL_CHUNK])
    store.key_limit(QUEUE, per_key)
    hot_held = store.claim(QUEUE, per_key, 60).jobs  # the hot key at its limit
    assert hot_held and all(store.get_job(j.id)["concurrency_key"] == "hot" for j in hot_held)  # type: ignore[index]
    times: list[float] = []
    taken = 0
    while True:
        started = time.perf_counter()
        got = store.claim(QUEUE, 32, 60).jobs
        times.append(time.perf_counter() - started)
        if not got:
            break
        taken += len(got)
        store.ack_many([j.receipt for j in got])
    # Every other key drained: give each one more job than its limit and claim (and hold)
    # what may be, so every key is at its limit with jobs waiting — then time empty claims.
    for _ in range(per_key + 1):
        store.enqueue_many([NewJob(QUEUE, PAYLOAD, concurrency_key=f"k{i}") for i in range(keys)])
    while store.claim(QUEUE, 32, 60).jobs:
        pass
    empty: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        assert store.claim(QUEUE, 32, 60).jobs == []
        empty.append(time.perf_counter() - started)
    store.close()
    busy = times[:-1] or times
    return {
        "taken": float(taken),
        "claim_ms": 1000 * statistics.median(busy),
        "empty_ms": 1000 * statistics.median(empty),
    }


def run_keyed(args: argparse.Namespace) -> None:
    import kombu_sqlqueue

    rows: list[list[str]] = []
    with databases(args.engines) as dbs:
        for engine in args.engines:
            r = measure_keyed(dbs.fresh(engine, "keyed"), args.hot, args.keys, args.per_key)
            rows.append([
                engine, f"{r['taken']:.0f}", f"{r['claim_ms']:.1f}", f"{r['empty_ms']:.1f}",
            ])  # fmt: skip
            print(f"{engine:<10} {rows[-1][1:]}", flush=True)
    where = Path(kombu_sqlqueue.__file__).resolve().parent.parent
    print(
        f"\nhot key backlog {args.hot}, {args.keys} other keys x 10 jobs, per key "
        f"{args.per_key} (kombu_sqlqueue from {where}, code {code_version(where)})\n"
    )
    print_table(["engine", "jobs taken", "claim(32) ms", "empty claim ms"], rows)


def run_rated(args: argparse.Namespace) -> None:
    rows: list[list[str]] = []
    with databases(args.engines) as dbs:
        for engine in args.engines:
            r = measure_rated(
                dbs.fresh(engine, "rated"), args.rated_jobs, args.rate, args.consumers
            )
            rows.append([
                engine, f"{r['jobs']:.0f}", f"{r['jobs_per_s']:,.1f}", f"{r['limit_per_s']:,.1f}",
                f"{r['jobs_per_s'] / r['limit_per_s']:.2f}", f"{r['interval_ms']:.1f}",
                f"{r['gap_p50_ms']:.1f}", f"{r['gap_p99_ms']:.1f}", f"{r['most_in_a_second']:.0f}",
            ])  # fmt: skip
            print(f"{engine:<10} {rows[-1][1:]}", flush=True)
    print(f"\nrate {args.rate}, {args.consumers} Kombu consumers (code {code_version()})\n")
    print_table(
        ["engine", "jobs", "jobs/s", "limit/s", "ratio", "interval ms", "gap p50 ms",
         "gap p99 ms", "most in 1 s"],
        rows,
    )  # fmt: skip


# -- servers and fresh databases ------------------------------------------------------------


class Server(Protocol):
    """What this script uses of ``tests/servers.Server``."""

    def create_database(self, name: str) -> str: ...

    def stop(self) -> None: ...


class Databases:
    """A fresh store URL per run, on each engine: SQLite files under ``workdir``, databases
    on throwaway servers started here."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, Server] = {}
        self.made = 0

    def start(self, engine: str) -> None:
        if engine == "sqlite" or engine in self.servers:
            return
        # tests/servers.py, by name: mypy does not read tests/ (Server states what is used).
        servers = importlib.import_module("servers")
        print(f"starting {engine} ...", flush=True)
        server: Server = servers.STARTERS[engine]()
        self.servers[engine] = server

    def fresh(self, engine: str, tag: str) -> str:
        self.made += 1
        name = f"fc{self.made}_{tag}"
        if engine == "sqlite":
            return f"sqlite:///{self.workdir / (name + '.db')}"
        return self.servers[engine].create_database(name)

    def stop(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                server.stop()


@contextlib.contextmanager
def databases(engines: list[str]) -> Iterator[Databases]:
    with tempfile.TemporaryDirectory(prefix="bench-fc-") as tmp:
        dbs = Databases(Path(tmp))
        try:
            for engine in engines:
                dbs.start(engine)
            yield dbs
        finally:
            dbs.stop()


# -- A/B ------------------------------------------------------------------------------------


def run_in(tree: Path, url: str, args: argparse.Namespace) -> dict[str, float | str]:
    """:func:`measure` in a subprocess importing ``kombu_sqlqueue`` from ``tree``."""
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--child", url,
        "--jobs", str(args.jobs), "--single", str(args.single), "--empty", str(args.empty),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"run in {tree} exited {done.returncode}: {done.stderr[-3000:]}")
    result: dict[str, float | str] = json.loads(done.stdout.strip().splitlines()[-1])
    module = Path(str(result["module"])).resolve()
    if not module.is_relative_to(tree.resolve()):
        raise RuntimeError(f"run for {tree} imported kombu_sqlqueue from {module}")
    return result


def run_ab(args: argparse.Namespace) -> None:
    trees = {"before": args.ab[0].resolve(), "after": args.ab[1].resolve()}
    commits = {side: code_version(tree) for side, tree in trees.items()}
    for side, tree in trees.items():
        print(f"{side:<6} = {tree} @ {commits[side]}", flush=True)
    runs: dict[tuple[str, str], list[dict[str, float | str]]] = {}
    started = time.perf_counter()
    with databases(args.engines) as dbs:
        for round_ in range(1, args.rounds + 1):
            for engine in args.engines:
                for side in ("before", "after", "after", "before"):
                    url = dbs.fresh(engine, side)
                    result = run_in(trees[side], url, args)
                    runs.setdefault((engine, side), []).append(result)
                    print(f"round {round_} {engine:<10} {side:<6} {brief(result)}", flush=True)
    print(
        f"\njobs={args.jobs} single={args.single} empty={args.empty} rounds={args.rounds} "
        f"(A B B A: {2 * args.rounds} runs a side per engine)  python {sys.version.split()[0]}  "
        f"total {time.perf_counter() - started:.0f}s"
    )
    print(f"before: {trees['before']} @ {commits['before']}")
    print(f"after:  {trees['after']} @ {commits['after']}\n")
    print_ab(args.engines, runs)


def brief(result: dict[str, float | str]) -> str:
    return "  ".join(f"{key} {float(result[key]):,.0f}" for key in METRICS if key in result)


def values(runs: list[dict[str, float | str]], key: str) -> list[float]:
    return [float(r[key]) for r in runs if key in r]


def print_ab(engines: list[str], runs: dict[tuple[str, str], list[dict[str, float | str]]]) -> None:
    headers = ["engine", "metric (median of runs)", "before", "after", "after/before",
               "before range", "after range"]  # fmt: skip
    rows: list[list[str]] = []
    for engine in engines:
        for key, label in METRICS.items():
            a = values(runs.get((engine, "before"), []), key)
            b = values(runs.get((engine, "after"), []), key)
            if not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            rows.append([
                engine, label, f"{ma:,.0f}", f"{mb:,.0f}", f"{mb / ma:.3f}x",
                f"{min(a):,.0f}-{max(a):,.0f}", f"{min(b):,.0f}-{max(b):,.0f}",
            ])  # fmt: skip
    print_table(headers, rows)


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    left = 2  # the engine and the metric's label
    fmt = "  ".join(f"{{:<{w}}}" if i < left else f"{{:>{w}}}" for i, w in enumerate(widths))
    print(fmt.format(*headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt.format(*row), flush=True)


# -- in-process -----------------------------------------------------------------------------


def run_here(args: argparse.Namespace) -> None:
    rows: list[list[str]] = []
    module = "?"
    with databases(args.engines) as dbs:
        for engine in args.engines:
            result = measure(dbs.fresh(engine, "here"), args.jobs, args.single, args.empty)
            module = str(result["module"])
            print(f"{engine:<10} {brief(result)}", flush=True)
            rows += [
                [engine, label, f"{float(result[key]):,.0f}"]
                for key, label in METRICS.items()
                if key in result
            ]
    print(
        f"\nkombu_sqlqueue from {module} (code {code_version()})  jobs={args.jobs} "
        f"single={args.single} empty={args.empty}  python {sys.version.split()[0]}\n"
    )
    print_table(["engine", "metric", "rate"], rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--ab", nargs=2, type=Path, metavar=("BEFORE_DIR", "AFTER_DIR"),
        help="two work trees, measured in subprocesses (PYTHONPATH=tree), interleaved",
    )  # fmt: skip
    p.add_argument("--rounds", type=int, default=3, help="--ab: rounds of A B B A")
    p.add_argument(
        "--engines",
        type=lambda s: [e.strip() for e in s.split(",") if e.strip()],
        default=list(ENGINES),
        help="comma-separated, of: " + ",".join(ENGINES),
    )
    p.add_argument("--jobs", type=int, default=5000, help="jobs drained 10 a claim")
    p.add_argument("--single", type=int, default=2000, help="jobs drained 1 a claim")
    p.add_argument("--empty", type=int, default=500, help="claims of the empty queue (0: none)")
    p.add_argument("--timeout", type=float, default=900.0, help="bound on one run, seconds")
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)  # one run, JSON out
    p.add_argument(
        "--limited",
        action="store_true",
        help="measure a limited queue instead (this tree): throughput, the wait before a "
        "freed slot is used (p50/p99), the most held at once",
    )
    p.add_argument("--limit", type=int, default=2, help="--limited: the concurrency limit")
    p.add_argument("--consumers", type=int, default=6, help="--limited: worker threads")
    p.add_argument("--limited-jobs", type=int, default=400, help="--limited: jobs drained")
    p.add_argument("--work-ms", type=float, default=50.0, help="--limited: one job's work")
    p.add_argument("--rest-ms", type=float, default=10.0, help="--limited: rest after an ack")
    p.add_argument(
        "--rated",
        action="store_true",
        help="measure a rate-limited queue instead (this tree, Kombu consumers): the rate "
        "achieved, the gaps between deliveries (p50/p99), the most in any second",
    )
    p.add_argument("--rate", default="100/s", help="--rated: the rate limit")
    p.add_argument(
        "--keyed",
        action="store_true",
        help="measure a queue under a per-key limit with a hot key's backlog ahead",
    )
    p.add_argument("--hot", type=int, default=20000, help="--keyed: the hot key's backlog")
    p.add_argument("--keys", type=int, default=40, help="--keyed: other keys (10 jobs each)")
    p.add_argument("--per-key", type=int, default=1, help="--keyed: the per-key limit")
    p.add_argument("--rated-jobs", type=int, default=400, help="--rated: messages drained")
    args = p.parse_args(argv)
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        p.error(f"unknown engine(s) {unknown}: choose from {','.join(ENGINES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.jobs, args.single, args.empty)), flush=True)
        return 0
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    if args.limited:
        run_limited(args)
    elif args.rated:
        run_rated(args)
    elif args.keyed:
        run_keyed(args)
    elif args.ab:
        run_ab(args)
    else:
        run_here(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
