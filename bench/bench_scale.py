"""Scale-out: N consumer processes on the server engines, side by side with Redis.

Usage::

    python bench/bench_scale.py --json scale.json            # the standard matrix, ~25 min
    python bench/bench_scale.py --consumers 1,4,32 --prefetch 4 --configs pg_async redis
    python bench/bench_scale.py --plot-only scale.json        # docs/scale.png from a saved run

One invocation starts a throwaway PostgreSQL and MariaDB (``tests/servers.py``) and
``redis-server`` on 127.0.0.1 and runs, per cell (consumers N, prefetch, publishers),
every config one after the other on a fresh database / flushed Redis, so that each
ratio compares runs minutes apart at most:

* ``pg`` (``sqlqueue+postgresql://``, ``synchronous_commit=on``), ``pg_async`` (the
  transport option ``synchronous_commit='off'``), ``mariadb``
  (``innodb_flush_log_at_trx_commit=1``), ``mariadb_async`` (the server's
  ``innodb_flush_log_at_trx_commit=2``: MariaDB has no per-session switch), ``redis``
  (Kombu's ``redis://``, persistence off);
* each consumer is a separate process with its own connections (as a host would be),
  a plain Kombu ``Consumer`` with ``prefetch_count`` that acks every message; the
  publishers are separate processes too. Rate = messages / (last ack - first publish).
* for this transport each consumer counts its claims (and those that came back empty)
  and its wake-ups, so the herd is visible: "claims/msg" and "wakes/msg";
* CPU: seconds used by the database server's processes and by the clients during the
  cell, as a share of the machine's cores ("srv%", "cli%"): what the limit is.

Then, unless skipped: ``--celery`` (4 ``celery worker -P prefork -c 4`` on one queue),
``wake`` (idle latency and claims per message with N idle consumers on PostgreSQL) and
``depth`` (16 consumers draining with 1,000 and 1,000,000 jobs waiting, PostgreSQL).

Latency can be added on loopback with ``--netem-ms`` (``tc qdisc … netem``; needs root
and the sch_netem module, and is said when missing). Every wait is bounded; servers,
processes and temp dirs are removed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
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
from scale_plot import plot, plot_file  # noqa: E402

CONFIGS = ("pg_async", "pg", "mariadb_async", "mariadb", "redis")
OURS = ("pg_async", "pg", "mariadb_async", "mariadb")
OPTIONS: dict[str, dict[str, Any]] = {"pg_async": {"synchronous_commit": "off"}}
QUEUE = "bench_scale"
CORES = os.cpu_count() or 1


@dataclass
class Cell:
    config: str
    consumers: int
    prefetch: int
    publishers: int
    messages: int
    seconds: float = float("nan")
    rate: float = float("nan")
    publish_seconds: float = float("nan")
    claims: int = 0
    empty_claims: int = 0
    wakes: int = 0
    server_cpu: float = float("nan")  # share of all cores, 0..1
    client_cpu: float = float("nan")
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.consumers, self.prefetch, self.publishers)


# -- the environment --------------------------------------------------------------------------


@dataclass
class Env:
    workdir: Path
    pg: servers.Server | None = None
    maria: servers.Server | None = None
    redis_url: str | None = None
    dbs: int = 0
    maria_flush: int | None = None

    def url(self, config: str) -> str:
        """A broker URL with a fresh database (or a flushed Redis) for ``config``."""
        self.dbs += 1
        name = f"s{self.dbs}_{config}"
        if config.startswith("pg"):
            assert self.pg is not None
            return "sqlqueue+" + self.pg.create_database(name)
        if config.startswith("mariadb"):
            assert self.maria is not None
            self._maria_flush(2 if config == "mariadb_async" else 1)
            return "sqlqueue+" + self.maria.create_database(name)
        if config == "redis":
            assert self.redis_url is not None
            bt.flush_redis(self.redis_url)
            return self.redis_url
        raise ValueError(config)

    def _maria_flush(self, value: int) -> None:
        if self.maria_flush == value:
            return
        import sqlalchemy as sa

        assert self.maria is not None
        engine = sa.create_engine(self.maria.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"SET GLOBAL innodb_flush_log_at_trx_commit = {int(value)}")
        engine.dispose()
        self.maria_flush = value

    def server_pids(self, config: str) -> list[int]:
        if config.startswith("pg") and self.pg is not None:
            return _tree(self.pg.proc.pid)
        if config.startswith("mariadb") and self.maria is not None:
            return _tree(self.maria.proc.pid)
        if config == "redis":
            return _pids_named("redis-server")
        return []


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _tree(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _pids_named(name: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    pids.append(int(entry))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` (and of their waited-for children), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / tick


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def environment(workdir: Path, configs: list[str]) -> Iterator[Env]:
    env = Env(workdir)
    try:
        if any(c.startswith("pg") for c in configs):
            env.pg = servers.start_postgresql()
        if any(c.startswith("mariadb") for c in configs):
            env.maria = servers.start_mariadb()
        with bt.redis_server(workdir) as redis_url:
            env.redis_url = redis_url
            yield env
    finally:
        for server in (env.pg, env.maria):
            if server is not None:
                server.stop()


@contextlib.contextmanager
def netem(ms: float) -> Iterator[str]:
    """Add ``ms`` of delay each way on loopback for the block (``tc netem``), if possible."""
    if ms <= 0:
        yield "no added latency"
        return
    tc = shutil.which("tc")
    if tc is None:
        yield "tc not found (apt-get install iproute2): no added latency"
        return
    add = [tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", f"{ms}ms"]
    done = subprocess.run(add, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        yield f"tc netem refused ({done.stderr.strip()}): no added latency"
        return
    try:
        yield f"{ms} ms added each way on loopback (tc netem)"
    finally:
        subprocess.run([tc, "qdisc", "del", "dev", "lo", "root"], check=False)


# -- one cell: P publishers, N consumers --------------------------------------------------------


def _entities() -> tuple[Exchange, Queue]:
    exchange = Exchange(QUEUE, type="direct", durable=True)
    return exchange, Queue(QUEUE, exchange=exchange, routing_key=QUEUE, durable=True)


def _count_store_calls(conn: Connection, slots: Any, index: int) -> None:
    """Count this consumer's claims, empty claims and wake-ups (this transport only)."""
    transport = conn.transport
    store = getattr(transport, "store", None)
    if store is None:
        return
    claim, wait = store.claim, store.wait_for_jobs

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        result = claim(*args, **kwargs)
        slots[3 * index] += 1
        if not result.jobs:
            slots[3 * index + 1] += 1
        return result

    def counting_wait(*args: Any, **kwargs: Any) -> bool:
        woke = bool(wait(*args, **kwargs))
        if woke:
            slots[3 * index + 2] += 1
        return woke

    store.claim = counting_claim
    store.wait_for_jobs = counting_wait


def _consumer(
    url: str,
    options: dict[str, Any],
    prefetch: int,
    index: int,
    counts: Any,
    last_ack: Any,
    calls: Any,
    ready: Any,
    stop: Any,
    deadline: float,
) -> None:
    _, queue = _entities()
    with Connection(url, transport_options=options) as conn:
        conn.connect()
        _count_store_calls(conn, calls, index)
        channel = conn.channel()
        mine = 0

        def on_message(_body: Any, message: Any) -> None:
            nonlocal mine
            message.ack()
            mine += 1
            counts[index] = mine
            last_ack[index] = time.time()

        with Consumer(
            channel,
            queues=[queue],
            callbacks=[on_message],
            accept=["json"],
            prefetch_count=prefetch,
        ):
            ready.release()
            while not stop.is_set() and time.time() < deadline:
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=0.2)
        with contextlib.suppress(Exception):
            channel.close()


def _publisher(
    url: str,
    options: dict[str, Any],
    first: int,
    n: int,
    go: Any,
    started: Any,
    index: int,
    finished: Any,
) -> None:
    exchange, queue = _entities()
    with Connection(url, transport_options=options) as conn:
        channel = conn.channel()
        producer = Producer(channel, exchange=exchange, serializer="json")
        queue.bind(channel).declare()
        publish = producer.publish
        go.wait(60)
        started[index] = time.time()
        for i in range(first, first + n):
            publish(bt.body(i), routing_key=QUEUE)
        finished[index] = time.time()
        channel.close()


def _stop(procs: list[BaseProcess]) -> None:
    for p in procs:
        p.join(timeout=5)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def run_cell(env: Env, cell: Cell, timeout: float) -> Cell:
    ctx = mp.get_context("fork")  # kombu and the drivers already imported: fast starts
    url = env.url(cell.config)
    options = dict(OPTIONS.get(cell.config, {}))
    with Connection(url, transport_options=options) as conn:  # tables and queue, once
        channel = conn.channel()
        _entities()[1].bind(channel).declare()
        channel.close()
    n, m = cell.consumers, cell.messages
    counts = ctx.Array("q", n, lock=False)
    last_ack = ctx.Array("d", n, lock=False)
    calls = ctx.Array("q", 3 * n, lock=False)
    started = ctx.Array("d", cell.publishers, lock=False)
    finished = ctx.Array("d", cell.publishers, lock=False)
    ready, stop, go = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    deadline = time.time() + timeout + 60
    procs: list[BaseProcess] = []
    pids = env.server_pids(cell.config)
    try:
        for index in range(n):
            p = ctx.Process(
                target=_consumer,
                args=(
                    url,
                    options,
                    cell.prefetch,
                    index,
                    counts,
                    last_ack,
                    calls,
                    ready,
                    stop,
                    deadline,
                ),
                daemon=True,
            )
            p.start()
            procs.append(p)
        for _ in range(n):
            if not ready.acquire(timeout=60):
                raise bt.BenchTimeout("consumer processes did not start within 60 s")
        share, first = divmod(m, cell.publishers)
        for index in range(cell.publishers):
            count = share + (1 if index < first else 0)
            start = index * share + min(index, first)
            p = ctx.Process(
                target=_publisher,
                args=(url, options, start, count, go, started, index, finished),
                daemon=True,
            )
            p.start()
            procs.append(p)
        time.sleep(0.3)  # publishers connected and declared
        pids = env.server_pids(cell.config)  # now with the backends of every client
        srv0, cli0 = cpu_seconds(pids), children_cpu()
        wall0 = time.time()
        go.set()
        end = time.monotonic() + timeout
        while sum(counts[:]) < m:
            if time.monotonic() > end:
                raise bt.BenchTimeout(f"acked {sum(counts[:])} of {m} in {timeout:.0f} s")
            time.sleep(0.01)
        wall1 = time.time()
        srv1 = cpu_seconds(pids)
        stop.set()
        _stop(procs)
        cli1 = children_cpu()
        t0 = min(started[:])
        cell.seconds = max(last_ack[:]) - t0
        cell.rate = m / cell.seconds
        cell.publish_seconds = max(finished[:]) - t0
        cell.claims = sum(calls[0::3])
        cell.empty_claims = sum(calls[1::3])
        cell.wakes = sum(calls[2::3])
        span = max(wall1 - wall0, 1e-6)
        cell.server_cpu = (srv1 - srv0) / span / CORES
        # The clients' CPU includes their start-up and shutdown: an upper bound.
        cell.client_cpu = (cli1 - cli0) / span / CORES
    except bt.BenchTimeout as exc:
        cell.note = str(exc)
    finally:
        stop.set()
        go.set()
        _stop(procs)
    return cell


# -- the matrix ---------------------------------------------------------------------------------


def matrix(args: argparse.Namespace, env: Env) -> list[Cell]:
    cells: list[Cell] = []
    keys = [
        (n, prefetch, pubs)
        for pubs in args.publishers
        for prefetch in args.prefetch
        for n in args.consumers
        if pubs == 1 or prefetch in args.prefetch_multi_publisher
    ]
    total = len(keys) * len(args.configs) * args.repeat
    done = 0
    for n, prefetch, pubs in keys:
        for _round in range(args.repeat):
            for config in args.configs:
                cell = run_cell(env, Cell(config, n, prefetch, pubs, args.messages), args.timeout)
                cells.append(cell)
                done += 1
                print(
                    f"[{done}/{total}] {config:<13} N={n:<2} prefetch={prefetch:<2} "
                    f"publishers={pubs}: {_fmt_rate(cell.rate)} msg/s"
                    f"{'  ' + cell.note if cell.note else ''}",
                    flush=True,
                )
    return cells


def medians(cells: list[Cell]) -> list[Cell]:
    """One cell per (config, key): the median run by rate."""
    groups: dict[tuple[str, int, int, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.config, *cell.key), []).append(cell)
    out = []
    for group in groups.values():
        ok = sorted((c for c in group if c.rate == c.rate), key=lambda c: c.rate)
        out.append(ok[len(ok) // 2] if ok else group[0])
    return out


def _fmt_rate(rate: float) -> str:
    return "n/a" if rate != rate else f"{rate:,.0f}"


def print_matrix(cells: list[Cell], configs: list[str]) -> None:
    by = {(c.config, *c.key): c for c in cells}
    keys = sorted({c.key for c in cells}, key=lambda k: (k[2], k[1], k[0]))
    ours = [c for c in configs if c != "redis"]
    head = ["N", "prefetch", "pubs", *configs, *(f"{c}/redis" for c in ours if "redis" in configs)]
    head += [f"{c} claims/msg" for c in ours] + [f"{c} srv%/cli%" for c in configs]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for key in keys:
        row = [str(key[0]), str(key[1]), str(key[2])]
        row += [_fmt_rate(by[(c, *key)].rate) if (c, *key) in by else "" for c in configs]
        redis = by.get(("redis", *key))
        for c in ours:
            if redis is None:
                continue
            mine = by.get((c, *key))
            ok = mine is not None and redis.rate == redis.rate and mine.rate == mine.rate
            row.append(f"**{mine.rate / redis.rate:.2f}×**" if ok and mine else "n/a")
        for c in ours:
            mine = by.get((c, *key))
            row.append(f"{mine.claims / mine.messages:.2f}" if mine and mine.claims else "")
        for c in configs:
            mine = by.get((c, *key))
            row.append(
                f"{100 * mine.server_cpu:.0f}/{100 * mine.client_cpu:.0f}"
                if mine and mine.server_cpu == mine.server_cpu
                else ""
            )
        print("| " + " | ".join(row) + " |")


# -- Celery: 4 prefork workers x -c 4 on one queue ----------------------------------------------


def run_celery(env: Env, config: str, n: int, workers: int, concurrency: int) -> Cell:
    from celery_bench_app import QUEUE as CELERY_QUEUE
    from celery_bench_app import make_app

    url = env.url(config)
    cdir = env.workdir / f"celery-{config}-{env.dbs}"
    cdir.mkdir()
    done_file = cdir / "done.txt"
    cell = Cell(f"celery_{config}", workers * concurrency, 4, 1, n)
    options = OPTIONS.get(config, {})
    app = make_app(url, 4, options)
    noop = app.tasks["bench.noop"]
    with app.connection_for_write() as conn:  # the queue exists before the workers start
        conn.default_channel.queue_declare(CELERY_QUEUE, durable=True)
    environ = dict(os.environ)
    environ.update(
        BENCH_BROKER_URL=url,
        BENCH_PREFETCH_MULTIPLIER="4",
        BENCH_DONE_FILE=str(done_file),
        BENCH_TRANSPORT_OPTIONS=json.dumps(options),
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), environ.get("PYTHONPATH")])),
    )
    procs = []
    logs = []
    pids = env.server_pids(config)
    try:
        for w in range(workers):
            log = open(cdir / f"worker{w}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            cmd = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_bench_app",
                "worker",
                "-P",
                "prefork",
                "-c",
                str(concurrency),
                "-l",
                "WARNING",
                "-Q",
                CELERY_QUEUE,
                "-n",
                f"scale{w}-{config}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=environ,
                    cwd=cdir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        time.sleep(8)  # workers up and idle (their start-up is not the measurement)
        pids = env.server_pids(config)  # now with the workers' backends
        srv0 = cpu_seconds(pids)
        cli0 = sum(cpu_seconds(_tree(p.pid)) for p in procs)
        wall0 = time.time()
        for i in range(n):
            noop.delay(i)
        deadline = time.monotonic() + 300
        while True:
            count, stamps = bt._count_lines(done_file)
            if count >= n:
                break
            if time.monotonic() > deadline:
                cell.note = f"{count} of {n} tasks in 300 s"
                return cell
            time.sleep(0.05)
        wall1 = time.time()
        cell.server_cpu = (cpu_seconds(pids) - srv0) / (wall1 - wall0) / CORES
        cell.client_cpu = (
            (sum(cpu_seconds(_tree(p.pid)) for p in procs) - cli0) / (wall1 - wall0) / CORES
        )
        cell.seconds = stamps[-1] - wall0
        cell.rate = n / cell.seconds
        return cell
    finally:
        app.close()
        for proc in procs:
            bt._stop_process(proc, grace=15)
        for log in logs:
            log.close()


# -- idle wake-ups: latency and the herd --------------------------------------------------------


def _idle_consumer(
    url: str,
    extra: dict[str, Any],
    index: int,
    lat: Any,
    calls: Any,
    ready: Any,
    stop: Any,
    deadline: float,
) -> None:
    _, queue = _entities()
    # Slow idle polling (every 5 s, not 0.1 s growing to 1 s), so the claims counted are
    # those the enqueues cause; wake-ups on PostgreSQL do not depend on it.
    options = {"polling_interval": 1.0, "max_polling_interval": 5.0, **extra}
    with Connection(url, transport_options=options if url.startswith("sqlqueue") else {}) as conn:
        conn.connect()
        _count_store_calls(conn, calls, index)
        channel = conn.channel()

        def on_message(body: Any, message: Any) -> None:
            message.ack()
            slot = int(body["i"])
            lat[slot] = time.time() - float(body["sent"])

        with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
            ready.release()
            while not stop.is_set() and time.time() < deadline:
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=5.0)


def run_wake(env: Env, config: str, n: int, samples: int, gap: float) -> dict[str, float]:
    """``n`` idle consumers; one message every ``gap`` s; latency and claims per message."""
    ctx = mp.get_context("fork")
    url = env.url(config)
    exchange, queue = _entities()
    with Connection(url) as conn:
        queue.bind(conn.channel()).declare()
    lat = ctx.Array("d", samples, lock=False)
    calls = ctx.Array("q", 3 * n, lock=False)
    ready, stop = ctx.Semaphore(0), ctx.Event()
    deadline = time.time() + 60 + samples * gap * 2
    procs: list[BaseProcess] = []
    try:
        for index in range(n):
            p = ctx.Process(
                target=_idle_consumer,
                args=(url, OPTIONS.get(config, {}), index, lat, calls, ready, stop, deadline),
                daemon=True,
            )
            p.start()
            procs.append(p)
        for _ in range(n):
            if not ready.acquire(timeout=60):
                raise bt.BenchTimeout("consumers did not start")
        time.sleep(max(gap, 2.0))  # every consumer in its idle wait
        # Idle polls happen whether messages come or not: count them over the same time
        # with no messages, and subtract, so "claims/msg" is what one enqueue costs.
        quiet = [sum(calls[0::3]), sum(calls[2::3])]
        time.sleep(samples * gap)
        idle = [sum(calls[0::3]) - quiet[0], sum(calls[2::3]) - quiet[1]]
        base = [sum(calls[0::3]), sum(calls[2::3])]
        with Connection(url, transport_options=OPTIONS.get(config, {})) as conn:
            producer = Producer(conn.channel(), exchange=exchange, serializer="json")
            for i in range(samples):
                producer.publish({"i": i, "sent": time.time()}, routing_key=QUEUE)
                time.sleep(gap)
        claims = sum(calls[0::3]) - base[0] - idle[0]
        wakes = sum(calls[2::3]) - base[1] - idle[1]
    finally:
        stop.set()
        for p in procs:  # each is in a wait of up to 5 s
            p.join(timeout=7)
        _stop(procs)
    got = sorted(x * 1000 for x in lat[:] if x > 0)
    return {
        "consumers": n,
        "received": len(got),
        "p50_ms": statistics.median(got) if got else float("nan"),
        "p99_ms": got[min(len(got) - 1, int(len(got) * 0.99))] if got else float("nan"),
        "max_ms": got[-1] if got else float("nan"),
        "claims_per_msg": claims / samples,
        "wakes_per_msg": wakes / samples,
    }


# -- claim rate at depth with 16 consumers ------------------------------------------------------


def _drainer(
    url: str, prefetch: int, index: int, counts: Any, ready: Any, go: Any, stop: Any
) -> None:
    with Connection(url) as conn:
        conn.connect()
        channel = conn.channel()
        mine = 0

        def on_message(_body: Any, message: Any) -> None:
            nonlocal mine
            message.ack()
            mine += 1
            counts[index] = mine

        queue = Queue("q", Exchange("q", type="direct"), routing_key="q")
        with Consumer(
            channel,
            queues=[queue],
            callbacks=[on_message],
            accept=["json"],
            prefetch_count=prefetch,
        ):
            ready.release()
            go.wait(120)
            while not stop.is_set():
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=0.2)


def run_depth(env: Env, depth: int, consumers: int, drain: int, prefetch: int) -> float:
    """Deliveries per second to ``consumers`` processes with ``depth`` jobs waiting."""
    from kombu_sqlqueue.store import open_store

    ctx = mp.get_context("fork")
    url = env.url("pg")
    store = open_store(url.removeprefix("sqlqueue+"))
    # Kombu messages, so the consumers can read them (bench_claim_depth's are raw bytes).
    body = json.dumps(
        {
            "body": json.dumps(bt.body(0)),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {},
            "properties": {
                "delivery_mode": 2,
                "delivery_info": {"exchange": "q", "routing_key": "q"},
                "priority": 0,
                "body_encoding": "utf-8",
            },
        }
    ).encode()
    bench_claim_depth.PAYLOAD = body
    bench_claim_depth.fill(store, depth)
    store.close()
    counts = ctx.Array("q", consumers, lock=False)
    ready, go, stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(target=_drainer, args=(url, prefetch, i, counts, ready, go, stop), daemon=True)
        for i in range(consumers)
    ]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=60):
                raise bt.BenchTimeout("drainers did not start")
        t0 = time.perf_counter()
        go.set()
        target = min(drain, depth)
        while sum(counts[:]) < target:
            if time.perf_counter() - t0 > 300:
                raise bt.BenchTimeout(f"drained {sum(counts[:])} of {target}")
            time.sleep(0.01)
        return sum(counts[:]) / (time.perf_counter() - t0)
    finally:
        stop.set()
        _stop(procs)


# -- driver -------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument("--consumers", type=_ints, default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--prefetch", type=_ints, default=[1, 4, 32])
    p.add_argument("--publishers", type=_ints, default=[1, 4])
    p.add_argument(
        "--prefetch-multi-publisher",
        type=_ints,
        default=[4],
        help="prefetch values also run with more than one publisher (default: 4)",
    )
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=1, help="runs per cell (median reported)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per cell")
    p.add_argument("--celery", action="store_true", help="add 4 prefork workers x -c 4")
    p.add_argument("--celery-messages", type=int, default=3000)
    p.add_argument("--wake", type=_ints, default=[1, 8, 32], help="idle consumers (N list)")
    p.add_argument("--wake-samples", type=int, default=30)
    p.add_argument("--depth", action="store_true", help="16 consumers at 1k and 1M waiting")
    p.add_argument("--netem-ms", type=float, default=0.0)
    p.add_argument("--skip-matrix", action="store_true")
    p.add_argument("--json", type=Path, help="write every cell here")
    p.add_argument(
        "--plot", default=str(HERE.parent / "docs" / "scale.png"), help="PNG path; '' for none"
    )
    p.add_argument("--plot-only", type=Path, help="plot a saved --json report and exit")
    return p.parse_args(argv)


def _raise_on_sigterm(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_only:
        plot_file(args.plot_only, Path(args.plot))
        print(f"plot written to {args.plot}")
        return 0
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "commit": bt.code_version(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{CORES} cores, Python {sys.version.split()[0]}",
        "configs": args.configs,
        "messages": args.messages,
    }
    try:
        with environment(workdir, args.configs) as env, netem(args.netem_ms) as latency:
            report["latency"] = latency
            print(f"commit {report['commit']}, {report['machine']}; {latency}", flush=True)
            if not args.skip_matrix:
                cells = medians(matrix(args, env))
                report["cells"] = [asdict(c) for c in cells]
                print_matrix(cells, args.configs)
            if args.celery:
                celery = []
                for config in [c for c in args.configs if c in ("pg_async", "pg", "redis")]:
                    cell = run_celery(env, config, args.celery_messages, 4, 4)
                    celery.append(cell)
                    print(
                        f"celery 4 workers x -c 4, {config}: {_fmt_rate(cell.rate)} tasks/s "
                        f"(srv {100 * cell.server_cpu:.0f}%, cli {100 * cell.client_cpu:.0f}%)"
                        f" {cell.note}",
                        flush=True,
                    )
                report["celery"] = [asdict(c) for c in celery]
            if args.wake:
                wake: dict[str, list[dict[str, float]]] = {}
                for n in args.wake:
                    for config in [c for c in ("pg", "pg_async", "redis") if c in args.configs]:
                        row = run_wake(env, config, n, args.wake_samples, 0.25)
                        wake.setdefault(config, []).append(row)
                        print(
                            f"idle wake, {config}, {n} consumers: p50 {row['p50_ms']:.1f} ms, "
                            f"p99 {row['p99_ms']:.1f} ms, claims/msg "
                            f"{row['claims_per_msg']:.2f}, wakes/msg "
                            f"{row['wakes_per_msg']:.2f}",
                            flush=True,
                        )
                report["wake"] = wake
            if args.depth and env.pg is not None:
                rates = {}
                for depth in (1_000, 1_000_000):
                    rates[depth] = run_depth(env, depth, 16, 1_000 if depth == 1_000 else 5_000, 4)
                    print(
                        f"16 consumers, {depth:,} waiting: {rates[depth]:,.0f} deliveries/s",
                        flush=True,
                    )
                report["depth"] = {
                    "rate_1k": rates[1_000],
                    "rate_1m": rates[1_000_000],
                    "ratio": rates[1_000_000] / rates[1_000],
                }
                print(f"ratio 1M/1k: {report['depth']['ratio']:.2f}×")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["seconds"] = time.perf_counter() - t0
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
        print(f"report written to {args.json}")
    if "cells" in report and args.plot:
        plot(report, Path(args.plot))
        print(f"plot written to {args.plot}")
    print(f"total {report['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
