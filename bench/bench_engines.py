"""This transport on PostgreSQL and MariaDB, against Kombu's sqla+postgresql:// and redis://.

Usage::

    python bench/bench_engines.py [--messages N] [--samples 50] [--json out.json]

One invocation starts a throwaway PostgreSQL and MariaDB (``tests/servers.py``)
and ``redis-server``, then measures (a fresh database / flushed Redis per cell):

* throughput, msgs/s (the scenarios of ``bench_transports.py``): ``publish`` (1
  process), ``consume_ack`` (1 consumer process, prefetch 32) and ``e2e_4c`` (1
  publisher + 4 consumer processes), for ``pg`` (``sqlqueue+postgresql://``,
  server durability: ``synchronous_commit=on``), ``pg_async`` (the same with the
  transport option ``synchronous_commit='off'``), ``mariadb``
  (``sqlqueue+mysql://``, ``innodb_flush_log_at_trx_commit=1``), ``sqla_pg``
  (Kombu's ``sqla+postgresql+psycopg://``) and ``redis``;
* enqueue -> delivery latency for an IDLE consumer: a consumer process per
  engine waits; every ``--gap`` seconds (>= 1.5 s, so it is in its idle wait) a
  producer publishes one message carrying ``time.time()``; the consumer
  records the receive time. p50/p99 over ``--samples`` messages. The engines
  run side by side, their publishes staggered so no two coincide;
* claim rate with 1,000 and 1,000,000 jobs waiting on PostgreSQL
  (``bench_claim_depth.claim_rate``), unless ``--skip-depth``.

Every wait is bounded; servers, processes and temp dirs are removed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import random
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.messaging import Consumer, Producer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import bench_claim_depth  # noqa: E402
import bench_transports as bt  # noqa: E402
import servers  # noqa: E402

CONFIGS = ("pg", "pg_async", "mariadb", "sqla_pg", "redis")
SCENARIOS = ("publish", "consume_ack", "e2e_4c")
RUNNERS = {"publish": bt.run_publish, "consume_ack": bt.run_consume, "e2e_4c": bt.run_e2e}
LATENCY_CONFIGS = ("sqlite", "sqlite_poll100", "pg", "mariadb", "mariadb_poll100", "redis")
OPTIONS: dict[str, dict[str, Any]] = {
    "pg_async": {"synchronous_commit": "off"},
    "sqlite_poll100": {"max_polling_interval": 0.1},
    "mariadb_poll100": {"max_polling_interval": 0.1},
}


@dataclass
class Env:
    workdir: Path
    pg: servers.Server | None = None
    maria: servers.Server | None = None
    redis_url: str | None = None
    dbs: int = 0

    def url(self, config: str) -> str | None:
        """A broker URL with a fresh database for ``config``."""
        self.dbs += 1
        name = f"b{self.dbs}_{config}"
        if config in ("pg", "pg_async", "sqla_pg"):
            assert self.pg is not None
            url = self.pg.create_database(name)
            if config == "sqla_pg":
                return "sqla+" + url.replace("postgresql://", "postgresql+psycopg://", 1)
            return "sqlqueue+" + url
        if config.startswith("mariadb"):
            assert self.maria is not None
            return "sqlqueue+" + self.maria.create_database(name)
        if config.startswith("sqlite"):
            return f"sqlqueue+sqlite:///{self.workdir / (name + '.db')}"
        if config == "redis":
            if self.redis_url is not None:
                bt.flush_redis(self.redis_url)
            return self.redis_url
        raise ValueError(config)


@contextlib.contextmanager
def environment(workdir: Path) -> Iterator[Env]:
    env = Env(workdir)
    try:
        print("starting PostgreSQL, MariaDB and redis-server ...", flush=True)
        env.pg = servers.start_postgresql()
        env.maria = servers.start_mariadb()
        with bt.redis_server(workdir) as redis_url:
            env.redis_url = redis_url
            yield env
    finally:
        for server in (env.pg, env.maria):
            if server is not None:
                server.stop()


# -- throughput -----------------------------------------------------------------------------


def run_throughput(args: argparse.Namespace, env: Env) -> list[bt.Result]:
    results: list[bt.Result] = []
    for scenario in args.scenarios:
        for config in args.configs:
            n = args.messages
            url = env.url(config)
            if url is None:
                results.append(bt.Result(config, scenario, n, note="skipped"))
                continue
            print(f"[{scenario:<11} {config:<8}] running (N={n}) ...", end=" ", flush=True)
            try:
                r = RUNNERS[scenario](url, n, args.prefetch, args.timeout, OPTIONS.get(config))
            except Exception as exc:  # report and go on with the next cell
                print(f"FAILED: {type(exc).__name__}: {exc}", flush=True)
                results.append(bt.Result(config, scenario, n, note=type(exc).__name__))
                continue
            r.transport = config
            results.append(r)
            print(f"{r.rate:,.0f} msg/s ({r.seconds:.2f}s)", flush=True)
    return results


# -- idle latency ---------------------------------------------------------------------------


def _lat_entities() -> tuple[Exchange, Queue]:
    exchange = Exchange("bench_latency", type="direct", durable=True)
    return exchange, Queue("bench_latency", exchange=exchange, routing_key="bench_latency")


def _lat_consumer(
    url: str, options: dict[str, Any], n: int, out: Any, ready: Any, deadline: float
) -> None:
    """Consume ``n`` messages, putting receive_time - sent_time (seconds) on ``out``."""
    _, queue = _lat_entities()
    with Connection(url, transport_options=options) as conn:
        channel = conn.channel()
        got = 0

        def on_message(body: Any, message: Any) -> None:
            nonlocal got
            received = time.time()
            message.ack()
            out.put(received - float(body["sent"]))
            got += 1

        consumer = Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"])
        with consumer:
            ready.release()
            while got < n and time.time() < deadline:
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=5)
        with contextlib.suppress(Exception):
            channel.close()


def run_latency(args: argparse.Namespace, env: Env) -> dict[str, dict[str, float]]:
    ctx = mp.get_context("spawn")
    found = {c: env.url(c) for c in args.latency_configs}
    urls = {c: u for c, u in found.items() if u is not None}
    configs = list(urls)
    n = args.samples
    stagger = args.gap / (len(configs) + 1)
    deadline = time.time() + n * (args.gap + 0.5) + 120
    procs: list[BaseProcess] = []
    outs = {c: ctx.Queue() for c in configs}
    conns: dict[str, Connection] = {}
    producers: dict[str, Producer] = {}
    try:
        ready = ctx.Semaphore(0)
        exchange, queue = _lat_entities()
        for c in configs:
            conn = Connection(urls[c], transport_options=OPTIONS.get(c, {}))
            channel = conn.channel()
            queue.bind(channel).declare()
            conns[c] = conn
            producers[c] = Producer(channel, exchange=exchange, serializer="json")
            p = ctx.Process(
                target=_lat_consumer,
                args=(urls[c], OPTIONS.get(c, {}), n, outs[c], ready, deadline),
                daemon=True,
            )
            p.start()
            procs.append(p)
        for _ in configs:
            if not ready.acquire(timeout=60):
                raise bt.BenchTimeout("latency consumers did not start within 60s")
        print(
            f"latency: {n} samples x {len(configs)} engines, one every {args.gap:.1f}s "
            f"(~{n * args.gap:.0f}s) ...",
            flush=True,
        )
        time.sleep(args.gap)  # every consumer reaches its idle wait
        for i in range(n):
            for c in configs:
                time.sleep(stagger * random.uniform(0.8, 1.2))
                producers[c].publish({"sent": time.time(), "i": i}, routing_key="bench_latency")
            time.sleep(stagger)
            if (i + 1) % 10 == 0:
                print(f"  latency: {i + 1}/{n} rounds", flush=True)
        stats: dict[str, dict[str, float]] = {}
        for c in configs:
            samples: list[float] = []
            with contextlib.suppress(Exception):
                while len(samples) < n:
                    samples.append(outs[c].get(timeout=max(1.0, args.gap * 2)))
            stats[c] = latency_stats(samples)
            print(
                f"  {c:<16} n={len(samples)}  p50 {stats[c]['p50_ms']:.1f} ms  "
                f"p99 {stats[c]['p99_ms']:.1f} ms",
                flush=True,
            )
        return stats
    finally:
        for conn in conns.values():
            with contextlib.suppress(Exception):
                conn.release()
        for p in procs:
            p.join(timeout=10)
        bt._terminate(procs)


def latency_stats(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"n": len(ms), "p50_ms": q[49], "p99_ms": q[98], "max_ms": ms[-1]}


# -- claim depth ----------------------------------------------------------------------------


def run_depth(args: argparse.Namespace, env: Env) -> dict[str, float]:
    assert env.pg is not None
    out: dict[str, float] = {}
    for depth in args.depths:
        env.dbs += 1
        url = env.pg.create_database(f"b{env.dbs}_depth")
        print(f"claim depth {depth:,} on PostgreSQL (filling) ...", end=" ", flush=True)
        rate = bench_claim_depth.claim_rate(url, depth, args.batch, args.claims)
        out[str(depth)] = rate
        print(f"{rate:,.0f} jobs claimed+acked/s", flush=True)
    return out


# -- report ---------------------------------------------------------------------------------


def _rate(by: dict[tuple[str, str], bt.Result], scenario: str, config: str) -> float | None:
    r = by.get((scenario, config))
    return r.rate if r is not None and r.rate else None


def print_report(
    results: list[bt.Result],
    latency: dict[str, dict[str, float]],
    depth: dict[str, float],
    configs: list[str],
) -> list[dict[str, Any]]:
    by = {(r.scenario, r.transport): r for r in results}
    headers = ["scenario (msgs/s)", *configs, "pg/sqla", "pg/redis", "pgA/redis", "maria/redis"]
    rows = []
    for scenario in SCENARIOS:
        if not any(s == scenario for s, _ in by):
            continue

        def ratio(a: str, b: str, scenario: str = scenario) -> str:
            x, y = _rate(by, scenario, a), _rate(by, scenario, b)
            return f"{x / y:.2f}x" if x and y else "n/a"

        rows.append(
            [
                bt.SCENARIO_LABELS[scenario],
                *(bt._cell(by.get((scenario, c))) for c in configs),
                ratio("pg", "sqla_pg"),
                ratio("pg", "redis"),
                ratio("pg_async", "redis"),
                ratio("mariadb", "redis"),
            ]
        )
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
        print()
        print(fmt.format(*headers))
        print("  ".join("-" * w for w in widths))
        for row in rows:
            print(fmt.format(*row))
    if latency:
        print("\nidle consumer, enqueue -> delivery latency (ms)")
        print(f"{'engine':<18}{'n':>4}{'p50':>10}{'p99':>10}{'max':>10}")
        for c, s in latency.items():
            print(
                f"{c:<18}{s['n']:>4.0f}{s['p50_ms']:>10.1f}{s['p99_ms']:>10.1f}{s['max_ms']:>10.1f}"
            )
    if depth:
        keys = list(depth)
        print("\nclaim+ack rate by jobs waiting (PostgreSQL)")
        for k in keys:
            print(f"  {int(k):>9,}: {depth[k]:>9,.0f}/s  {depth[k] / depth[keys[0]]:.2f}x")

    checks: list[tuple[str, float | None, float]] = []

    def rel(scenario: str, a: str, b: str) -> float | None:
        x, y = _rate(by, scenario, a), _rate(by, scenario, b)
        return x / y if x and y else None

    checks.append(("pg consume_ack / sqla_pg", rel("consume_ack", "pg", "sqla_pg"), 5.0))
    checks.append(("pg_async publish / redis", rel("publish", "pg_async", "redis"), 1.5))
    checks.append(("pg_async consume_ack / redis", rel("consume_ack", "pg_async", "redis"), 1.5))
    pg_p50 = latency.get("pg", {}).get("p50_ms")
    checks.append(("pg idle latency p50 ms (<= 5)", pg_p50, 5.0))
    keys = list(depth)
    dr = depth[keys[-1]] / depth[keys[0]] if len(keys) > 1 else None
    checks.append((f"claim rate {keys[-1] if keys else '?'} / {keys[0] if keys else '?'}", dr, 0.8))
    out = []
    print("\ntargets (same run):")
    for name, got, want in checks:
        if got is None or got != got:
            print(f"  {name:<34} n/a")
            continue
        met = got <= want if "latency" in name else got >= want
        out.append({"target": name, "value": got, "want": want, "met": met})
        print(f"  {name:<34} {got:8.2f}  want {'<=' if 'latency' in name else '>='} {want}  "
              f"{'MET' if met else 'not met'}")  # fmt: skip
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", "-n", type=int, default=4000, help="messages per cell")
    p.add_argument("--prefetch", type=int, default=32)
    p.add_argument("--timeout", type=float, default=120.0, help="bound on each wait, seconds")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    p.add_argument("--samples", type=int, default=50, help="latency samples per engine (0: skip)")
    p.add_argument("--gap", type=float, default=1.6, help="seconds between one engine's messages")
    p.add_argument(
        "--latency-configs", nargs="+", default=list(LATENCY_CONFIGS), choices=LATENCY_CONFIGS
    )
    p.add_argument("--depths", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 10**6])
    p.add_argument("--batch", type=int, default=32, help="claim batch in the depth test")
    p.add_argument("--claims", type=int, default=100, help="claims timed per depth")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-depth", action="store_true")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    if a.gap < 1.5:
        p.error("--gap must be >= 1.5 s: the consumer must be idle")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, bt.raise_on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="sqlqueue-bench-engines-"))
    started = time.perf_counter()
    results: list[bt.Result] = []
    latency: dict[str, dict[str, float]] = {}
    depth: dict[str, float] = {}
    try:
        with environment(workdir) as env:
            if not args.skip_throughput:
                results = run_throughput(args, env)
            if args.samples > 0:
                latency = run_latency(args, env)
            if not args.skip_depth:
                depth = run_depth(args, env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    import kombu
    import psycopg
    import pymysql
    import sqlalchemy

    print(
        f"\nN={args.messages}  prefetch_count={args.prefetch}  python {sys.version.split()[0]}  "
        f"kombu {kombu.__version__}  sqlalchemy {sqlalchemy.__version__}  "
        f"psycopg {psycopg.__version__}  pymysql {pymysql.__version__}  "
        f"code {bt.code_version()}  "
        f"total {time.perf_counter() - started:.0f}s"
    )
    targets = print_report(results, latency, depth, [c for c in args.configs])
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "code": bt.code_version(),
                    "results": [asdict(r) for r in results],
                    "latency": latency,
                    "depth": depth,
                    "targets": targets,
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
