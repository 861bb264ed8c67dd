"""Kombu transports side by side: sqlqueue (ours), Kombu's sqla, memory:// and redis://.

Usage::

    python bench/bench_transports.py [--messages N] [--json out.json]

Scenarios (each transport gets a fresh database file / flushed Redis DB):

1. ``publish``      — N x ``Producer.publish`` to a direct exchange, one process.
2. ``consume_ack``  — N preloaded messages consumed and acked by one
   ``kombu.Consumer`` (``prefetch_count``), one process.
3. ``e2e_4c``       — one publisher process publishes N while 4 consumer processes
   consume and ack; time from the first publish to the last ack.
4. ``celery``       — N ``.delay()`` calls, then a real ``celery worker``
   (prefork, ``-c 2``, ``task_acks_late``) drains them; rate from the first to
   the last task completion (worker start-up excluded; ``celery_wall`` in the
   JSON includes it). ``celery_delay`` is the ``.delay()`` publish rate.

``memory://`` cannot cross processes, so it is n/a in scenarios 3 and 4.
The script starts ``/usr/bin/redis-server`` itself (no persistence) on a free
port and stops it at the end. Every wait is bounded; every process and temp
dir it creates is removed on exit, error or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from bench_common import code_version, raise_on_sigterm
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.messaging import Consumer, Producer

HERE = Path(__file__).resolve().parent
REDIS_SERVER = "/usr/bin/redis-server"
TRANSPORTS = ("sqlqueue", "sqla", "memory", "redis")
SCENARIOS = ("publish", "consume_ack", "e2e_4c", "celery", "celery_delay")
SCENARIO_LABELS = {
    "publish": "1 publish (1 proc)",
    "consume_ack": "2 consume+ack (1 proc)",
    "e2e_4c": "3 e2e 1 pub + 4 consumers",
    "celery": "4 celery worker tasks/s",
    "celery_delay": "4a celery .delay() (info)",
}
MULTIPROCESS = {"e2e_4c", "celery", "celery_delay"}
CONSUMERS = 4
PAYLOAD = "x" * 64


def body(i: int) -> dict[str, Any]:
    """A ~100-byte JSON message body."""
    return {"i": i, "kind": "bench", "payload": PAYLOAD}


@dataclass
class Result:
    transport: str
    scenario: str
    messages: int
    seconds: float | None = None
    rate: float | None = None
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


class BenchTimeout(Exception):
    """A bounded wait ran out."""


# -- environment: temp dir, redis ---------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group we created, then SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str | None]:
    """Start a throwaway redis-server; yield its URL (None when redis-server is missing)."""
    if not os.path.exists(REDIS_SERVER):
        print(f"{REDIS_SERVER} not found: skipping redis://", flush=True)
        yield None
        return
    port = free_port()
    rdir = workdir / "redis"
    rdir.mkdir()
    log = open(rdir / "redis.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(rdir),
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {rdir / 'redis.log'}")
            time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop_process(proc, grace=5)
        log.close()


def flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    client.flushdb()
    client.close()


def broker_url(transport: str, workdir: Path, scenario: str, redis_url: str | None) -> str | None:
    """The broker URL for a (transport, scenario); a fresh database file per scenario."""
    if transport == "redis":
        if redis_url is not None:
            flush_redis(redis_url)
        return redis_url
    if transport == "memory":
        return "memory://"
    sdir = workdir / f"{transport}-{scenario}"
    sdir.mkdir(exist_ok=True)
    if transport == "sqlqueue":
        return f"sqlqueue+sqlite:///{sdir / 'q.db'}"
    return f"sqla+sqlite:///{sdir / 'sqla.db'}"


def entities(scenario: str) -> tuple[Exchange, Queue]:
    name = f"bench_{scenario}"
    exchange = Exchange(name, type="direct", durable=True)
    return exchange, Queue(name, exchange=exchange, routing_key=name, durable=True)


# -- scenarios 1 and 2 (one process) ------------------------------------------------------


def publish_n(conn: Connection, scenario: str, n: int, start: int = 0) -> float:
    """Publish ``n`` messages; return the seconds it took (declaration excluded)."""
    exchange, queue = entities(scenario)
    channel = conn.channel()
    producer = Producer(channel, exchange=exchange, serializer="json")
    queue.bind(channel).declare()
    publish = producer.publish
    key = queue.routing_key
    t0 = time.perf_counter()
    for i in range(start, start + n):
        publish(body(i), routing_key=key)
    elapsed = time.perf_counter() - t0
    channel.close()
    return elapsed


def consume_n(
    conn: Connection, scenario: str, n: int, prefetch: int, timeout: float
) -> tuple[int, float]:
    """Consume and ack up to ``n`` messages within ``timeout``; return (count, seconds)."""
    _, queue = entities(scenario)
    channel = conn.channel()
    count = 0

    def on_message(_body: Any, message: Any) -> None:
        nonlocal count
        message.ack()
        count += 1

    consumer = Consumer(
        channel,
        queues=[queue],
        callbacks=[on_message],
        accept=["json"],
        prefetch_count=prefetch,
    )
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    with consumer:
        while count < n:
            if time.monotonic() > deadline:
                break
            with contextlib.suppress(socket.timeout, TimeoutError):
                conn.drain_events(timeout=0.5)
    elapsed = time.perf_counter() - t0
    channel.close()
    return count, elapsed


def run_publish(
    url: str, n: int, _prefetch: int, _timeout: float, options: dict[str, Any] | None = None
) -> Result:
    with Connection(url, transport_options=options or {}) as conn:
        conn.ensure_connection(max_retries=3)
        elapsed = publish_n(conn, "publish", n)
    return Result("", "publish", n, elapsed, n / elapsed)


def run_consume(
    url: str, n: int, prefetch: int, timeout: float, options: dict[str, Any] | None = None
) -> Result:
    with Connection(url, transport_options=options or {}) as conn:
        conn.ensure_connection(max_retries=3)
        publish_n(conn, "consume_ack", n)
    with Connection(
        url, transport_options=options or {}
    ) as conn:  # a fresh connection, as a worker would have
        count, elapsed = consume_n(conn, "consume_ack", n, prefetch, timeout)
    if count < n:
        raise BenchTimeout(f"consumed {count} of {n} in {timeout:.0f}s")
    return Result("", "consume_ack", n, elapsed, n / elapsed)


# -- scenario 3 (1 publisher + 4 consumers) ------------------------------------------------


def _e2e_consumer(
    url: str,
    n: int,
    prefetch: int,
    counter: Any,
    last_ack: Any,
    index: int,
    ready: Any,
    done: Any,
    deadline: float,
    options: dict[str, Any] | None = None,
) -> None:
    _, queue = entities("e2e_4c")
    with Connection(url, transport_options=options or {}) as conn:
        channel = conn.channel()

        def on_message(_body: Any, message: Any) -> None:
            message.ack()
            last_ack[index] = time.time()
            with counter.get_lock():
                counter.value += 1
                if counter.value >= n:
                    done.set()

        consumer = Consumer(
            channel,
            queues=[queue],
            callbacks=[on_message],
            accept=["json"],
            prefetch_count=prefetch,
        )
        with consumer:
            ready.release()
            while not done.is_set() and time.time() < deadline:
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=0.2)
        with contextlib.suppress(Exception):
            channel.close()


def _e2e_publisher(
    url: str, n: int, first_publish: Any, publish_done: Any, options: dict[str, Any] | None = None
) -> None:
    exchange, queue = entities("e2e_4c")
    with Connection(url, transport_options=options or {}) as conn:
        channel = conn.channel()
        producer = Producer(channel, exchange=exchange, serializer="json")
        # Virtual transports route through bindings declared in this process.
        queue.bind(channel).declare()
        key = queue.routing_key
        first_publish.value = time.time()
        for i in range(n):
            producer.publish(body(i), routing_key=key)
        publish_done.value = time.time()
        channel.close()


def _terminate(procs: list[BaseProcess]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def run_e2e(
    url: str, n: int, prefetch: int, timeout: float, options: dict[str, Any] | None = None
) -> Result:
    ctx = mp.get_context("spawn")
    # Declare the queue (and create the tables) once, before the consumers race to.
    with Connection(url, transport_options=options or {}) as conn:
        channel = conn.channel()
        entities("e2e_4c")[1].bind(channel).declare()
        channel.close()
    counter = ctx.Value("q", 0)
    last_ack = ctx.Array("d", CONSUMERS)
    first_publish = ctx.Value("d", 0.0, lock=False)
    publish_done = ctx.Value("d", 0.0, lock=False)
    ready = ctx.Semaphore(0)
    done = ctx.Event()
    deadline = time.time() + timeout + 30
    procs: list[BaseProcess] = []
    try:
        for index in range(CONSUMERS):
            p = ctx.Process(
                target=_e2e_consumer,
                args=(url, n, prefetch, counter, last_ack, index, ready, done, deadline, options),
                daemon=True,
            )
            p.start()
            procs.append(p)
        for _ in range(CONSUMERS):
            if not ready.acquire(timeout=30):
                raise BenchTimeout("consumer processes did not start within 30s")
        publisher = ctx.Process(
            target=_e2e_publisher,
            args=(url, n, first_publish, publish_done, options),
            daemon=True,
        )
        publisher.start()
        procs.append(publisher)
        if not done.wait(timeout=timeout):
            raise BenchTimeout(f"acked {counter.value} of {n} in {timeout:.0f}s")
        publisher.join(timeout=10)
        end = max(last_ack[:])
        elapsed = end - first_publish.value
        result = Result("", "e2e_4c", n, elapsed, n / elapsed)
        result.extra["publish_seconds"] = publish_done.value - first_publish.value
        return result
    finally:
        done.set()
        for proc in procs:
            proc.join(timeout=5)
        _terminate(procs)


# -- scenario 4 (Celery) -------------------------------------------------------------------


def _count_lines(path: Path) -> tuple[int, list[float]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, []
    lines = data.splitlines()
    return len(lines), [float(x) for x in lines[:1] + lines[-1:]]


def run_celery(
    url: str, n: int, prefetch_multiplier: int, timeout: float, workdir: Path, transport: str
) -> list[Result]:
    sys.path.insert(0, str(HERE))
    try:
        from celery_bench_app import make_app
    finally:
        sys.path.remove(str(HERE))
    cdir = workdir / f"celery-{transport}"
    cdir.mkdir(exist_ok=True)
    done_file = cdir / "done.txt"

    app = make_app(url, prefetch_multiplier)
    noop = app.tasks["bench.noop"]
    t0 = time.perf_counter()
    for i in range(n):
        noop.delay(i)
    delay_seconds = time.perf_counter() - t0
    app.close()

    env = dict(os.environ)
    env.update(
        BENCH_BROKER_URL=url,
        BENCH_PREFETCH_MULTIPLIER=str(prefetch_multiplier),
        BENCH_DONE_FILE=str(done_file),
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
    )
    log_path = cdir / "worker.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
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
        "2",
        "-l",
        "WARNING",
        "-Q",
        "bench_celery",
        "-n",
        f"bench-{transport}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    started = time.time()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + timeout + 30  # + worker start-up
        count = 0
        while True:
            count, _ = _count_lines(done_file)
            if count >= n:
                break
            if proc.poll() is not None:
                raise RuntimeError(
                    f"celery worker exited ({proc.returncode}) after {count} of {n} tasks; "
                    f"log tail: {log_path.read_text(errors='replace')[-800:]}"
                )
            if time.monotonic() > deadline:
                raise BenchTimeout(f"{count} of {n} tasks done in {timeout:.0f}s")
            time.sleep(0.05)
        _, (first, last) = _count_lines(done_file)
    finally:
        _stop_process(proc, grace=15)
        log.close()
    steady = (n - 1) / (last - first) if last > first else float("nan")
    celery = Result("", "celery", n, last - first, steady)
    celery.extra["celery_wall_seconds"] = last - started
    celery.extra["celery_wall_rate"] = n / (last - started)
    delay = Result("", "celery_delay", n, delay_seconds, n / delay_seconds)
    return [celery, delay]


# -- driver --------------------------------------------------------------------------------


def run_all(args: argparse.Namespace, workdir: Path, redis_url: str | None) -> list[Result]:
    results: list[Result] = []
    simple: dict[str, Callable[[str, int, int, float], Result]] = {
        "publish": run_publish,
        "consume_ack": run_consume,
        "e2e_4c": run_e2e,
    }
    for scenario in ("publish", "consume_ack", "e2e_4c", "celery"):
        if scenario not in args.scenarios:
            continue
        for transport in args.transports:
            n = args.messages
            label = f"[{scenario:<11} {transport:<8}]"
            if transport == "memory" and scenario in MULTIPROCESS:
                results.append(Result(transport, scenario, n, note="n/a"))
                if scenario == "celery":
                    results.append(Result(transport, "celery_delay", n, note="n/a"))
                continue
            url = broker_url(transport, workdir, scenario, redis_url)
            if url is None:
                results.append(Result(transport, scenario, n, note="skipped"))
                continue
            print(f"{label} running (N={n}) ...", end=" ", flush=True)
            try:
                if scenario == "celery":
                    got = run_celery(
                        url, n, args.prefetch_multiplier, args.timeout, workdir, transport
                    )
                else:
                    got = [simple[scenario](url, n, args.prefetch, args.timeout)]
            except Exception as exc:  # report and go on with the next cell
                print(f"FAILED: {type(exc).__name__}: {exc}", flush=True)
                results.append(Result(transport, scenario, n, note=type(exc).__name__))
                if scenario == "celery":
                    results.append(Result(transport, "celery_delay", n, note="failed"))
                continue
            for r in got:
                r.transport = transport
                results.append(r)
            print(f"{got[0].rate:,.0f} msg/s ({got[0].seconds:.2f}s)", flush=True)
    return results


def _cell(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.rate is None:
        return r.note or "-"
    return f"{r.rate:,.0f}"


def _ratio(a: Result | None, b: Result | None) -> str:
    if a is None or b is None or not a.rate or not b.rate:
        return "n/a"
    return f"{a.rate / b.rate:.2f}x"


def print_table(results: list[Result], transports: list[str]) -> None:
    by = {(r.scenario, r.transport): r for r in results}
    headers = ["scenario (msgs/s)", *transports, "q/redis", "q/sqla", "q/memory"]
    rows: list[list[str]] = []
    for scenario in SCENARIOS:
        if not any(s == scenario for s, _ in by):
            continue
        ours = by.get((scenario, "sqlqueue"))
        rows.append(
            [
                SCENARIO_LABELS[scenario],
                *(_cell(by.get((scenario, t))) for t in transports),
                _ratio(ours, by.get((scenario, "redis"))),
                _ratio(ours, by.get((scenario, "sqla"))),
                _ratio(ours, by.get((scenario, "memory"))),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print()
    print(fmt.format(*headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt.format(*row))


TARGETS = (
    ("publish", "redis", 3.0),
    ("publish", "sqla", 10.0),
    ("consume_ack", "redis", 3.0),
    ("consume_ack", "sqla", 10.0),
    ("e2e_4c", "redis", 1.5),
    ("celery", "redis", 1.0),
)


def print_targets(results: list[Result]) -> list[dict[str, Any]]:
    by = {(r.scenario, r.transport): r for r in results}
    out: list[dict[str, Any]] = []
    print("\ntargets (sqlqueue / other, same run):")
    for scenario, other, want in TARGETS:
        a, b = by.get((scenario, "sqlqueue")), by.get((scenario, other))
        if a is None or b is None or not a.rate or not b.rate:
            continue
        got = a.rate / b.rate
        met = got >= want
        out.append({"scenario": scenario, "vs": other, "target": want, "ratio": got, "met": met})
        print(
            f"  {scenario:<12} vs {other:<6} >= {want:>4.1f}x : {got:6.2f}x  "
            f"{'MET' if met else 'not met'}"
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", "-n", type=int, default=4000, help="messages per scenario")
    p.add_argument("--prefetch", type=int, default=32, help="Consumer prefetch_count (2, 3)")
    p.add_argument(
        "--prefetch-multiplier",
        type=int,
        default=8,
        help="Celery worker_prefetch_multiplier (4), same for every transport",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="bound on each wait, seconds")
    p.add_argument("--transports", nargs="+", default=list(TRANSPORTS), choices=TRANSPORTS)
    p.add_argument(
        "--scenarios",
        nargs="+",
        default=["publish", "consume_ack", "e2e_4c", "celery"],
        choices=["publish", "consume_ack", "e2e_4c", "celery"],
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (for debugging)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="sqlqueue-bench-"))
    started = time.perf_counter()
    try:
        with redis_server(workdir) as redis_url:
            results = run_all(args, workdir, redis_url)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    import celery
    import kombu
    import sqlalchemy

    print(
        f"\nN={args.messages}  prefetch_count={args.prefetch}  "
        f"celery prefetch_multiplier={args.prefetch_multiplier}  "
        f"python {sys.version.split()[0]}  kombu {kombu.__version__}  "
        f"celery {celery.__version__}  sqlalchemy {sqlalchemy.__version__}  "
        f"cpus {os.cpu_count()}  code {code_version()}  "
        f"total {time.perf_counter() - started:.0f}s"
    )
    print_table(results, args.transports)
    targets = print_targets(results)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "messages": args.messages,
                    "code": code_version(),
                    "prefetch": args.prefetch,
                    "prefetch_multiplier": args.prefetch_multiplier,
                    "results": [asdict(r) for r in results],
                    "targets": targets,
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
