"""Our transport side by side with peer job queues: same workload, same run, ratios.

Usage::

    python bench/bench_peers.py [--jobs 3000] [--workers 4] [--rounds 3] [--json out.json]
    python bench/bench_peers.py --systems sqlqueue huey --phases e2e --rounds 5

Systems (SQLite for now; each is one :class:`System` in ``SYSTEMS``, so PostgreSQL peers —
procrastinate, pgqueuer, Kombu's ``pgmq://`` — are more entries with the same methods):

* ``sqlqueue`` — this transport at the Kombu level:
  ``Connection("sqlqueue+sqlite:///…/q.db", transport_options={"sqlite_synchronous":
  "FULL"})`` (WAL is the transport's own). The producer calls ``Producer.publish`` once per
  job (persistent, one committed transaction each); each worker is a process with a
  ``kombu.Consumer`` (``prefetch_count``, ``--prefetch``, 32 as bench_transports'
  consume_ack) that runs the job and acks it. Workers call ``drain_events(timeout=2.0)``,
  as Celery's loop does for this transport, so an idle worker waits as the transport
  makes it (a shorter timeout would cap its back-off and flatter it). Every other
  transport option is at its default: what is measured is the code in the checkout
  (``code`` says which commit, ``+dirty`` if kombu_sqlqueue/ has uncommitted edits).
* ``huey`` — ``SqliteHuey(filename=…/huey.db, journal_mode="wal", fsync=True)`` (``fsync``
  is huey's switch for ``PRAGMA synchronous=FULL``), a no-op task, one enqueue per job
  (one ``BEGIN EXCLUSIVE`` transaction each); the workers are huey's own consumer with
  ``workers=W, worker_type="process"`` and every other setting at its default, as
  ``huey_consumer app.huey -w W -k process -q`` runs it (``-q``: huey logs two INFO lines
  per task by default; no system logs per job here). Huey's consumer forks W worker
  processes and a scheduler process (every 1 s). An idle huey worker sleeps 0.1 s after
  an empty poll, times 1.15 per further empty poll, up to 10 s.
  Huey deletes a task from its table when a worker takes it (a crash while it runs loses
  it); ours acks after the job ran. That is a guarantee, not part of what is measured.

Phases (``--jobs N`` per phase, ``--workers W``), each on a fresh database:

1. ``enqueue`` — one producer process enqueues N jobs, one transaction each, no workers
   running. Rate = N / (last enqueue returned − first enqueue started).
2. ``drain`` — the N jobs from phase 1 are waiting; W workers start, each reports ready
   (connected, consuming — huey's from its ``on_startup`` hook, ours after entering the
   ``Consumer``) and waits; when all W are ready they are released together. Rate = N /
   (last job run − release), so process start-up is excluded for both (``wall_seconds``
   in the JSON includes it).
3. ``e2e`` — W workers running and idle (released, then ``--idle`` seconds, default 1,
   of empty polls: each system's own idle back-off applies), one producer process
   enqueues N jobs. Rate = N / (last job run − first enqueue). ``first_job_latency`` in
   the JSON (first job run − first enqueue) shows what each idle wait costs (huey's,
   after 1 s idle, is ~0.25 s between polls).

``--rounds R`` rounds; within a round the phases run in order and the systems alternate
phase by phase (the order flips each round). Per phase: each round's rate, the median,
and the ratio of our median to each peer's.

Exactly once: every job carries its id (0..N−1). The job body appends one fixed-width
line (id, time) to a file of its own process (one ``write`` syscall, no fsync; the same
function for every system). After each phase the workers are stopped and the files read:
every id must have run exactly once and nothing may be left waiting, else the run fails
(exit 1). The enqueue phase checks that N jobs are waiting. A job's "run" time is that
line's: for ours the ack follows it, for huey the delete of the task's revoke key does.

Every wait is bounded (``--timeout``; a run that exceeds it fails with what was done);
every process and the temp dir are removed on exit, error or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.context import ForkContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, ClassVar

import kombu
from bench_common import code_version, raise_on_sigterm

HERE = Path(__file__).resolve().parent
PHASES = ("enqueue", "drain", "e2e")
OURS = "sqlqueue"
QUEUE = "bench_peers"
PAYLOAD = "x" * 64
START_TIMEOUT = 60.0  # seconds for processes to connect and report ready
STOP_GRACE = 10.0  # seconds for processes to stop before they are killed

# Kombu's classes are not annotated: call them through Any (mypy --strict).
KOMBU: Any = kombu

#: One line per job run: "<id:9> <time.time():17>\n", fixed width so a file's size
#: counts its lines.
RECORD_WIDTH = 28
_record_fd: tuple[int, str, int] | None = None  # (pid, done_dir, fd) of this process


class BenchError(Exception):
    """The run cannot go on (a process died, a wait ran out, a job ran twice)."""


def body(i: int) -> dict[str, Any]:
    """A job's argument: a ~100-byte JSON object carrying its id."""
    return {"i": i, "kind": "bench", "payload": PAYLOAD}


def record(done_dir: str, job: int) -> None:
    """The job body: append (id, time) to this process's record file."""
    global _record_fd
    pid = os.getpid()
    if _record_fd is None or _record_fd[:2] != (pid, done_dir):
        path = os.path.join(done_dir, f"{pid}.rec")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _record_fd = (pid, done_dir, fd)
    os.write(_record_fd[2], b"%09d %017.6f\n" % (job, time.time()))


def progress(done_dir: Path) -> int:
    """Jobs recorded so far (from the record files' sizes)."""
    total = 0
    with os.scandir(done_dir) as it:
        for entry in it:
            with contextlib.suppress(FileNotFoundError):
                total += entry.stat().st_size
    return total // RECORD_WIDTH


@dataclass
class Runs:
    """What the record files say: first and last run times, and jobs per process."""

    first: float
    last: float
    per_process: list[int]


def check_exactly_once(done_dir: Path, n: int, what: str) -> Runs:
    """Raise unless every id in 0..n-1 ran exactly once (and nothing else ran)."""
    seen: Counter[int] = Counter()
    first, last = float("inf"), 0.0
    per_process: list[int] = []
    for path in sorted(done_dir.glob("*.rec")):
        data = path.read_bytes()
        if len(data) % RECORD_WIDTH:
            raise BenchError(f"{what}: torn record file {path.name} ({len(data)} bytes)")
        lines = data.splitlines()
        per_process.append(len(lines))
        for line in lines:
            job, stamp = line.split()
            seen[int(job)] += 1
            first, last = min(first, float(stamp)), max(last, float(stamp))
    missing = [i for i in range(n) if seen[i] == 0]
    twice = sorted(i for i, c in seen.items() if c > 1)
    stray = sorted(i for i in seen if not 0 <= i < n)
    if missing or twice or stray:
        raise BenchError(
            f"{what}: exactly-once check FAILED: {len(missing)} ids never ran "
            f"{missing[:10]}, {len(twice)} ran more than once {twice[:10]}, "
            f"{len(stray)} unknown ids {stray[:10]}"
        )
    return Runs(first, last, sorted(per_process, reverse=True))


# -- process bookkeeping ------------------------------------------------------------------


@dataclass
class Gate:
    """Start-up barrier: each process releases ``ready`` once set up, then waits for ``go``."""

    ready: Any
    go: Any
    stop: Any

    @classmethod
    def make(cls, ctx: ForkContext) -> Gate:
        return cls(ctx.Semaphore(0), ctx.Event(), ctx.Event())

    def wait_ready(self, count: int, procs: list[BaseProcess], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        for got in range(count):
            while not self.ready.acquire(timeout=0.1):
                check_alive(procs, what)
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"{what}: {got} of {count} processes ready within {START_TIMEOUT:.0f} s"
                    )


@dataclass
class Stamps:
    """A producer's first-enqueue and last-enqueue times (time.time())."""

    started: Any
    finished: Any

    @classmethod
    def make(cls, ctx: ForkContext) -> Stamps:
        return cls(ctx.Value("d", 0.0, lock=False), ctx.Value("d", 0.0, lock=False))


def check_alive(procs: list[BaseProcess], what: str) -> None:
    """Raise if a worker died or a producer failed."""
    for p in procs:
        if p.exitcode is None or (p.exitcode == 0 and p.name.startswith("producer")):
            continue  # running, or a producer that is done
        raise BenchError(f"{what}: process {p.name} (pid {p.pid}) exited with {p.exitcode}")


#: Every process this run started (the harness's own copy; children get one by fork).
LIVE: list[BaseProcess] = []
#: Process groups started with setsid (huey's consumer and the workers it forks).
GROUPS: set[int] = set()


def start(ctx: ForkContext, name: str, target: Any, *args: Any) -> BaseProcess:
    p = ctx.Process(target=target, args=args, name=name, daemon=False)
    p.start()
    LIVE.append(p)
    return p


def stop_processes(procs: list[BaseProcess], grace: float = STOP_GRACE) -> None:
    """Join for up to ``grace`` seconds, then SIGTERM, then SIGKILL whatever is left of
    ``procs`` (and of the process groups they lead)."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive() and p.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    for p in procs:
        if p.pid in GROUPS:  # what the group leader forked, should it have left any
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            GROUPS.discard(p.pid)
        if p in LIVE:
            LIVE.remove(p)


# -- the systems ----------------------------------------------------------------------------


class System:
    """A job queue under test: how to set it up, enqueue, count, and run W workers.

    The phases (``run_enqueue``, ``run_drain``, ``run_e2e``) are written once over these
    methods, so every system gets the same workload, timing and checks. ``produce`` and
    the worker targets run in forked processes.
    """

    name: ClassVar[str]

    def versions(self) -> dict[str, str]:
        raise NotImplementedError

    def prepare(self, cell_dir: Path) -> str:
        """A fresh, empty queue under ``cell_dir`` (tables created); returns its locator."""
        raise NotImplementedError

    def produce(self, where: str, n: int, gate: Gate, stamps: Stamps) -> None:
        """Connect, report ready, wait for go, then enqueue jobs 0..n-1 one by one."""
        raise NotImplementedError

    def pending(self, where: str) -> int:
        """Jobs waiting in the queue."""
        raise NotImplementedError

    def start_workers(
        self, ctx: ForkContext, where: str, workers: int, done_dir: Path, gate: Gate
    ) -> list[BaseProcess]:
        """Start W workers that report ready, wait for go, and record every job they run."""
        raise NotImplementedError

    def stop_workers(self, procs: list[BaseProcess], gate: Gate) -> None:
        gate.stop.set()
        stop_processes(procs)


def _entities() -> tuple[Any, Any]:
    exchange = KOMBU.Exchange(QUEUE, type="direct", durable=True)
    return exchange, KOMBU.Queue(QUEUE, exchange=exchange, routing_key=QUEUE, durable=True)


class SqlQueue(System):
    """This transport, through Kombu's public API."""

    name = "sqlqueue"
    options: ClassVar[dict[str, Any]] = {"sqlite_synchronous": "FULL"}

    def __init__(self, prefetch: int = 32) -> None:
        self.prefetch = prefetch

    def versions(self) -> dict[str, str]:
        from kombu_sqlqueue import _version

        return {"kombu": str(kombu.__version__), "kombu_sqlqueue": _version.__version__}

    def prepare(self, cell_dir: Path) -> str:
        url = f"sqlqueue+sqlite:///{cell_dir / 'q.db'}"
        with KOMBU.Connection(url, transport_options=self.options) as conn:
            channel = conn.channel()
            _entities()[1].bind(channel).declare()
            channel.close()
        return url

    def produce(self, where: str, n: int, gate: Gate, stamps: Stamps) -> None:
        exchange, queue = _entities()
        with KOMBU.Connection(where, transport_options=self.options) as conn:
            channel = conn.channel()
            producer = KOMBU.Producer(channel, exchange=exchange, serializer="json")
            queue.bind(channel).declare()  # virtual transports route by this process's bindings
            publish = producer.publish
            gate.ready.release()
            if not gate.go.wait(START_TIMEOUT * 2):
                return
            stamps.started.value = time.time()
            for i in range(n):
                publish(body(i), routing_key=QUEUE, delivery_mode=2)
            stamps.finished.value = time.time()
            channel.close()

    def pending(self, where: str) -> int:
        with KOMBU.Connection(where, transport_options=self.options) as conn:
            channel = conn.channel()
            ok = channel.queue_declare(queue=QUEUE, passive=True)
            channel.close()
            return int(ok.message_count)

    def start_workers(
        self, ctx: ForkContext, where: str, workers: int, done_dir: Path, gate: Gate
    ) -> list[BaseProcess]:
        return [
            start(ctx, f"worker-{self.name}-{k}", self._worker, where, str(done_dir), gate)
            for k in range(workers)
        ]

    def _worker(self, where: str, done_dir: str, gate: Gate) -> None:
        _, queue = _entities()
        with KOMBU.Connection(where, transport_options=self.options) as conn:
            conn.connect()
            channel = conn.channel()

            def on_message(payload: Any, message: Any) -> None:
                record(done_dir, int(payload["i"]))  # the job
                message.ack()

            consumer = KOMBU.Consumer(
                channel,
                queues=[queue],
                callbacks=[on_message],
                accept=["json"],
                prefetch_count=self.prefetch,
            )
            with consumer:
                gate.ready.release()
                if not gate.go.wait(START_TIMEOUT * 2):
                    return
                while not gate.stop.is_set():
                    # Celery's loop for this transport calls drain_events(timeout=2.0).
                    with contextlib.suppress(socket.timeout, TimeoutError):
                        conn.drain_events(timeout=2.0)
            with contextlib.suppress(Exception):
                channel.close()


def _huey() -> Any:
    """huey, imported when used (it ships no type information: Any)."""
    return importlib.import_module("huey")


class HueySqlite(System):
    """huey's SqliteHuey, and huey's own consumer with process workers."""

    name = "huey"

    def versions(self) -> dict[str, str]:
        return {"huey": str(_huey().__version__)}

    @staticmethod
    def make(where: str, done_dir: str | None = None, gate: Gate | None = None) -> tuple[Any, Any]:
        """The huey instance and its no-op task; with ``gate``, workers wait on it to start."""
        app = _huey().SqliteHuey(name="bench", filename=where, journal_mode="wal", fsync=True)

        def bench_noop(job: dict[str, Any]) -> None:
            if done_dir is not None:
                record(done_dir, int(job["i"]))

        task = app.task()(bench_noop)
        if gate is not None:

            def ready_and_wait() -> None:  # runs in each worker process before its loop
                gate.ready.release()
                gate.go.wait(START_TIMEOUT * 2)

            app.on_startup()(ready_and_wait)
        return app, task

    def prepare(self, cell_dir: Path) -> str:
        where = str(cell_dir / "huey.db")
        app, _ = self.make(where)  # creates the tables
        app.storage.close()
        return where

    def produce(self, where: str, n: int, gate: Gate, stamps: Stamps) -> None:
        app, task = self.make(where)
        gate.ready.release()
        if not gate.go.wait(START_TIMEOUT * 2):
            return
        stamps.started.value = time.time()
        for i in range(n):
            task(body(i))
        stamps.finished.value = time.time()
        app.storage.close()

    def pending(self, where: str) -> int:
        app, _ = self.make(where)
        try:
            return int(app.pending_count())
        finally:
            app.storage.close()

    def start_workers(
        self, ctx: ForkContext, where: str, workers: int, done_dir: Path, gate: Gate
    ) -> list[BaseProcess]:
        host = start(
            ctx, f"worker-{self.name}-consumer", self._consumer, where, workers, done_dir, gate
        )
        if host.pid is not None:
            GROUPS.add(host.pid)
        return [host]

    @classmethod
    def _consumer(cls, where: str, workers: int, done_dir: Path, gate: Gate) -> None:
        os.setsid()  # its own group: the harness can remove the workers it forks, whatever
        logging.getLogger("huey").setLevel(logging.WARNING)  # huey_consumer -q
        app, _ = cls.make(where, str(done_dir), gate)
        app.create_consumer(workers=workers, worker_type="process").run()

    def stop_workers(self, procs: list[BaseProcess], gate: Gate) -> None:
        gate.stop.set()
        for p in procs:  # SIGINT: huey's graceful stop (Ctrl-C)
            if p.is_alive() and p.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGINT)
        stop_processes(procs)


SYSTEMS: dict[str, type[System]] = {SqlQueue.name: SqlQueue, HueySqlite.name: HueySqlite}


# -- the phases -----------------------------------------------------------------------------


@dataclass
class Cell:
    system: str
    phase: str
    round: int
    jobs: int
    workers: int
    seconds: float = float("nan")
    rate: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)


def _produce(
    ctx: ForkContext, system: System, where: str, n: int, what: str
) -> tuple[BaseProcess, Gate, Stamps]:
    """Start a producer process and wait until it is ready (not yet released)."""
    gate, stamps = Gate.make(ctx), Stamps.make(ctx)
    proc = start(ctx, f"producer-{system.name}", system.produce, where, n, gate, stamps)
    gate.wait_ready(1, [proc], what)
    return proc, gate, stamps


def _join_producer(proc: BaseProcess, timeout: float, what: str) -> None:
    proc.join(timeout=timeout)
    if proc.is_alive():
        raise BenchError(f"{what}: the producer did not finish within {timeout:.0f} s")
    if proc.exitcode != 0:
        raise BenchError(f"{what}: the producer exited with {proc.exitcode}")
    stop_processes([proc])


def _wait_runs(done_dir: Path, n: int, procs: list[BaseProcess], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while (got := progress(done_dir)) < n:
        check_alive(procs, what)
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: {got} of {n} jobs ran within {timeout:.0f} s")
        time.sleep(0.02)


def check_empty(system: System, where: str, what: str) -> None:
    """After the workers stopped, nothing may be left waiting."""
    waiting = system.pending(where)
    if waiting:
        raise BenchError(f"{what}: {waiting} jobs still waiting after every id ran")


def run_enqueue(ctx: ForkContext, system: System, where: str, cell: Cell, timeout: float) -> None:
    what = f"{system.name} enqueue"
    proc, gate, stamps = _produce(ctx, system, where, cell.jobs, what)
    gate.go.set()
    _join_producer(proc, timeout, what)
    cell.seconds = stamps.finished.value - stamps.started.value
    cell.rate = cell.jobs / cell.seconds
    waiting = system.pending(where)
    if waiting != cell.jobs:
        raise BenchError(f"{what}: {waiting} jobs waiting after {cell.jobs} enqueues")


def run_drain(
    ctx: ForkContext, system: System, where: str, cell: Cell, done_dir: Path, timeout: float
) -> None:
    """Drain the ``cell.jobs`` jobs waiting in ``where``."""
    what = f"{system.name} drain"
    gate = Gate.make(ctx)
    spawned = time.time()
    procs = system.start_workers(ctx, where, cell.workers, done_dir, gate)
    try:
        gate.wait_ready(cell.workers, procs, what)
        released = time.time()
        gate.go.set()
        _wait_runs(done_dir, cell.jobs, procs, timeout, what)
    finally:
        system.stop_workers(procs, gate)
    runs = check_exactly_once(done_dir, cell.jobs, what)
    check_empty(system, where, what)
    cell.seconds = runs.last - released
    cell.rate = cell.jobs / cell.seconds
    cell.extra.update(
        wall_seconds=runs.last - spawned,
        ready_seconds=released - spawned,
        first_job_latency=runs.first - released,
        jobs_per_process=runs.per_process,
    )


def run_e2e(
    ctx: ForkContext,
    system: System,
    where: str,
    cell: Cell,
    done_dir: Path,
    timeout: float,
    idle: float,
) -> None:
    what = f"{system.name} e2e"
    gate = Gate.make(ctx)
    procs = system.start_workers(ctx, where, cell.workers, done_dir, gate)
    producer: BaseProcess | None = None
    try:
        gate.wait_ready(cell.workers, procs, what)
        gate.go.set()
        producer, pgate, stamps = _produce(ctx, system, where, cell.jobs, what)
        time.sleep(idle)  # the workers poll an empty queue meanwhile
        pgate.go.set()
        _wait_runs(done_dir, cell.jobs, [*procs, producer], timeout, what)
        _join_producer(producer, timeout, what)
    finally:
        system.stop_workers(procs, gate)
        if producer is not None:  # finished, or waiting for a go that will not come
            stop_processes([producer], grace=0)
    runs = check_exactly_once(done_dir, cell.jobs, what)
    check_empty(system, where, what)
    cell.seconds = runs.last - stamps.started.value
    cell.rate = cell.jobs / cell.seconds
    cell.extra.update(
        publish_seconds=stamps.finished.value - stamps.started.value,
        first_job_latency=runs.first - stamps.started.value,  # the idle back-off shows here
        jobs_per_process=runs.per_process,
    )


# -- the driver -----------------------------------------------------------------------------


def run_rounds(args: argparse.Namespace, workdir: Path) -> list[Cell]:
    ctx = mp.get_context("fork")  # kombu and the drivers already imported: fast starts
    systems: list[System] = [
        SqlQueue(args.prefetch) if name == OURS else SYSTEMS[name]() for name in args.systems
    ]
    cells: list[Cell] = []
    for rnd in range(1, args.rounds + 1):
        order = systems if rnd % 2 else systems[::-1]
        print(f"round {rnd} (load {os.getloadavg()[0]:.2f})", flush=True)
        wheres: dict[str, str] = {}  # the enqueue phase's queue is the drain phase's
        for phase in PHASES:
            if phase not in args.phases:
                continue
            for system in order:
                cell = Cell(system.name, phase, rnd, args.jobs, args.workers)
                cell_dir = workdir / f"r{rnd}-{system.name}-{phase}"
                cell_dir.mkdir()
                done_dir = cell_dir / "done"
                done_dir.mkdir()
                print(f"  {phase:<8} {system.name:<9} ...", end=" ", flush=True)
                cell.extra["load"] = os.getloadavg()[0]
                if phase == "enqueue":
                    wheres[system.name] = system.prepare(cell_dir)
                    run_enqueue(ctx, system, wheres[system.name], cell, args.timeout)
                elif phase == "drain":
                    where = wheres.pop(system.name, None)
                    if where is None:  # enqueue phase skipped: fill the queue, untimed
                        where = system.prepare(cell_dir)
                        run_enqueue(ctx, system, where, Cell("", "", 0, args.jobs, 0), args.timeout)
                    run_drain(ctx, system, where, cell, done_dir, args.timeout)
                else:
                    where = system.prepare(cell_dir)
                    run_e2e(ctx, system, where, cell, done_dir, args.timeout, args.idle)
                cells.append(cell)
                print(f"{cell.rate:8,.0f} jobs/s ({cell.seconds:.2f} s)", flush=True)
                if phase != "enqueue" and not args.keep:
                    # the drain phase's database is the enqueue phase's directory
                    shutil.rmtree(cell_dir, ignore_errors=True)
                    if phase == "drain":
                        shutil.rmtree(workdir / f"r{rnd}-{system.name}-enqueue", True)
    return cells


def summarize(cells: list[Cell], systems: list[str]) -> dict[str, Any]:
    """Per phase: each system's rates by round and median, and ours/peer ratios."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        rates = {s: [c.rate for c in cells if c.phase == phase and c.system == s] for s in systems}
        if not any(rates.values()):
            continue
        medians = {s: statistics.median(r) for s, r in rates.items() if r}
        entry: dict[str, Any] = {"rates": rates, "median": medians, "ratio": {}}
        if OURS in medians:
            for peer in medians:
                if peer == OURS:
                    continue
                per_round = [a / b for a, b in zip(rates[OURS], rates[peer], strict=True)]
                entry["ratio"][peer] = {
                    "of_medians": medians[OURS] / medians[peer],
                    "per_round": per_round,
                }
        out[phase] = entry
    return out


def print_summary(summary: dict[str, Any], rounds: int) -> None:
    headers = ["phase (jobs/s)", "system", *(f"round {r}" for r in range(1, rounds + 1))]
    headers.append("median")
    rows: list[list[str]] = []
    for phase, entry in summary.items():
        for system, rates in entry["rates"].items():
            rows.append(
                [phase, system, *(f"{r:,.0f}" for r in rates), f"{entry['median'][system]:,.0f}"]
            )
        for peer, ratio in entry["ratio"].items():
            rows.append(
                [
                    "",
                    f"{OURS}/{peer}",
                    *(f"{r:.2f}x" for r in ratio["per_round"]),
                    f"{ratio['of_medians']:.2f}x",
                ]
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print()
    print(fmt.format(*headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt.format(*row))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", "-n", type=int, default=3000, help="jobs per phase")
    p.add_argument("--workers", "-w", type=int, default=4, help="worker processes")
    p.add_argument("--rounds", "-r", type=int, default=3, help="interleaved rounds")
    p.add_argument("--prefetch", type=int, default=32, help="our Consumer's prefetch_count")
    p.add_argument(
        "--idle", type=float, default=1.0, help="seconds e2e workers idle before the first job"
    )
    p.add_argument("--timeout", type=float, default=120.0, help="bound on each wait, seconds")
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    p.add_argument("--json", type=Path, help="also write every number here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (for debugging)")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.workers < 1 or args.rounds < 1:
        p.error("--jobs, --workers and --rounds must be at least 1")
    return args


@contextlib.contextmanager
def workspace(keep: bool) -> Iterator[Path]:
    """A temp dir; on the way out (error, SIGTERM), every process started is stopped."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    try:
        yield workdir
    finally:
        stop_processes(list(LIVE), grace=2)  # left over by an error: no long waits
        for group in list(GROUPS):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        if keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    versions: dict[str, str] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "code": code_version(),
    }
    for name in args.systems:
        versions.update(SYSTEMS[name]().versions())
    machine = f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
    print(
        f"machine: {machine}\nversions: "
        + "  ".join(f"{k} {v}" for k, v in versions.items())
        + f"\nN={args.jobs} jobs/phase, W={args.workers} workers, prefetch {args.prefetch}, "
        f"{args.rounds} rounds, SQLite WAL + synchronous=FULL for all",
        flush=True,
    )
    started = time.perf_counter()
    try:
        with workspace(args.keep) as workdir:
            cells = run_rounds(args, workdir)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    summary = summarize(cells, args.systems)
    print_summary(summary, args.rounds)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "cores": os.cpu_count(),
                    "versions": versions,
                    "args": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                    "summary": summary,
                    "cells": [asdict(c) for c in cells],
                },
                indent=2,
            )
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
