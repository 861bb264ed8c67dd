"""Laravel's own database queue against ``laravel_bridge`` on the same ``jobs`` table.

Usage::

    python bench/bench_laravel.py [--engines sqlite postgresql mariadb] [--jobs N]
                                  [--repeat R] [--sqlite-synchronous FULL|NORMAL|default]
                                  [--php-opcache] [--profile] [--json out.json]

Every cell uses a fresh database (a new SQLite file, or a new database on a
throwaway PostgreSQL / MariaDB server from ``tests/servers.py``) whose ``jobs``
and ``failed_jobs`` tables are made by Laravel 8.83's own migration stubs
(``php bench/php/laravel_queue_bench.php migrate``). The job is ``App\\Jobs\\Noop``
as ``php artisan make:job`` writes it (Dispatchable, InteractsWithQueue,
Queueable, SerializesModels) with two public properties, an int and a short
string; its ``handle()`` — and the Python handler — only counts. Each side runs
in its own fresh process (``php`` / this interpreter) and times itself after
boot and after one ``size()`` query (connection open), so interpreter start,
autoloading and connecting are not counted. Measured, N jobs per cell:

1. ``worker`` — jobs/s draining N waiting jobs, one job at a time:
   ``laravel_bridge.Worker(...).run()`` (``stop_when_empty``, ``sleep=0``, no
   console output) vs Laravel's ``Illuminate\\Queue\\Worker::daemon()``
   (``stopWhenEmpty``, ``sleep 0``, ``tries 1``, other ``queue:work``
   defaults; no console lines, failures logged to ``queue.failer``). Before
   each, the table is filled the same way: one ``LaravelQueue.dispatch_many``
   of the N jobs, whose payloads are byte-identical to what Laravel's
   ``dispatch()`` writes (uuid aside — checked on every run against a row
   Laravel wrote). Afterwards: no row left in ``jobs``, none in
   ``failed_jobs``, the handler ran N times, no exception reported.
2. ``dispatch`` — rows/s storing N jobs: Laravel's ``Noop::dispatch($i, ...)``
   loop (PendingDispatch -> Bus dispatcher -> ``DatabaseQueue::push``: one
   autocommit INSERT each) vs one ``LaravelQueue.dispatch_many`` call
   (multi-row INSERTs, one transaction) and, for information, a
   ``LaravelQueue.dispatch`` loop (one transaction per job). Row counts are
   checked after each.

Ratios are python / laravel (medians over ``--repeat`` runs; the two sides
alternate which goes first). Targets from the issue: worker >= 1x (aim 2x),
``dispatch_many`` >= 10x the Laravel loop.

Durability: PostgreSQL (``synchronous_commit=on``) and MariaDB
(``innodb_flush_log_at_trx_commit=1``) run with server defaults for both sides.
SQLite's durability is a per-connection PRAGMA whose defaults differ: Laravel
8 sets nothing (SQLite's default, ``synchronous=FULL``) while
``kombu_sqlqueue``'s ``StoreOptions`` default is ``NORMAL`` (no fsync per
commit in WAL mode). ``--sqlite-synchronous`` (default ``FULL``) sets the same
mode on both sides; ``default`` leaves each side its own default (and says so
in the table). Every SQLite file is switched to WAL before use (the Python
store does so on connect, and the mode is stored in the file), so both sides
write the same kind of file; Laravel alone on a fresh file would use a rollback
journal. PHP runs with its CLI defaults: ``opcache.enable_cli`` is off unless
``--php-opcache``; the output reports what PHP had.

``--profile`` prints a cProfile (by cumulative time) of each engine's first
Python drain. Every wait is bounded (``--timeout`` per process); servers and
temp files are removed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import servers  # noqa: E402
from bench_common import code_version  # noqa: E402

from kombu_sqlqueue.store import StoreOptions  # noqa: E402
from laravel_bridge import HandlerRegistry, LaravelQueue, Worker, WorkerOptions  # noqa: E402
from laravel_bridge.tables import LaravelLayout  # noqa: E402

ENGINES = ("sqlite", "postgresql", "mariadb")
SCENARIOS = ("worker", "dispatch")
PHP_SCRIPT = HERE / "php" / "laravel_queue_bench.php"
JOB_CLASS = "App\\Jobs\\Noop"
SYNC_MODES = ("FULL", "NORMAL", "default")
TARGETS = {"worker": 1.0, "dispatch": 10.0}


#: Filled as cells run: (engine, cProfile text), payload check results, PHP's versions.
env_profiles: list[tuple[str, str]] = []
payload_checks: list[str] = []
php_info: dict[str, Any] = {}


class BenchError(RuntimeError):
    """A cell failed a check or a process failed."""


def _raise_on_sigterm(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def job_props(i: int) -> dict[str, Any]:
    """The Noop job's properties, as PHP's ``new Noop($i, "job-$i")`` has them."""
    return {"id": i, "name": f"job-{i}"}


# -- the Python side (run in a child process: --child ...) ---------------------------------


def open_queue(url: str, sync: str) -> LaravelQueue:
    """``LaravelQueue(url)``, with the SQLite synchronous mode forced unless ``default``."""
    if sync == "default" or not url.startswith("sqlite"):
        return LaravelQueue(url, layout="laravel")
    table = LaravelLayout(url, options=StoreOptions(sqlite_synchronous=sync))
    return LaravelQueue(url, layout="laravel", table=table)


def child(args: argparse.Namespace) -> int:
    """One timed Python operation on ``args.url``; one JSON line on stdout."""
    n, op = args.jobs, args.child
    queue = open_queue(args.url, args.sqlite_synchronous)
    size_before = queue.size()  # schema checked, connection open, table read once
    handled = 0
    profile_text = None
    if op == "py-work":

        def noop(job: Any) -> None:
            nonlocal handled
            handled += 1

        registry = HandlerRegistry()
        registry.register(JOB_CLASS, noop)
        options = WorkerOptions(queues=["default"], stop_when_empty=True, sleep=0)
        worker = Worker(queue.table, options, handlers=registry, output=None)
        profiler = cProfile.Profile() if args.profile else None
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.runcall(worker.run)
        else:
            worker.run()
        seconds = time.perf_counter() - t0
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            profile_text = out.getvalue()
    elif op == "py-dispatch-many":
        t0 = time.perf_counter()
        stored = queue.dispatch_many((JOB_CLASS, job_props(i)) for i in range(n))
        seconds = time.perf_counter() - t0
        if stored != n:
            raise BenchError(f"dispatch_many returned {stored}, not {n}")
    elif op == "py-dispatch-loop":
        t0 = time.perf_counter()
        for i in range(n):
            queue.dispatch(JOB_CLASS, job_props(i))
        seconds = time.perf_counter() - t0
    else:
        raise ValueError(op)
    queue.close()
    print(
        json.dumps(
            {
                "op": op,
                "n": n,
                "seconds": seconds,
                "handled": handled,
                "size_before": size_before,
                "profile": profile_text,
            }
        )
    )
    return 0


# -- environment ---------------------------------------------------------------------------


@dataclass
class Database:
    engine: str
    url: str  # SQLAlchemy URL with driver
    php: dict[str, Any]  # laravel_queue_bench.php's CONN


@dataclass
class Env:
    workdir: Path
    sync: str
    php_args: list[str]
    servers: dict[str, servers.Server] = field(default_factory=dict)
    count: int = 0
    mysql_driver: str = "pymysql"

    def fresh(self, engine: str) -> Database:
        self.count += 1
        name = f"lb{self.count}_{engine}"
        if engine == "sqlite":
            path = self.workdir / f"{name}.db"
            php: dict[str, Any] = {"driver": "sqlite", "database": str(path)}
            if self.sync != "default":
                php["synchronous"] = self.sync
            return Database(engine, f"sqlite:///{path}", php)
        server = self.servers[engine]
        url = server.create_database(name)
        if engine == "postgresql":
            return Database(
                engine,
                url.replace("postgresql://", "postgresql+psycopg://", 1),
                {"driver": "pgsql", "host": "127.0.0.1", "port": server.port, "database": name,
                 "username": "postgres", "password": ""},
            )  # fmt: skip
        return Database(
            engine,
            url.replace("mysql://", f"mysql+{self.mysql_driver}://", 1),
            {"driver": "mysql", "host": "127.0.0.1", "port": server.port, "database": name,
             "username": "root", "password": ""},
        )  # fmt: skip


@contextlib.contextmanager
def environment(args: argparse.Namespace) -> Iterator[Env]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-laravel-"))
    php_args = ["-d", "opcache.enable_cli=1"] if args.php_opcache else []
    env = Env(workdir, args.sqlite_synchronous, php_args, mysql_driver=args.mysql_driver)
    try:
        if "postgresql" in args.engines:
            print("starting PostgreSQL ...", flush=True)
            env.servers["postgresql"] = servers.start_postgresql()
        if "mariadb" in args.engines:
            print("starting MariaDB ...", flush=True)
            env.servers["mariadb"] = servers.start_mariadb()
        yield env
    finally:
        for server in env.servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_json(cmd: list[str], timeout: float, label: str) -> dict[str, Any]:
    """Run ``cmd``; return the JSON object on its last stdout line."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # subprocess.run killed it
        raise BenchError(f"{label} took over {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise BenchError(f"{label} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    if proc.stderr.strip():
        print(f"\n    stderr of {label}: {proc.stderr.strip()[-500:]}", flush=True)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{label} printed nothing")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def php(env: Env, op: str, db: Database, n: int | None, timeout: float) -> dict[str, Any]:
    cmd = ["php", *env.php_args, str(PHP_SCRIPT), op, json.dumps(db.php)]
    if n is not None:
        cmd.append(str(n))
    return run_json(cmd, timeout, f"php {PHP_SCRIPT.name} {op}")


def python(
    env: Env, op: str, db: Database, n: int, timeout: float, profile: bool = False
) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", op, "--url", db.url,
           "--jobs", str(n), "--sqlite-synchronous", env.sync]  # fmt: skip
    if profile:
        cmd.append("--profile")
    return run_json(cmd, timeout, f"python child {op}")


def counts(db: Database) -> tuple[int, int]:
    """Rows in ``jobs`` and ``failed_jobs``."""
    engine = sa.create_engine(db.url)
    try:
        with engine.connect() as conn:
            jobs = conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one()
            failed = conn.execute(sa.text("SELECT COUNT(*) FROM failed_jobs")).scalar_one()
    finally:
        engine.dispose()
    return int(jobs), int(failed)


def prepare(env: Env, db: Database, timeout: float) -> None:
    """Laravel's migration, then open with the Python store once (SQLite: WAL from here on)."""
    php(env, "migrate", db, None, timeout)
    queue = open_queue(db.url, env.sync)
    try:
        queue.size()
    finally:
        queue.close()


def fill(env: Env, db: Database, n: int) -> None:
    queue = open_queue(db.url, env.sync)
    try:
        queue.dispatch_many((JOB_CLASS, job_props(i)) for i in range(n))
    finally:
        queue.close()
    jobs, _ = counts(db)
    if jobs != n:
        raise BenchError(f"fill stored {jobs} rows, not {n}")


def check_payload(db: Database) -> str:
    """Compare a Laravel-written row with the Python build of the same job (uuid aside)."""
    engine = sa.create_engine(db.url)
    try:
        with engine.connect() as conn:
            queue_name, payload = conn.execute(
                sa.text("SELECT queue, payload FROM jobs ORDER BY id LIMIT 1")
            ).one()
    finally:
        engine.dispose()
    theirs = json.loads(payload)
    queue = open_queue(db.url, "default")
    try:
        built = queue.build(JOB_CLASS, job_props(0), uuid=theirs["uuid"])
    finally:
        queue.close()
    if built.payload == payload and built.queue == queue_name:
        return "identical"
    return f"DIFFERENT: laravel {payload!r} vs python {built.payload!r}"


# -- cells ---------------------------------------------------------------------------------


@dataclass
class Run:
    engine: str
    scenario: str
    side: str  # python | python_loop | laravel
    rep: int
    n: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("nan")


def worker_cell(env: Env, engine: str, rep: int, args: argparse.Namespace) -> list[Run]:
    n, runs = args.jobs, []
    sides = ["laravel", "python"] if rep % 2 == 0 else ["python", "laravel"]
    for side in sides:
        db = env.fresh(engine)
        prepare(env, db, args.timeout)
        fill(env, db, n)
        print(f"[{engine:<10} worker   {side:<11} rep {rep + 1}] draining {n} ...", end=" ",
              flush=True)  # fmt: skip
        if side == "laravel":
            r = php(env, "work", db, n, args.timeout)
            reported = r["reported"] + r["failed_events"]
        else:
            profile = args.profile and rep == 0
            r = python(env, "py-work", db, n, args.timeout, profile=profile)
            reported = 0
            if r.get("profile"):
                env_profiles.append((engine, r["profile"]))
        jobs, failed = counts(db)
        if r["size_before"] != n or r["handled"] != n or jobs or failed or reported:
            raise BenchError(
                f"{side} worker: size before {r['size_before']}, handled {r['handled']} of {n}, "
                f"{jobs} rows left, {failed} failed, {reported} exceptions/failures reported"
            )
        runs.append(Run(engine, "worker", side, rep, n, r["seconds"]))
        print(f"{n / r['seconds']:,.0f} jobs/s ({r['seconds']:.2f}s)", flush=True)
        if side == "laravel":
            php_info.update({k: r[k] for k in ("php", "laravel", "opcache")})
    return runs


def dispatch_cell(env: Env, engine: str, rep: int, args: argparse.Namespace) -> list[Run]:
    n, runs = args.jobs, []
    sides = ["laravel", "python", "python_loop"]
    if rep % 2:
        sides.reverse()
    for side in sides:
        db = env.fresh(engine)
        prepare(env, db, args.timeout)
        print(f"[{engine:<10} dispatch {side:<11} rep {rep + 1}] storing {n} ...", end=" ",
              flush=True)  # fmt: skip
        if side == "laravel":
            r = php(env, "dispatch", db, n, args.timeout)
            if r["reported"]:
                raise BenchError(f"laravel dispatch reported {r['reported']} exceptions")
        else:
            op = "py-dispatch-many" if side == "python" else "py-dispatch-loop"
            r = python(env, op, db, n, args.timeout)
        jobs, failed = counts(db)
        if jobs != n or failed:
            raise BenchError(f"{side} dispatch: {jobs} rows stored of {n}, {failed} failed")
        if side == "laravel":
            same = check_payload(db)
            payload_checks.append(same)
            if same != "identical":
                print(f"\n    payload check: {same}", flush=True)
        runs.append(Run(engine, "dispatch", side, rep, n, r["seconds"]))
        print(f"{n / r['seconds']:,.0f} rows/s ({r['seconds']:.2f}s)", flush=True)
    return runs


# -- report --------------------------------------------------------------------------------


def median_rate(runs: list[Run], engine: str, scenario: str, side: str) -> float | None:
    rates = [r.rate for r in runs if (r.engine, r.scenario, r.side) == (engine, scenario, side)]
    return statistics.median(rates) if rates else None


def summarize(runs: list[Run], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for engine in args.engines:
        specs = [
            ("worker", "worker drain, jobs/s", "python", "laravel", TARGETS["worker"]),
            ("dispatch", "dispatch_many vs dispatch() loop, rows/s", "python", "laravel",
             TARGETS["dispatch"]),
            ("dispatch", "dispatch() loop vs loop (info), rows/s", "python_loop", "laravel", None),
        ]  # fmt: skip
        for scenario, label, py_side, php_side, target in specs:
            if scenario not in args.scenarios:
                continue
            py = median_rate(runs, engine, scenario, py_side)
            lv = median_rate(runs, engine, scenario, php_side)
            ratio = py / lv if py and lv else None
            rows.append(
                {
                    "engine": engine,
                    "scenario": label,
                    "python": py,
                    "laravel": lv,
                    "ratio": ratio,
                    "target": target,
                    "met": None if ratio is None or target is None else ratio >= target,
                }
            )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    headers = ["engine", "scenario", "python", "laravel", "ratio", "target"]
    cells = [
        [
            r["engine"],
            r["scenario"],
            f"{r['python']:,.0f}" if r["python"] else "n/a",
            f"{r['laravel']:,.0f}" if r["laravel"] else "n/a",
            f"{r['ratio']:.2f}x" if r["ratio"] else "n/a",
            "-"
            if r["target"] is None
            else f">= {r['target']:g}x {'MET' if r['met'] else 'NOT MET'}",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 or i == 5 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print()
    print(fmt.format(*headers).rstrip())
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print(fmt.format(*c).rstrip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    p.add_argument("--jobs", "-n", type=int, default=5000, help="jobs per cell (default 5000)")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is reported")
    p.add_argument(
        "--sqlite-synchronous",
        default="FULL",
        choices=SYNC_MODES,
        help="SQLite PRAGMA synchronous for both sides (default FULL, SQLite's and Laravel's); "
        "'default': each side's own default (Python NORMAL, Laravel FULL)",
    )
    p.add_argument("--php-opcache", action="store_true", help="php -d opcache.enable_cli=1")
    p.add_argument(
        "--mysql-driver",
        default="pymysql",
        choices=("pymysql", "mysqldb"),
        help="the Python side's MariaDB driver: PyMySQL (the default) or mysqlclient",
    )
    p.add_argument("--profile", action="store_true", help="cProfile each engine's first drain")
    p.add_argument("--timeout", type=float, default=600.0, help="bound on each process, seconds")
    p.add_argument("--json", type=Path)
    # internal: one timed Python operation in a fresh process
    p.add_argument(
        "--child",
        choices=("py-work", "py-dispatch-many", "py-dispatch-loop"),
        help=argparse.SUPPRESS,
    )
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.jobs <= 0 or a.repeat <= 0:
        p.error("--jobs and --repeat must be > 0")
    if a.child and not a.url:
        p.error("--child needs --url")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    if shutil.which("php") is None or not PHP_SCRIPT.exists():
        print("php (with Debian's Laravel under /usr/share/php) is needed", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    started = time.perf_counter()
    runs: list[Run] = []
    failures: list[str] = []
    with environment(args) as env:
        for engine in args.engines:
            for rep in range(args.repeat):
                for scenario, cell in (("worker", worker_cell), ("dispatch", dispatch_cell)):
                    if scenario not in args.scenarios:
                        continue
                    try:
                        runs.extend(cell(env, engine, rep, args))
                    except BenchError as exc:
                        print(f"FAILED: {exc}", flush=True)
                        failures.append(f"{engine} {scenario} rep {rep + 1}: {exc}")
    rows = summarize(runs, args)
    opcache = php_info.get("opcache", {})
    print(
        f"\nN={args.jobs}  repeat={args.repeat} (median)  "
        f"sqlite synchronous={args.sqlite_synchronous}"
        f"{' (python NORMAL, laravel FULL)' if args.sqlite_synchronous == 'default' else ''}  "
        f"php {php_info.get('php', '?')} (opcache.enable_cli={opcache.get('enable_cli')}, "
        f"active={opcache.get('active')}, jit={opcache.get('jit')})  "
        f"laravel {php_info.get('laravel', '?')}  python {platform.python_version()}  "
        f"sqlalchemy {sa.__version__}  psycopg {psycopg.__version__}  "
        f"pymysql {pymysql.__version__}  code {code_version()}  cpus {os.cpu_count()}  "
        f"total {time.perf_counter() - started:.0f}s"
    )
    if payload_checks:
        same = sum(c == "identical" for c in payload_checks)
        print(
            f"payloads: {same}/{len(payload_checks)} Laravel-written rows identical to "
            "LaravelQueue.build of the same job (uuid aside)"
        )
    print_table(rows)
    for engine, text in env_profiles:
        print(f"\ncProfile of the Python drain on {engine} (N={args.jobs}):\n{text}")
    if failures:
        print("\nFAILED cells:")
        for f in failures:
            print(f"  {f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "code": code_version(),
                    "php": php_info,
                    "payload_checks": payload_checks,
                    "runs": [asdict(r) | {"rate": r.rate} for r in runs],
                    "summary": rows,
                    "failures": failures,
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
