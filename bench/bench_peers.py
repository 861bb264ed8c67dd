"""Our transport side by side with peer job queues: same workload, same run, ratios.

Usage::

    python bench/bench_peers.py [--jobs 3000] [--workers 4] [--rounds 3] [--json out.json]
    python bench/bench_peers.py --systems sqlqueue huey --phases e2e --rounds 5
    python bench/bench_peers.py --engine postgresql
    python bench/bench_peers.py --engine postgresql --systems sqlqueue-pg pgqueuer

``--engine sqlite`` (the default) or ``postgresql``; ``--systems`` defaults to every system
of the engine, and the ratios are ours (``sqlqueue`` / ``sqlqueue-pg``) to each peer's.
Each system is one :class:`System` in ``SYSTEMS``.

SQLite systems:

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

PostgreSQL (``--engine postgresql``): the run starts its own throwaway server with
``tests/servers.py`` (the tests' and bench_scale's: Debian's binaries, ``initdb
--no-sync`` — which only skips initdb's own flush —, 127.0.0.1, trust auth,
``max_connections=200``, ``shared_buffers=128MB``, all else PostgreSQL's defaults:
``fsync=on``, ``synchronous_commit=on``, ``wal_sync_method=fdatasync``,
``full_page_writes=on``; the run prints what the server reports) in a temp dir on the
machine's disk, and stops it at the end. Every cell gets a fresh database (``CREATE
DATABASE bench_r<R>_<system>_<phase>``, the drain phase reuses the enqueue phase's),
dropped after use. Every system commits each enqueue and each job's completion with
``synchronous_commit=on``; every table is logged (none UNLOGGED). Systems:

* ``sqlqueue-pg`` — this transport, the same producer and worker code as ``sqlqueue``
  (:class:`KombuSystem`) with
  ``Connection("sqlqueue+postgresql+psycopg://postgres@127.0.0.1:P/<db>")`` and every
  transport option at its default.
* ``pgqueuer`` — pgqueuer (its schema by ``Queries.install()``, what ``pgq install`` runs;
  durability ``durable``, its default: every table logged), through its asyncpg driver
  (``pgqueuer[asyncpg]``: the driver of its README, the one ``pgq`` tries first; its
  psycopg driver's LISTEN watcher holds the shared connection's lock until a NOTIFY or
  1 s, which stalled a drain ~1 s). The producer is one ``asyncpg`` connection and
  ``await Queries.enqueue("bench_record", payload)`` once per job (one INSERT, its own
  transaction; pgqueuer's trigger NOTIFYs). Each of the W worker processes runs
  ``pgqueuer.run(factory)`` — what ``pgq run module:factory`` runs: pgqueuer's supervisor,
  SIGINT/SIGTERM for a graceful stop, on pgq's own event loop (uvloop, installed with
  pgqueuer) — where the factory opens one asyncpg connection and yields a ``QueueManager``
  with one ``async`` entrypoint (pgqueuer takes no sync ones) that runs the job. A
  ``QueueManager``, not a ``PgQueuer``: the latter adds a ``SchedulerManager`` that polls
  the schedule table every second, for no schedule here. Every run option is pgq run's
  default: ``batch_size=10`` (a worker dequeues up to 10 jobs per query and runs them as
  concurrent asyncio tasks), ``dequeue_timeout=30 s`` (an idle worker wakes on NOTIFY),
  ``heartbeat_timeout=30 s``, no ``max_concurrent_tasks``. A job leaves the queue table
  (moved to ``pgqueuer_log``) when its worker's status buffer flushes: every 10 jobs or
  ~0.1 s.
* ``procrastinate`` — ``App(connector=PsycopgConnector(conninfo=…))``, its schema by
  ``app.schema_manager.apply_schema()``, one ``async`` task (procrastinate runs a sync one
  in a thread per job) that runs the job. The producer opens the app synchronously
  (procrastinate's sync psycopg pool) and calls ``task.defer(job=…)`` once per job (one
  committed ``procrastinate_defer_jobs_v1`` call each). The workers are W processes, each
  what ``procrastinate worker`` runs (``async with app.open_async():
  await app.run_worker_async()``) with every worker option at its default:
  ``concurrency=1``, ``listen_notify=True``, ``fetch_job_polling_interval=5 s``,
  ``delete_jobs="never"`` (a job's row stays, status ``succeeded``). W processes of one
  job at a time, not one process with ``concurrency=W``: so each of the W workers is a
  process that runs one job at a time, as the Kombu workers (prefetch aside) and huey's
  are, and the W of them use every core.
* ``pgmq-kombu`` — Kombu's own ``pgmq://`` transport, the same producer and worker code
  as ``sqlqueue-pg`` with ``Connection("pgmq://postgres@127.0.0.1:P/<db>",
  transport_options={"init_extension": False})``. PGMQ is installed SQL-only by the
  ``pgmq`` client's ``install_pgmq_from_sql()`` (its bundled pgmq.sql; this server has
  no pgmq extension, so the transport must not run ``CREATE EXTENSION`` on connect, its
  default: the one option set). Every other option is the transport's default: it reads
  at most 10 messages per poll (whatever the prefetch), with ``read_with_poll`` (PGMQ's
  server-side poll, every 100 ms, for up to the 2 s drain_events timeout), visibility
  timeout 1800 s; an ack deletes the message.

Phases (``--jobs N`` per phase, ``--workers W``), each on a fresh database:

1. ``enqueue`` — one producer process enqueues N jobs, one transaction each, no workers
   running. Rate = N / (last enqueue returned − first enqueue started).
2. ``drain`` — the N jobs from phase 1 are waiting; W workers start, each reports ready
   (connected, consuming — huey's from its ``on_startup`` hook, the Kombu ones after
   entering the ``Consumer``, pgqueuer's once its ``QueueManager.run`` has checked the
   schema — ``verify_structure``, wrapped —, procrastinate's once its ``Worker.run`` has
   registered the worker — ``job_manager.register_worker``, wrapped) and waits; when all
   W are ready they are released together. Rate = N / (last job run − release), so
   process start-up is excluded for all (``wall_seconds`` in the JSON includes it; what
   little start-up is left, LISTEN and the like, shows in ``first_job_latency``).
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
(exit 1). The enqueue phase checks that N jobs are waiting ("waiting": ours and
pgmq-kombu, the queue's message count; huey, ``pending_count()``; pgqueuer, every row of
its queue table by ``Queries.queue_size()``; procrastinate, every job whose status is not
``succeeded``). A job's "run" time is that line's: for the Kombu ones the ack follows it,
for huey the delete of the task's revoke key, for procrastinate the job's status update,
for pgqueuer the buffered move to its log table (see above).

What a job costs, per cell (medians per phase and system printed after the rates; every
cell's in the JSON): **client CPU** — user + system time of the cell's processes (the
producer, the workers and the processes they start and reap), from ``os.times()``'s
children fields around the cell, per job; on PostgreSQL also **server CPU** — every server
process's time from ``/proc`` (live ones, and the backends the postmaster reaped) —,
**statements** — ``pg_stat_statements`` calls in the cell's database, utility statements
(``BEGIN``, ``COMMIT``, ``LISTEN``) included; the extension is preloaded at the server's
start — and **commits** (``pg_stat_database.xact_commit``), per job. On SQLite the database
runs in the clients, so its work is in their CPU.

Every wait is bounded (``--timeout``; a run that exceeds it fails with what was done);
every process and the temp dir are removed on exit, error or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
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
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.context import ForkContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, ClassVar

import kombu
from bench_common import code_version, raise_on_sigterm

HERE = Path(__file__).resolve().parent
PHASES = ("enqueue", "drain", "e2e")
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


# -- PostgreSQL: one throwaway server per run, one database per cell --------------------------

#: The throwaway PostgreSQL server (tests/servers.py) when ``--engine postgresql``; forked
#: processes inherit it. Only the harness process stops it.
PG: Any = None


def start_postgresql() -> Any:
    """Start a throwaway server with ``tests/servers.py`` (as the tests and bench_scale do)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    try:
        servers = importlib.import_module("servers")
    finally:
        sys.path.remove(str(HERE.parent / "tests"))
    return servers.start_postgresql()


def pg_settings() -> dict[str, str]:
    """The server settings that decide what a commit costs (printed and in the JSON)."""
    import psycopg

    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes")
    with psycopg.connect(PG.url("postgres")) as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}


def count_statements() -> None:
    """Load pg_stat_statements (a restart: it must be preloaded) to count each cell's
    statements; it ships with Debian's server package."""
    import psycopg

    with psycopg.connect(PG.url("postgres"), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    PG.restart()
    with psycopg.connect(PG.url("postgres"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def database_name(cell_dir: Path) -> str:
    """The cell's database: ``r1-sqlqueue-pg-enqueue`` → ``bench_r1_sqlqueue_pg_enqueue``."""
    return "bench_" + "".join(c if c.isalnum() else "_" for c in cell_dir.name.lower())


def fresh_database(cell_dir: Path) -> str:
    """Create the cell's empty database; its libpq URL ``postgresql://postgres@127.0.0.1:P/D``."""
    return str(PG.create_database(database_name(cell_dir)))


def drop_database(cell_dir: Path) -> None:
    """Drop the cell's database, if any (its clients are gone; FORCE ends any left)."""
    import psycopg

    with psycopg.connect(PG.url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database_name(cell_dir)} WITH (FORCE)")


def count(where: str, sql: str) -> int:
    """One ``SELECT count(*) …`` on the database at ``where`` (a libpq URL)."""
    import psycopg

    with psycopg.connect(where) as conn:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0


# -- what a job costs: client and server CPU, statements and commits ------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (producers, workers, and what they
    reaped: huey's and pgqueuer's own worker processes)."""
    t = os.times()
    return t.children_user + t.children_system


def server_cpu() -> float:
    """CPU seconds the PostgreSQL server has used: its live processes (postmaster, the
    background writers, backends) and the backends that exited (the postmaster's reaped
    children). Read from /proc."""
    root = PG.proc.pid
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == root:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif ppid == root:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def statements_and_commits(database: str) -> tuple[int, int]:
    """Statements run in ``database`` (pg_stat_statements, utility statements included:
    BEGIN, COMMIT, LISTEN) and its committed transactions (pg_stat_database)."""
    import psycopg

    with psycopg.connect(PG.url("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s"
            "         WHERE s.dbid = d.datid),"
            "       d.xact_commit FROM pg_stat_database d WHERE d.datname = %s",
            (database,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


@dataclass
class Costs:
    """What a cell's jobs cost, read before and after it (see :func:`measured`)."""

    client_cpu: float
    server_cpu: float = 0.0
    statements: int = 0
    commits: int = 0


def read_costs(system: System, where: str) -> Costs:
    if system.engine != "postgresql":
        return Costs(children_cpu())  # SQLite: the database is the clients' own CPU
    statements, commits = statements_and_commits(where.rsplit("/", 1)[1])
    return Costs(children_cpu(), server_cpu(), statements, commits)


@contextlib.contextmanager
def measured(system: System, where: str, cell: Cell) -> Iterator[None]:
    """Per job of ``cell``: client CPU (µs), and on PostgreSQL server CPU (µs), statements
    and commits, into ``cell.extra``. Backends flush their statistics when they exit, as
    every process of the cell has when this reads them again."""
    before = read_costs(system, where)
    yield
    after = read_costs(system, where)
    n = cell.jobs
    cell.extra["client_cpu_us"] = (after.client_cpu - before.client_cpu) / n * 1e6
    if system.engine == "postgresql":
        cell.extra["server_cpu_us"] = (after.server_cpu - before.server_cpu) / n * 1e6
        # Less this harness's own reading of them (one statement pair, one commit, each).
        cell.extra["statements"] = (after.statements - before.statements - 2) / n
        cell.extra["commits"] = (after.commits - before.commits - 1) / n


# -- the systems ----------------------------------------------------------------------------


class System:
    """A job queue under test: how to set it up, enqueue, count, and run W workers.

    The phases (``run_enqueue``, ``run_drain``, ``run_e2e``) are written once over these
    methods, so every system gets the same workload, timing and checks. ``produce`` and
    the worker targets run in forked processes.
    """

    name: ClassVar[str]
    engine: ClassVar[str]  # "sqlite" or "postgresql"

    def versions(self) -> dict[str, str]:
        raise NotImplementedError

    def prepare(self, cell_dir: Path) -> str:
        """A fresh, empty queue for ``cell_dir`` (tables created); returns its locator."""
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


def interrupt_and_stop(procs: list[BaseProcess], gate: Gate) -> None:
    """SIGINT (a system's own graceful stop, Ctrl-C), then ``stop_processes``."""
    gate.stop.set()
    for p in procs:
        if p.is_alive() and p.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGINT)
    stop_processes(procs)


def _entities() -> tuple[Any, Any]:
    exchange = KOMBU.Exchange(QUEUE, type="direct", durable=True)
    return exchange, KOMBU.Queue(QUEUE, exchange=exchange, routing_key=QUEUE, durable=True)


class KombuSystem(System):
    """A Kombu transport through Kombu's public API: the subclasses differ only in the URL
    (``url``) and the transport options."""

    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, prefetch: int = 32) -> None:
        self.prefetch = prefetch

    def url(self, cell_dir: Path) -> str:
        """The Kombu URL of a fresh, empty store for ``cell_dir``."""
        raise NotImplementedError

    def prepare(self, cell_dir: Path) -> str:
        url = self.url(cell_dir)
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
                    # Celery's loop for these transports calls drain_events(timeout=2.0).
                    with contextlib.suppress(socket.timeout, TimeoutError):
                        conn.drain_events(timeout=2.0)
            with contextlib.suppress(Exception):
                channel.close()


class SqlQueue(KombuSystem):
    """This transport on SQLite."""

    name = "sqlqueue"
    engine = "sqlite"
    options: ClassVar[dict[str, Any]] = {"sqlite_synchronous": "FULL"}

    def versions(self) -> dict[str, str]:
        from kombu_sqlqueue import _version

        return {"kombu": str(kombu.__version__), "kombu_sqlqueue": _version.__version__}

    def url(self, cell_dir: Path) -> str:
        return f"sqlqueue+sqlite:///{cell_dir / 'q.db'}"


class SqlQueuePg(SqlQueue):
    """This transport on PostgreSQL (psycopg 3), every transport option at its default."""

    name = "sqlqueue-pg"
    engine = "postgresql"
    options: ClassVar[dict[str, Any]] = {}

    def url(self, cell_dir: Path) -> str:
        libpq = fresh_database(cell_dir)  # postgresql://…
        return "sqlqueue+postgresql+psycopg://" + libpq.removeprefix("postgresql://")


class PgmqKombu(KombuSystem):
    """Kombu's own ``pgmq://`` transport over PGMQ installed as plain SQL."""

    name = "pgmq-kombu"
    engine = "postgresql"
    # The schema is installed SQL-only (no extension on this server): the transport must not
    # run CREATE EXTENSION pgmq on connect, its default.
    options: ClassVar[dict[str, Any]] = {"init_extension": False}

    def versions(self) -> dict[str, str]:
        install = importlib.import_module("pgmq.install")
        return {
            "kombu": str(kombu.__version__),
            "pgmq-py": importlib.metadata.version("pgmq"),
            "pgmq-sql": str(install.get_embedded_sql_version()),
        }

    def url(self, cell_dir: Path) -> str:
        libpq = fresh_database(cell_dir)
        importlib.import_module("pgmq.install").install_pgmq_from_sql(dsn=libpq)
        return "pgmq://" + libpq.removeprefix("postgresql://")


def _huey() -> Any:
    """huey, imported when used (it ships no type information: Any)."""
    return importlib.import_module("huey")


class HueySqlite(System):
    """huey's SqliteHuey, and huey's own consumer with process workers."""

    name = "huey"
    engine = "sqlite"

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
        interrupt_and_stop(procs, gate)  # SIGINT: huey's graceful stop (Ctrl-C)


def _pgqueuer() -> Any:
    """pgqueuer, imported when used (through Any, as huey)."""
    return importlib.import_module("pgqueuer")


class PgQueuer(System):
    """pgqueuer: ``Queries.enqueue`` per job, W processes each running ``pgq run``'s loop."""

    name = "pgqueuer"
    engine = "postgresql"
    ENTRYPOINT = "bench_record"

    def versions(self) -> dict[str, str]:
        asyncpg = importlib.import_module("asyncpg")
        return {"pgqueuer": str(_pgqueuer().__version__), "asyncpg": str(asyncpg.__version__)}

    @staticmethod
    @contextlib.asynccontextmanager
    async def _queries(where: str) -> AsyncIterator[Any]:
        """pgqueuer's ``Queries`` over one asyncpg connection: the driver of its README and
        the one ``pgq`` tries first. (Its psycopg driver shares the connection with its
        LISTEN watcher, which holds the connection's lock until a NOTIFY comes or 1 s
        passes: with no enqueue to NOTIFY, a drain stalled ~1 s.)"""
        conn = await importlib.import_module("asyncpg").connect(where)
        try:
            yield _pgqueuer().Queries.from_asyncpg_connection(conn)
        finally:
            await conn.close()

    def prepare(self, cell_dir: Path) -> str:
        where = fresh_database(cell_dir)

        async def install() -> None:  # what `pgq install` runs (durability "durable": logged)
            async with self._queries(where) as queries:
                await queries.install()

        asyncio.run(install())
        return where

    def produce(self, where: str, n: int, gate: Gate, stamps: Stamps) -> None:
        async def enqueue_all() -> None:
            async with self._queries(where) as queries:
                enqueue = queries.enqueue
                gate.ready.release()
                if not gate.go.wait(START_TIMEOUT * 2):  # nothing else runs on this loop
                    return
                stamps.started.value = time.time()
                for i in range(n):
                    await enqueue(self.ENTRYPOINT, json.dumps(body(i)).encode())
                stamps.finished.value = time.time()

        asyncio.run(enqueue_all())

    def pending(self, where: str) -> int:
        async def size() -> int:  # every row of its queue table: queued or picked
            async with self._queries(where) as queries:
                stats = await queries.queue_size()
                return sum(int(s.count) for s in stats)

        return asyncio.run(size())

    def start_workers(
        self, ctx: ForkContext, where: str, workers: int, done_dir: Path, gate: Gate
    ) -> list[BaseProcess]:
        return [
            start(ctx, f"worker-{self.name}-{k}", self._worker, where, str(done_dir), gate)
            for k in range(workers)
        ]

    def _worker(self, where: str, done_dir: str, gate: Gate) -> None:
        pgq = _pgqueuer()

        @contextlib.asynccontextmanager
        async def factory() -> Any:  # what a `pgq run module:factory` user writes
            async with self._queries(where) as queries:
                qm = pgq.QueueManager(queries)

                @qm.entrypoint(self.ENTRYPOINT)
                async def bench_record(job: Any) -> None:  # pgqueuer takes async ones only
                    record(done_dir, int(json.loads(job.payload)["i"]))

                verify = qm.verify_structure

                async def verify_then_ready() -> None:  # the first thing QueueManager.run does
                    await verify()
                    gate.ready.release()
                    await asyncio.to_thread(gate.go.wait, START_TIMEOUT * 2)

                qm.verify_structure = verify_then_ready
                yield qm

        # `pgq run`: its supervisor (SIGINT/SIGTERM = graceful stop) on its own event loop
        # (uvloop when installed), every run option at its default.
        cli = importlib.import_module("pgqueuer.adapters.cli.cli")
        cli.asyncio_run(pgq.run(factory))

    def stop_workers(self, procs: list[BaseProcess], gate: Gate) -> None:
        interrupt_and_stop(procs, gate)


def _procrastinate() -> Any:
    """procrastinate, imported when used (through Any, as huey)."""
    return importlib.import_module("procrastinate")


class Procrastinate(System):
    """procrastinate: ``task.defer`` per job, W ``procrastinate worker`` processes."""

    name = "procrastinate"
    engine = "postgresql"

    def versions(self) -> dict[str, str]:
        return {"procrastinate": str(_procrastinate().__version__)}

    @staticmethod
    def make(where: str, done_dir: str | None = None) -> tuple[Any, Any]:
        """The App (PsycopgConnector, defaults) and its task."""
        pro = _procrastinate()
        # Its one warning, per process: an App made in ``__main__`` cannot be found by
        # ``procrastinate --app``. None of that is used here (the task has a fixed name).
        logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
        app = pro.App(connector=pro.PsycopgConnector(conninfo=where))

        async def bench_record(job: dict[str, Any]) -> None:  # async: no thread hop per job
            if done_dir is not None:
                record(done_dir, int(job["i"]))

        return app, app.task(name="bench_record")(bench_record)

    def prepare(self, cell_dir: Path) -> str:
        where = fresh_database(cell_dir)
        app, _ = self.make(where)
        with app.open():
            app.schema_manager.apply_schema()
        return where

    def produce(self, where: str, n: int, gate: Gate, stamps: Stamps) -> None:
        app, task = self.make(where)
        with app.open():  # the synchronous connector: one committed INSERT per defer
            defer = task.defer
            gate.ready.release()
            if not gate.go.wait(START_TIMEOUT * 2):
                return
            stamps.started.value = time.time()
            for i in range(n):
                defer(job=body(i))
            stamps.finished.value = time.time()

    def pending(self, where: str) -> int:
        # Jobs not yet succeeded (todo, doing, failed …): workers keep succeeded ones
        # (delete_jobs="never", the default).
        return count(where, "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'")

    def start_workers(
        self, ctx: ForkContext, where: str, workers: int, done_dir: Path, gate: Gate
    ) -> list[BaseProcess]:
        return [
            start(ctx, f"worker-{self.name}-{k}", self._worker, where, str(done_dir), gate)
            for k in range(workers)
        ]

    def _worker(self, where: str, done_dir: str, gate: Gate) -> None:
        app, _ = self.make(where, done_dir)

        register = app.job_manager.register_worker

        async def register_then_ready() -> Any:  # Worker.run's start-up, before its loop
            worker_id = await register()
            gate.ready.release()
            await asyncio.to_thread(gate.go.wait, START_TIMEOUT * 2)
            return worker_id

        app.job_manager.register_worker = register_then_ready

        async def work() -> None:  # `procrastinate worker`: open the app, run one worker
            async with app.open_async():
                await app.run_worker_async()  # every option at its default (concurrency 1)

        asyncio.run(work())

    def stop_workers(self, procs: list[BaseProcess], gate: Gate) -> None:
        interrupt_and_stop(procs, gate)  # SIGINT: procrastinate's graceful stop


SYSTEMS: dict[str, type[System]] = {
    s.name: s for s in (SqlQueue, HueySqlite, SqlQueuePg, PgQueuer, Procrastinate, PgmqKombu)
}
#: Ours, per engine: the ratios are ours / each peer's.
OURS = {"sqlite": SqlQueue.name, "postgresql": SqlQueuePg.name}
ENGINES = tuple(OURS)


def engine_systems(engine: str) -> list[str]:
    return [name for name, cls in SYSTEMS.items() if cls.engine == engine]


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
        cls(args.prefetch) if issubclass(cls, KombuSystem) else cls()
        for cls in (SYSTEMS[name] for name in args.systems)
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
                print(f"  {phase:<8} {system.name:<13} ...", end=" ", flush=True)
                cell.extra["load"] = os.getloadavg()[0]
                if phase == "enqueue":
                    where = wheres[system.name] = system.prepare(cell_dir)
                    with measured(system, where, cell):
                        run_enqueue(ctx, system, where, cell, args.timeout)
                elif phase == "drain":
                    where = wheres.pop(system.name, None)
                    if where is None:  # enqueue phase skipped: fill the queue, untimed
                        where = system.prepare(cell_dir)
                        run_enqueue(ctx, system, where, Cell("", "", 0, args.jobs, 0), args.timeout)
                    with measured(system, where, cell):
                        run_drain(ctx, system, where, cell, done_dir, args.timeout)
                else:
                    where = system.prepare(cell_dir)
                    with measured(system, where, cell):
                        run_e2e(ctx, system, where, cell, done_dir, args.timeout, args.idle)
                cells.append(cell)
                print(f"{cell.rate:8,.0f} jobs/s ({cell.seconds:.2f} s)", flush=True)
                if phase != "enqueue" and not args.keep:
                    # the drain phase's database is the enqueue phase's
                    done = [cell_dir]
                    if phase == "drain":
                        done.append(workdir / f"r{rnd}-{system.name}-enqueue")
                    for path in done:
                        shutil.rmtree(path, ignore_errors=True)
                        if system.engine == "postgresql":
                            drop_database(path)
    return cells


def summarize(cells: list[Cell], systems: list[str], ours: str) -> dict[str, Any]:
    """Per phase: each system's rates by round and median, and ours/peer ratios."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        rates = {s: [c.rate for c in cells if c.phase == phase and c.system == s] for s in systems}
        if not any(rates.values()):
            continue
        medians = {s: statistics.median(r) for s, r in rates.items() if r}
        entry: dict[str, Any] = {"rates": rates, "median": medians, "ratio": {}}
        if ours in medians:
            for peer in medians:
                if peer == ours:
                    continue
                per_round = [a / b for a, b in zip(rates[ours], rates[peer], strict=True)]
                entry["ratio"][peer] = {
                    "of_medians": medians[ours] / medians[peer],
                    "per_round": per_round,
                }
        entry["per_job"] = {
            s: {
                metric: statistics.median(values)
                for metric in COST_METRICS
                if (values := [c.extra[metric] for c in of_system if metric in c.extra])
            }
            for s in systems
            if (of_system := [c for c in cells if c.phase == phase and c.system == s])
        }
        out[phase] = entry
    return out


#: What :func:`measured` records per job, and how it is printed.
COST_METRICS = {
    "client_cpu_us": "client CPU µs",
    "server_cpu_us": "server CPU µs",
    "statements": "statements",
    "commits": "commits",
}


def print_costs(summary: dict[str, Any]) -> None:
    """Per phase and system, the medians of what a job cost."""
    print("\nper job (medians)")
    header = ["phase", "system", *COST_METRICS.values()]
    rows = [
        [phase, system, *(f"{costs[m]:,.2f}" if m in costs else "-" for m in COST_METRICS)]
        for phase, entry in summary.items()
        for system, costs in entry["per_job"].items()
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print(fmt.format(*header))
    for row in rows:
        print(fmt.format(*row))


def print_summary(summary: dict[str, Any], rounds: int, ours: str) -> None:
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
                    f"{ours}/{peer}",
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
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="sqlite",
        help="the database every system runs on (postgresql: a throwaway server)",
    )
    p.add_argument(
        "--systems",
        nargs="+",
        choices=list(SYSTEMS),
        help="default: every system of the engine: "
        + "; ".join(f"{e}: {' '.join(engine_systems(e))}" for e in ENGINES),
    )
    p.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    p.add_argument("--json", type=Path, help="also write every number here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (for debugging)")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.workers < 1 or args.rounds < 1:
        p.error("--jobs, --workers and --rounds must be at least 1")
    if args.systems is None:
        args.systems = engine_systems(args.engine)
    elif other := [s for s in args.systems if SYSTEMS[s].engine != args.engine]:
        p.error(
            f"--systems {' '.join(other)}: not on --engine {args.engine} "
            f"(its systems: {' '.join(engine_systems(args.engine))})"
        )
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


@contextlib.contextmanager
def database_server(engine: str) -> Iterator[dict[str, str]]:
    """With postgresql, a throwaway server (``PG``) for the run; yields its settings."""
    global PG
    if engine != "postgresql":
        yield {}
        return
    try:
        PG = start_postgresql()
    except (RuntimeError, OSError) as exc:  # servers.ServerUnavailable is a RuntimeError
        raise BenchError(f"no PostgreSQL server: {exc}") from exc
    try:
        count_statements()
        yield pg_settings()
    finally:
        PG.stop()
        PG = None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    versions: dict[str, str] = {"python": platform.python_version(), "code": code_version()}
    if args.engine == "sqlite":
        versions["sqlite"] = sqlite3.sqlite_version
    for name in args.systems:
        versions.update(SYSTEMS[name]().versions())
    machine = f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
    started = time.perf_counter()
    settings: dict[str, str] = {}
    try:
        # the server outlives the workspace: every process is stopped before it is
        with database_server(args.engine) as settings, workspace(args.keep) as workdir:
            if settings:
                versions["postgresql"] = settings.pop("server_version")
                storage = "PostgreSQL " + ", ".join(f"{k}={v}" for k, v in settings.items())
            else:
                storage = "SQLite WAL + synchronous=FULL"
            print(
                f"machine: {machine}\nversions: "
                + "  ".join(f"{k} {v}" for k, v in versions.items())
                + f"\nN={args.jobs} jobs/phase, W={args.workers} workers, prefetch "
                f"{args.prefetch}, {args.rounds} rounds, {storage} for all",
                flush=True,
            )
            cells = run_rounds(args, workdir)
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    ours = OURS[args.engine]
    summary = summarize(cells, args.systems, ours)
    print_summary(summary, args.rounds, ours)
    print_costs(summary)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "cores": os.cpu_count(),
                    "versions": versions,
                    "postgresql_settings": settings,
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
