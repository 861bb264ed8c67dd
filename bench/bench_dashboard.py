"""The dashboard on a large database (issue 31): "the overview of a database with 1M waiting
jobs and 100k failed answers within 1 s, pages are paginated with keyset pagination, no
full scans per refresh".

Usage::

    # full size, every engine (starts a throwaway PostgreSQL and MariaDB: tests/servers.py)
    python bench/bench_dashboard.py --engines sqlite,postgresql,mariadb
    # a quick check
    python bench/bench_dashboard.py --jobs 100000 --failed 10000
    # Laravel's jobs/failed_jobs seeded as well (the same sizes, or --laravel-jobs/-failed),
    # with the covering index docs/dashboard.md suggests for Laravel's table
    python bench/bench_dashboard.py --laravel [--laravel-index] [--json out.json]

Per engine, a fresh database (SQLite: a file under a temp dir) gets the tables as
``kombu-sqlqueue create-tables`` makes them (``JobStore.create_schema``; Laravel's with the
``laravel`` layout's ``create_tables``), then is seeded with set-based SQL — one
``INSERT … SELECT`` per ``--chunk`` rows from ``generate_series`` (PostgreSQL), a recursive
CTE (SQLite) or the Sequence engine's ``seq_M_to_N`` (MariaDB), not a call per job:

* ``--jobs`` rows in ``askr_jobs`` over 20 queues (``celery`` 40 %, ``cleanup`` 0.1 %, the
  rest even): ~94 % ready (ages up to an hour, 10 % with priority 3), 5 % delayed (up to 2
  h), 0.3 % held by 8 named workers (live reservations), 0.1 % lapsed reservations; every
  payload a Celery protocol-2 message as the transport stores it (~450 bytes, its task id
  also the row's uuid);
* ``--failed`` rows in ``askr_failed_jobs`` (the same queues, plus ``legacy_sync``: ten
  rows among the oldest), each with a Python traceback (~1 KB);
* with ``--laravel``, the same mix in Laravel's ``jobs``/``failed_jobs`` (Laravel 8 payloads
  of ``App\\Jobs\\…`` classes, ~390 bytes; PHP stack traces).

Then ``ANALYZE`` (PostgreSQL: ``VACUUM ANALYZE``, what autovacuum does after a bulk load:
the visibility map an index-only scan needs). The dashboard (``create_app(url)``) is served
through Starlette's ``TestClient`` and each page an operator's browser asks for — ``/``, the
2 s refresh ``/fragments/overview``, ``/queue`` of the big and of a small queue, a job's
``/job`` page, ``/failed/<layout>`` (all, of the big queue, of the rare queue, a search that
matches, one that does not), a failed job's page by id and by uuid; the pages of routes this
tree lacks are left out — is requested once to warm up, then ``--repeat`` times: median and
max, > 1 s marked; a page answered with an error banner is reported as failed.
``QueueAdmin.stats()``, ``holders()`` and ``issued()`` (``open_admin``) are timed alone
too. Every SQL statement the store runs is timed at the DB-API cursor (the store runs its
statements on raw cursors, not through SQLAlchemy's execution events:
``Executor._checkout`` is wrapped in this process), fetches included;
each page's dominant statement is named (the ``Queries`` attribute it is) and the plan of
every statement slower than ``--explain-over`` (and of the slowest page's dominant one) is
printed — PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS)``, MariaDB ``ANALYZE``, SQLite ``EXPLAIN
QUERY PLAN`` — with the parameters it ran with.

The servers are tests/servers.py's (PostgreSQL shared_buffers=128MB, MariaDB
innodb_buffer_pool_size=256M unless ``--innodb-buffer-pool-mb``); servers and temp files
are removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import json
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_common import code_version, raise_on_sigterm  # noqa: E402

ENGINES = ("sqlite", "postgresql", "mariadb")
#: --engines also takes the other benches' name of MariaDB.
ALIASES = {"mysql": "mariadb", "pg": "postgresql"}
#: tests/servers.py's STARTERS key of each server engine.
STARTER = {"postgresql": "postgresql", "mariadb": "mysql"}
#: A page slower than this is marked (the issue's bound).
BOUND = 1.0

# -- what the tables hold --------------------------------------------------------------------

#: Contract v1's queues: queue 0 takes 40 % of the jobs, queue 19 0.1 %, the others the rest.
QUEUES = (
    "celery", "default", "emails", "notifications", "reports", "billing", "webhooks",
    "imports", "exports", "thumbnails", "search_index", "analytics", "sms", "push",
    "payments", "audit", "sync", "crawl", "priority_high", "cleanup",
)  # fmt: skip
TASKS = tuple(f"{q}.tasks.{v}" for q, v in zip(QUEUES, ("run", "process") * 10, strict=True))
#: A queue with a handful of dead letters, all among the oldest rows: the worst case of a
#: failed list filtered by queue (no index on askr_failed_jobs.queue).
RARE_FAILED_QUEUE = "legacy_sync"
LARAVEL_QUEUES = (
    "default", "emails", "high", "low", "notifications", "mail", "orders", "invoices",
    "exports", "imports", "media", "search", "webhooks", "sms", "push", "reports",
    "payments", "sync", "audit", "cleanup",
)  # fmt: skip
LARAVEL_CLASSES = tuple(
    "App\\Jobs\\" + "".join(w.capitalize() for w in q.split("_")) + "Job" for q in LARAVEL_QUEUES
)
#: The row number's expressions, SQL shared by every engine (``{i}``: the number column).
QUEUE_INDEX = "CASE WHEN {i} % 100 < 40 THEN 0 WHEN {i} % 1000 = 999 THEN 19 ELSE 1 + {i} % 18 END"
#: 0 ready, 1 delayed, 2 held (a live reservation), 3 a lapsed reservation (ready again).
KIND = (
    "CASE WHEN {i} % 331 = 5 THEN 2 WHEN {i} % 997 = 11 THEN 3 WHEN {i} % 20 = 3 THEN 1 ELSE 0 END"
)
TID = "@@TID@@"

PY_TRACEBACKS = (
    'Traceback (most recent call last):\n  File "/app/.venv/lib/python3.11/site-packages/'
    'celery/app/trace.py", line 453, in trace_task\n    R = retval = fun(*args, **kwargs)\n'
    '  File "/app/.venv/lib/python3.11/site-packages/celery/app/trace.py", line 736, in '
    '__protected_call__\n    return self.run(*args, **kwargs)\n  File "/app/billing/tasks.py", '
    'line 88, in run\n    response = session.post(url, json=body, timeout=10)\n  File "/app/'
    '.venv/lib/python3.11/site-packages/requests/sessions.py", line 637, in post\n    return '
    'self.request("POST", url, data=data, json=json, **kwargs)\n  File "/app/.venv/lib/'
    'python3.11/site-packages/requests/adapters.py", line 519, in send\n    raise '
    "ConnectionError(e, request=request)\nrequests.exceptions.ConnectionError: "
    "HTTPSConnectionPool(host='api.example.com', port=443): Max retries exceeded with url: "
    "/v2/invoices (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object "
    "at 0x7f3a2c1b5e50>: Failed to establish a new connection: [Errno 111] Connection "
    "refused'))",
    'Traceback (most recent call last):\n  File "/app/.venv/lib/python3.11/site-packages/'
    'celery/app/trace.py", line 453, in trace_task\n    R = retval = fun(*args, **kwargs)\n'
    '  File "/app/reports/tasks.py", line 41, in process\n    row = rows[index]\n'
    "IndexError: list index out of range",
    'Traceback (most recent call last):\n  File "/app/.venv/lib/python3.11/site-packages/'
    'celery/app/trace.py", line 453, in trace_task\n    R = retval = fun(*args, **kwargs)\n'
    '  File "/app/emails/tasks.py", line 19, in run\n    user = User.objects.get(pk=user_id)\n'
    '  File "/app/.venv/lib/python3.11/site-packages/django/db/models/query.py", line 637, '
    "in get\n    raise self.model.DoesNotExist(\nusers.models.User.DoesNotExist: User "
    "matching query does not exist.",
    "celery.exceptions.TimeLimitExceeded: TimeLimitExceeded(300,)",
)
PHP_TRACES = (
    "Illuminate\\Http\\Client\\ConnectionException: cURL error 7: Failed to connect to "
    "api.example.com port 443: Connection refused in /var/www/vendor/laravel/framework/src/"
    "Illuminate/Http/Client/PendingRequest.php:856\nStack trace:\n#0 /var/www/vendor/laravel/"
    "framework/src/Illuminate/Support/helpers.php(234): Illuminate\\Http\\Client\\"
    "PendingRequest->Illuminate\\Http\\Client\\{closure}(1)\n#1 /var/www/app/Jobs/"
    "InvoicesJob.php(41): Illuminate\\Http\\Client\\PendingRequest->send('POST', '/v2/"
    "invoices', Array)\n#2 [internal function]: App\\Jobs\\InvoicesJob->handle()\n#3 {main}",
    "ErrorException: Undefined array key 3 in /var/www/app/Jobs/ReportsJob.php:57\nStack "
    "trace:\n#0 /var/www/app/Jobs/ReportsJob.php(57): Illuminate\\Foundation\\Bootstrap\\"
    "HandleExceptions->handleError(2, 'Undefined array...', '/var/www/app/Jo...', 57)\n#1 "
    "{main}",
    "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\MailJob has been attempted "
    "too many times or run too long. The job may have previously timed out. in /var/www/"
    "vendor/laravel/framework/src/Illuminate/Queue/Worker.php:746\nStack trace:\n#0 {main}",
)


def celery_parts(queue: str, task: str) -> tuple[str, str, str]:
    """A Celery protocol-2 message as the transport stores it, split around its task id
    (which it holds twice: ``id`` and ``root_id``)."""
    import base64

    body = [[4521, "invoice-2024-0457"], {"notify": True}, {"callbacks": None, "chain": None}]
    message = {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"lang": "py", "task": task, "id": TID, "root_id": TID, "retries": 0},
        "properties": {
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
        },
    }
    head, middle, tail = json.dumps(message, separators=(",", ":")).split(TID)
    return head, middle, tail


def laravel_parts(queue: str, cls: str) -> tuple[str, str]:
    """A Laravel 8 payload (``queue:work`` reads it), split around its uuid."""
    command = (
        f'O:{len(cls)}:"{cls}":2:{{s:9:"invoiceId";i:4521;s:5:"queue";s:{len(queue)}:"{queue}";}}'
    )
    payload = {
        "uuid": TID,
        "displayName": cls,
        "job": "Illuminate\\Queue\\CallQueuedHandler@call",
        "maxTries": None,
        "maxExceptions": None,
        "failOnTimeout": False,
        "backoff": None,
        "timeout": None,
        "retryUntil": None,
        "data": {"commandName": cls, "command": command},
    }
    head, tail = json.dumps(payload, separators=(",", ":")).split(TID)
    return head, tail


# -- each engine's SQL for the seeding -------------------------------------------------------


class SeedSql:
    """What differs per engine in the seeding statements (:meth:`for_engine`)."""

    engine: str = ""

    def cat(self, *parts: str) -> str:
        # Each part in parentheses: SQLite's || binds tighter than %.
        return " || ".join(f"({p})" for p in parts)

    def pad12(self, expr: str) -> str:
        raise NotImplementedError

    def numbers(self, lo: int, hi: int) -> tuple[str, str, str]:
        """(a WITH clause or "", the FROM item, its number column) for ``lo`` … ``hi``."""
        raise NotImplementedError

    def blob(self, expr: str) -> str:
        return expr

    def param(self, name: str) -> str:
        return f":{name}"

    def timestamp(self, unix_expr: str) -> str:
        raise NotImplementedError

    @staticmethod
    def for_engine(engine: str) -> SeedSql:
        return {"sqlite": SqliteSeed, "postgresql": PgSeed, "mariadb": MariaSeed}[engine]()


class SqliteSeed(SeedSql):
    engine = "sqlite"

    def pad12(self, expr: str) -> str:
        return f"printf('%012d', {expr})"

    def numbers(self, lo: int, hi: int) -> tuple[str, str, str]:
        cte = f"WITH RECURSIVE g(n) AS (SELECT {lo} UNION ALL SELECT n + 1 FROM g WHERE n < {hi})"
        return cte, "g", "n"

    def blob(self, expr: str) -> str:
        return f"CAST({expr} AS BLOB)"

    def timestamp(self, unix_expr: str) -> str:
        return f"datetime({unix_expr}, 'unixepoch')"


class PgSeed(SeedSql):
    engine = "postgresql"

    def pad12(self, expr: str) -> str:
        return f"lpad(CAST({expr} AS TEXT), 12, '0')"

    def numbers(self, lo: int, hi: int) -> tuple[str, str, str]:
        return "", f"generate_series({lo}, {hi}) AS g(n)", "g.n"

    def blob(self, expr: str) -> str:
        return f"convert_to({expr}, 'UTF8')"

    def param(self, name: str) -> str:
        return f"CAST(:{name} AS TEXT)"

    def timestamp(self, unix_expr: str) -> str:
        return f"(to_timestamp({unix_expr}) AT TIME ZONE 'UTC')"


class MariaSeed(SeedSql):
    engine = "mariadb"

    def cat(self, *parts: str) -> str:
        return f"CONCAT({', '.join(parts)})"

    def pad12(self, expr: str) -> str:
        return f"LPAD({expr}, 12, '0')"

    def numbers(self, lo: int, hi: int) -> tuple[str, str, str]:
        return "", f"seq_{lo}_to_{hi}", "seq"  # the Sequence engine (built in)

    def timestamp(self, unix_expr: str) -> str:
        return f"FROM_UNIXTIME({unix_expr})"


def _case(index: str, params: Sequence[str]) -> str:
    return f"CASE {index} " + " ".join(f"WHEN {n} THEN {p}" for n, p in enumerate(params)) + " END"


def _literals(values: Sequence[str]) -> list[str]:
    assert all(re.fullmatch(r"[a-z0-9_.]+", v) for v in values)
    return [f"'{v}'" for v in values]


@dataclass
class Seeder:
    """Set-based inserts of ``count`` rows, ``chunk`` a statement (each committed)."""

    sql: SeedSql
    db: Any  # sqlalchemy.Engine
    now: int
    chunk: int

    def _chunks(self, count: int) -> Iterator[tuple[int, int]]:
        for lo in range(0, count, self.chunk):
            yield lo, min(count, lo + self.chunk) - 1

    def _insert(
        self, count: int, build: Callable[[str, str], str], params: dict[str, Any], what: str
    ) -> None:
        import sqlalchemy as sa

        started = said = time.perf_counter()
        for lo, hi in self._chunks(count):
            with_clause, source, n = self.sql.numbers(lo, hi)
            statement = f"{with_clause}\n{build(source, n)}"
            with self.db.begin() as conn:
                conn.execute(sa.text(statement), params)
            if time.perf_counter() - said > 10 and hi + 1 < count:
                said = time.perf_counter()
                print(
                    f"  {what}: {hi + 1:,} of {count:,} rows ({said - started:.0f} s)", flush=True
                )
        print(f"  {what}: {count:,} rows in {time.perf_counter() - started:.1f} s", flush=True)

    def _numbered(self, source: str, n: str, tid_prefix: str) -> str:
        """The derived table every insert reads: i, q (queue index), k (kind), t (uuid)."""
        s = self.sql
        tid = s.cat(f"'{tid_prefix}'", s.pad12(n))
        return (
            f"(SELECT {n} AS i, {QUEUE_INDEX.format(i=n)} AS q, {KIND.format(i=n)} AS k, "
            f"{tid} AS t FROM {source}) AS x"
        )

    def askr_jobs(self, count: int) -> None:
        s, now = self.sql, self.now
        parts = [celery_parts(q, t) for q, t in zip(QUEUES, TASKS, strict=True)]
        params: dict[str, Any] = {"mid": parts[0][1]}
        params |= {f"h{n}": p[0] for n, p in enumerate(parts)}
        params |= {f"t{n}": p[2] for n, p in enumerate(parts)}
        head = _case("q", [s.param(f"h{n}") for n in range(len(parts))])
        tail = _case("q", [s.param(f"t{n}") for n in range(len(parts))])
        payload = s.blob(s.cat(head, "t", s.param("mid"), "t", tail))
        worker = s.cat("'celery@worker-'", "i % 8")
        instance = s.cat("'worker-'", "i % 8", "'.internal:'", "1000 + i % 8")

        def build(source: str, n: str) -> str:
            return f"""
            INSERT INTO askr_jobs (queue, payload, priority, available_at, reserved_until,
                                   attempts, max_attempts, created_at, reserved_token, uuid,
                                   reserved_by, reserved_instance)
            SELECT {_case("q", _literals(QUEUES))},
                   {payload},
                   CASE WHEN i % 10 = 0 THEN 3 ELSE 0 END,
                   CASE WHEN k = 1 THEN {now} + 30 + i % 7200 ELSE {now} - i % 3600 END,
                   CASE WHEN k = 2 THEN {now} + 60 + i % 1700
                        WHEN k = 3 THEN {now} - 5 - i % 600 END,
                   CASE WHEN k >= 2 THEN 1 WHEN i % 50 = 7 THEN 2 ELSE 0 END,
                   25,
                   {now} - i % 3600 - 1,
                   CASE WHEN k >= 2 THEN {s.cat("'tok-'", "i")} END,
                   t,
                   CASE WHEN k >= 2 THEN {worker} END,
                   CASE WHEN k >= 2 THEN {instance} END
              FROM {self._numbered(source, n, "3f2b8c1e-5a7d-4e9b-8c2f-")}
            """

        self._insert(count, build, params, "askr_jobs")

    def askr_failed(self, count: int) -> None:
        s, now = self.sql, self.now
        parts = [celery_parts(q, t) for q, t in zip(QUEUES, TASKS, strict=True)]
        params: dict[str, Any] = {"mid": parts[0][1]}
        params |= {f"h{n}": p[0] for n, p in enumerate(parts)}
        params |= {f"t{n}": p[2] for n, p in enumerate(parts)}
        params |= {f"e{n}": e for n, e in enumerate(PY_TRACEBACKS)}
        head = _case("q", [s.param(f"h{n}") for n in range(len(parts))])
        tail = _case("q", [s.param(f"t{n}") for n in range(len(parts))])
        payload = s.blob(s.cat(head, "t", s.param("mid"), "t", tail))
        errors = _case(f"i % {len(PY_TRACEBACKS)}", [s.param(f"e{n}") for n in range(4)])

        def build(source: str, n: str) -> str:
            return f"""
            INSERT INTO askr_failed_jobs (uuid, queue, payload, exception, attempts, failed_at)
            SELECT t,
                   CASE WHEN i % 10007 = 0 THEN '{RARE_FAILED_QUEUE}'
                        ELSE {_case("q", _literals(QUEUES))} END,
                   {payload},
                   {errors},
                   3 + i % 23,
                   {now} - ({count} - i) * 3
              FROM {self._numbered(source, n, "9d0c44a1-2b3e-4f5a-8e6d-")}
            """

        self._insert(count, build, params, "askr_failed_jobs")

    def laravel_jobs(self, count: int, table: str) -> None:
        s, now = self.sql, self.now
        parts = [laravel_parts(q, c) for q, c in zip(LARAVEL_QUEUES, LARAVEL_CLASSES, strict=True)]
        params: dict[str, Any] = {f"h{n}": p[0] for n, p in enumerate(parts)}
        params |= {f"t{n}": p[1] for n, p in enumerate(parts)}
        head = _case("q", [s.param(f"h{n}") for n in range(len(parts))])
        tail = _case("q", [s.param(f"t{n}") for n in range(len(parts))])
        payload = s.cat(head, "t", tail)

        def build(source: str, n: str) -> str:
            return f"""
            INSERT INTO {table} (queue, payload, attempts, reserved_at, available_at, created_at)
            SELECT {_case("q", _literals(LARAVEL_QUEUES))},
                   {payload},
                   CASE WHEN k >= 2 THEN 1 ELSE 0 END,
                   CASE WHEN k = 2 THEN {now} - i % 60 WHEN k = 3 THEN {now} - 3600 END,
                   CASE WHEN k = 1 THEN {now} + 30 + i % 7200 ELSE {now} - i % 3600 END,
                   {now} - i % 3600 - 1
              FROM {self._numbered(source, n, "7c1e9a20-6b4d-4c8e-9f01-")}
            """

        self._insert(count, build, params, table)

    def laravel_failed(self, count: int, table: str) -> None:
        s, now = self.sql, self.now
        parts = [laravel_parts(q, c) for q, c in zip(LARAVEL_QUEUES, LARAVEL_CLASSES, strict=True)]
        params: dict[str, Any] = {f"h{n}": p[0] for n, p in enumerate(parts)}
        params |= {f"t{n}": p[1] for n, p in enumerate(parts)}
        params |= {f"e{n}": e for n, e in enumerate(PHP_TRACES)}
        head = _case("q", [s.param(f"h{n}") for n in range(len(parts))])
        tail = _case("q", [s.param(f"t{n}") for n in range(len(parts))])
        payload = s.cat(head, "t", tail)
        errors = _case(f"i % {len(PHP_TRACES)}", [s.param(f"e{n}") for n in range(3)])

        def build(source: str, n: str) -> str:
            return f"""
            INSERT INTO {table} (uuid, connection, queue, payload, exception, failed_at)
            SELECT t, 'database',
                   CASE WHEN i % 10007 = 0 THEN '{RARE_FAILED_QUEUE}'
                        ELSE {_case("q", _literals(LARAVEL_QUEUES))} END,
                   {payload},
                   {errors},
                   {s.timestamp(f"{now} - ({count} - i) * 3")}
              FROM {self._numbered(source, n, "5e8f0b7d-1a2c-4d3e-8b9f-")}
            """

        self._insert(count, build, params, table)


def analyze(db: Any, engine: str, tables: Sequence[str]) -> float:
    """Fresh planner statistics (PostgreSQL: and the visibility map, as autovacuum would)."""
    started = time.perf_counter()
    with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in tables:
            if engine == "postgresql":
                conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
            elif engine == "mariadb":
                conn.exec_driver_sql(f"ANALYZE TABLE {table}").fetchall()
        if engine == "sqlite":
            conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - started


def table_bytes(db: Any, engine: str, tables: Sequence[str]) -> dict[str, int]:
    """Each table's size on disk with its indexes (SQLite: the whole file, under "*")."""
    found: dict[str, int] = {}
    with db.connect() as conn:
        for table in tables:
            if engine == "postgresql":
                found[table] = conn.exec_driver_sql(
                    f"SELECT pg_total_relation_size('{table}')"
                ).scalar_one()
            elif engine == "mariadb":
                found[table] = conn.exec_driver_sql(
                    "SELECT data_length + index_length FROM information_schema.tables "
                    f"WHERE table_schema = DATABASE() AND table_name = '{table}'"
                ).scalar_one()
        if engine == "sqlite":
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
            size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            found["*"] = int(pages) * int(size)
    return {k: int(v or 0) for k, v in found.items()}


# -- every statement the store runs, timed at the cursor --------------------------------------


@dataclass
class Statement:
    sql: str
    args: Any
    seconds: float


class Capture:
    """The statements run while :attr:`on` (one request at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: list[Statement] | None = None

    def start(self) -> None:
        with self.lock:
            self.found = []

    def stop(self) -> list[Statement]:
        with self.lock:
            found, self.found = self.found or [], None
        return found

    def add(self, sql: str, args: Any) -> Statement | None:
        # The dashboard's plot sampler (a thread of its own, started by the first /series
        # request: this script asks for none) is not the request's.
        if "sampler" in threading.current_thread().name:
            return None
        with self.lock:
            if self.found is None:
                return None
            entry = Statement(sql, args, 0.0)
            self.found.append(entry)
            return entry


CAPTURE = Capture()


class TimedCursor:
    """A DB-API cursor whose execute and fetches are timed into :data:`CAPTURE` (a fetch
    counts for the statement before it: SQLite steps a scan on fetch)."""

    def __init__(self, cursor: Any) -> None:
        object.__setattr__(self, "_cursor", cursor)
        object.__setattr__(self, "_last", None)

    def _timed(self, entry: Statement | None, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return call()
        finally:
            if entry is not None:
                entry.seconds += time.perf_counter() - started

    def execute(self, sql: Any, *rest: Any, **kw: Any) -> Any:
        entry = CAPTURE.add(str(sql), rest[0] if rest else kw.get("parameters"))
        object.__setattr__(self, "_last", entry)
        done = self._timed(entry, lambda: self._cursor.execute(sql, *rest, **kw))
        return self if done is self._cursor else done

    def executemany(self, sql: Any, *rest: Any, **kw: Any) -> Any:
        entry = CAPTURE.add(str(sql), None)
        object.__setattr__(self, "_last", entry)
        done = self._timed(entry, lambda: self._cursor.executemany(sql, *rest, **kw))
        return self if done is self._cursor else done

    def fetchone(self) -> Any:
        return self._timed(self._last, self._cursor.fetchone)

    def fetchmany(self, *a: Any, **kw: Any) -> Any:
        return self._timed(self._last, lambda: self._cursor.fetchmany(*a, **kw))

    def fetchall(self) -> Any:
        return self._timed(self._last, self._cursor.fetchall)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cursor, name, value)


def install_capture() -> None:
    """Every connection the store checks out from now on hands out a :class:`TimedCursor`."""
    from kombu_sqlqueue.store import executor

    original = executor.Executor._checkout
    if getattr(original, "_bench_timed", False):
        return

    def checkout(self: Any) -> tuple[Any, Any]:
        fairy, cursor = original(self)
        return fairy, cursor if isinstance(cursor, TimedCursor) else TimedCursor(cursor)

    checkout._bench_timed = True  # type: ignore[attr-defined]
    executor.Executor._checkout = checkout  # type: ignore[method-assign]


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def statement_names(admins: Sequence[Any], dialect: Any) -> dict[str, str]:
    """Normalized SQL → the ``Queries`` attribute it was compiled from (``queue_stats`` …),
    for the layouts' statements on ``dialect`` (best effort: from the admins' stores)."""
    import sqlalchemy as sa

    names: dict[str, str] = {}
    for admin in admins:
        store = getattr(admin, "_store", None)
        q = getattr(store, "q", None)
        if q is None:
            continue
        attrs = {**{k: getattr(q, k, None) for k in dir(type(q))}, **vars(q)}
        for name, stmt in attrs.items():
            if name.startswith("__") or not isinstance(stmt, sa.sql.expression.Executable):
                continue
            with contextlib.suppress(Exception):
                sql = _norm(stmt.compile(dialect=dialect).string)
                names.setdefault(sql, f"{getattr(admin, 'layout', '?')}.{name}")
    return names


def short_sql(sql: str, width: int = 70) -> str:
    text = _norm(sql)
    return text if len(text) <= width else text[: width - 1] + "…"


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Timed:
    """One page (or call) timed ``repeat`` times."""

    label: str
    path: str
    seconds: list[float] = field(default_factory=list)
    status: int = 200
    #: statement SQL → its seconds in each timed request (summed within one).
    statements: dict[str, list[float]] = field(default_factory=dict)
    #: statement SQL → the parameters it last ran with (for EXPLAIN).
    args: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def max(self) -> float:
        return max(self.seconds) if self.seconds else float("nan")

    def add(self, seconds: float, found: list[Statement]) -> None:
        self.seconds.append(seconds)
        per: dict[str, float] = {}
        for s in found:
            per[s.sql] = per.get(s.sql, 0.0) + s.seconds
            self.args[s.sql] = s.args
        for sql, spent in per.items():
            self.statements.setdefault(sql, []).append(spent)

    def sql_median(self) -> float:
        n = len(self.seconds)
        totals = [sum(v[i] for v in self.statements.values() if i < len(v)) for i in range(n)]
        return statistics.median(totals) if totals else 0.0

    def dominant(self) -> tuple[str, float] | None:
        if not self.statements:
            return None
        sql = max(self.statements, key=lambda k: sum(self.statements[k]))
        return sql, statistics.median(self.statements[sql])


def timed_calls(label: str, path: str, call: Callable[[], int], warmup: int, repeat: int) -> Timed:
    out = Timed(label, path)
    for _ in range(warmup):
        out.status = call()
    for _ in range(repeat):
        CAPTURE.start()
        started = time.perf_counter()
        try:
            out.status = call()
        finally:
            spent = time.perf_counter() - started
            found = CAPTURE.stop()
        out.add(spent, found)
    return out


def explain(db: Any, engine: str, sql: str, args: Any) -> list[str]:
    """The plan of ``sql`` run with ``args`` (as the store ran it, on a connection of our
    own): PostgreSQL EXPLAIN (ANALYZE, BUFFERS), MariaDB ANALYZE, SQLite EXPLAIN QUERY PLAN."""
    prefix = {
        "postgresql": "EXPLAIN (ANALYZE, BUFFERS) ",
        "mariadb": "ANALYZE ",
        "sqlite": "EXPLAIN QUERY PLAN ",
    }[engine]
    raw = db.raw_connection()
    try:
        cursor = raw.cursor()
        if args is None:
            cursor.execute(prefix + sql)
        else:
            cursor.execute(prefix + sql, args)
        rows = cursor.fetchall()
        names = [d[0] for d in cursor.description or ()]
        with contextlib.suppress(Exception):
            raw.rollback()
    except Exception as exc:
        return [f"(no plan: {type(exc).__name__}: {exc})"]
    finally:
        raw.close()
    if engine == "postgresql":
        return [str(r[0]) for r in rows]
    if engine == "sqlite":  # (id, parent, notused, detail)
        depth: dict[int, int] = {0: 0}
        lines = []
        for node, parent, _unused, detail in rows:
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * (depth[node] - 1) + str(detail))
        return lines
    keep = [
        "id", "select_type", "table", "type", "key", "key_len", "rows", "r_rows",
        "filtered", "r_filtered", "Extra",
    ]  # fmt: skip
    cols = [names.index(k) for k in keep if k in names]
    table = [[names[c] for c in cols], *[[str(r[c]) for c in cols] for r in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in table]


# -- one engine -----------------------------------------------------------------------------


class Server(Protocol):
    """What this script uses of ``tests/servers.Server``."""

    admin_url: str

    def create_database(self, name: str) -> str: ...

    def stop(self) -> None: ...


@dataclass
class EngineResult:
    engine: str
    jobs: int
    failed: int
    laravel_jobs: int
    laravel_failed: int
    seed_seconds: float
    analyze_seconds: float
    sizes: dict[str, int]
    pages: list[Timed]
    stats: list[Timed]
    names: dict[str, str]
    plans: dict[str, list[str]]
    failures: list[str]
    app_notes: list[str]


def seed(url: str, engine: str, args: argparse.Namespace, now: int) -> tuple[float, float, Any]:
    """Create the tables and fill them; (seed seconds, analyze seconds, the SQLAlchemy engine)."""
    import sqlalchemy as sa

    from kombu_sqlqueue.store import JobStore, StoreOptions, parse_store_url
    from kombu_sqlqueue.store.layouts import LayoutSettings, table_layout

    store = JobStore(url, StoreOptions(create_tables=True))
    try:
        store.create_schema()
    finally:
        store.close()
    if args.laravel:
        print("  " + table_layout("laravel").create_tables(url, LayoutSettings()))
    _cls, driver_url = parse_store_url(url)
    db = sa.create_engine(driver_url)
    if engine == "sqlite":

        @sa.event.listens_for(db, "connect")
        def _fast(dbapi: Any, _record: Any) -> None:
            dbapi.execute("PRAGMA synchronous = OFF")

    seeder = Seeder(SeedSql.for_engine(engine), db, now, args.chunk)
    started = time.perf_counter()
    seeder.askr_jobs(args.jobs)
    seeder.askr_failed(args.failed)
    tables = ["askr_jobs", "askr_failed_jobs"]
    if args.laravel:
        seeder.laravel_jobs(args.laravel_jobs, "jobs")
        seeder.laravel_failed(args.laravel_failed, "failed_jobs")
        tables += ["jobs", "failed_jobs"]
        if args.laravel_index:  # what docs/dashboard.md "Large tables" suggests
            with db.begin() as conn:
                conn.exec_driver_sql(
                    "CREATE INDEX jobs_queue_reserved_available"
                    " ON jobs (queue, reserved_at, available_at)"
                )
    seeded = time.perf_counter() - started
    analyzed = analyze(db, engine, tables)
    print(f"  seeded in {seeded:.1f} s, ANALYZE in {analyzed:.1f} s", flush=True)
    return seeded, analyzed, db


@dataclass(frozen=True)
class Picked:
    """Rows the pages name: a dead letter in the middle of the failed table (id, uuid),
    and a waiting job of the big queue."""

    failed_id: int
    failed_uuid: str
    job_id: int


def pick(db: Any, jobs_table: str, failed_table: str, big: str) -> Picked:
    with db.connect() as conn:
        lo, hi = conn.exec_driver_sql(f"SELECT min(id), max(id) FROM {failed_table}").one()
        mid = (int(lo) + int(hi)) // 2
        row = conn.exec_driver_sql(
            f"SELECT id, uuid FROM {failed_table} WHERE id >= {mid} ORDER BY id LIMIT 1"
        ).one()
        job = conn.exec_driver_sql(
            f"SELECT max(id) FROM {jobs_table} WHERE queue = '{big}'"
        ).scalar_one()
    return Picked(int(row[0]), str(row[1]), int(job))


def pages_of(layout: str, big: str, small: str, picked: Picked, routes: set[str]) -> list[tuple]:
    """The pages of one layout an operator opens (those of the routes the app has)."""
    pages = [
        ("queue page, big queue", f"/queue?layout={layout}&name={big}"),
        ("queue page, small queue", f"/queue?layout={layout}&name={small}"),
        ("job page", f"/job?layout={layout}&name={big}&id={picked.job_id}"),
        ("failed list", f"/failed/{layout}"),
        ("failed list, big queue", f"/failed/{layout}?queue={big}"),
        ("failed list, rare queue", f"/failed/{layout}?queue={RARE_FAILED_QUEUE}"),
        # A search reads (and decodes) rows until a page is found: a common term, a missing one.
        ("failed search, common term", f"/failed/{layout}?search=Error"),
        ("failed search, no match", f"/failed/{layout}?search=NoSuchThing"),
        ("failed job by id", f"/failed/{layout}/{picked.failed_id}"),
        ("failed job by uuid", f"/failed/{layout}/{picked.failed_uuid}"),
    ]
    return [(label, path) for label, path in pages if path.split("?")[0].split("/")[1] in routes]


def app_notes() -> list[str]:
    """What the dashboard's handlers (as they are in this tree) pass for pagination."""
    source = (
        Path(importlib.import_module("kombu_sqlqueue.dashboard.app").__file__ or "")
    ).read_text()
    notes = []
    failed_call = re.search(r"admin\.failed\(([^)]*)\)", source)
    if failed_call:
        notes.append(f"failed page calls admin.failed({failed_call.group(1)})")
    peek_call = re.search(r"admin\.peek\(([^)]*)\)", source)
    if peek_call:
        notes.append(f"queue page calls admin.peek({peek_call.group(1)})")
    if "admin.stats()" in source:
        notes.append("queue page calls admin.stats() (every queue's figures) for one queue")
    if re.search(r"\bOFFSET\b|offset=", source):
        notes.append("the app mentions OFFSET")
    return notes


def run_engine(engine: str, url: str, args: argparse.Namespace) -> EngineResult:
    from starlette.testclient import TestClient

    from kombu_sqlqueue.dashboard import create_app
    from kombu_sqlqueue.ops.connect import open_admin

    now = int(time.time())
    print(f"== {engine}: seeding {args.jobs:,} jobs, {args.failed:,} failed ==", flush=True)
    seeded, analyzed, db = seed(url, engine, args, now)
    tables = ["askr_jobs", "askr_failed_jobs"] + (["jobs", "failed_jobs"] if args.laravel else [])
    sizes = table_bytes(db, engine, tables)
    failures: list[str] = []

    install_capture()
    app = create_app("sqlqueue+" + url)
    # The first segment of every route's path: pages of routes this tree lacks are skipped.
    routes = {str(getattr(r, "path", "/x")).split("/")[1] for r in app.routes}
    pages: list[Timed] = []
    with TestClient(app, base_url="http://127.0.0.1") as client:

        def get(path: str) -> Callable[[], int]:
            def call() -> int:
                response = client.get(path)
                said = re.search(r'class="banner" role="alert">([^<]{0,300})', response.text)
                if (response.status_code != 200 or said) and len(failures) < 20:
                    # A read that failed (a timeout …) is a banner on a page answered 200.
                    why = f": {html.unescape(said.group(1)).strip()}" if said else ""
                    failures.append(f"{engine} GET {path}: {response.status_code}{why}")
                return response.status_code

            return call

        plan = [("overview", "/"), ("overview refresh (htmx)", "/fragments/overview")]
        picked = pick(db, "askr_jobs", "askr_failed_jobs", QUEUES[0])
        plan += pages_of("askr", QUEUES[0], QUEUES[-1], picked, routes)
        if args.laravel:
            picked = pick(db, "jobs", "failed_jobs", LARAVEL_QUEUES[0])
            plan += [
                (f"laravel: {label}", path)
                for label, path in pages_of(
                    "laravel", LARAVEL_QUEUES[0], LARAVEL_QUEUES[-1], picked, routes
                )
            ]
        for label, path in plan:
            timed = timed_calls(label, path, get(path), args.warmup, args.repeat)
            pages.append(timed)
            mark = "  <-- over 1 s" if timed.median > BOUND else ""
            print(
                f"  {label:34} {timed.median:7.3f} s median, {timed.max:7.3f} s max "
                f"[{timed.status}]{mark}",
                flush=True,
            )

    # The admin's reads alone: stats() (what the overview calls per layout), holders()
    # (the overview's and the CLI's "held by": after a stats() of its own, timed with
    # it), issued() (what the plots' sampler adds to stats() every 5 s).
    stats: list[Timed] = []
    admins = []
    for layout in ["askr", *(["laravel"] if args.laravel else [])]:
        admin = open_admin("sqlqueue+" + url, layout)
        admins.append(admin)
        for verb in ("stats", "holders", "issued"):
            if not callable(getattr(admin, verb, None)):
                continue

            def call(admin: Any = admin, verb: str = verb) -> int:
                if verb == "holders":  # of the queues stats says hold jobs, as pages ask
                    from kombu_sqlqueue.store.admin import held_queues

                    admin.holders(held_queues(admin.stats()))
                else:
                    getattr(admin, verb)()
                return 200

            label = f"QueueAdmin.{verb}() [{layout}]"
            timed = timed_calls(label, "-", call, args.warmup, args.repeat)
            stats.append(timed)
            print(f"  {timed.label:34} {timed.median:7.3f} s median, {timed.max:7.3f} s max")
    names = statement_names(admins, db.dialect)
    for admin in admins:
        admin.close()

    # The plans of the statements slower than --explain-over, and of the slowest page's
    # dominant one.
    wanted: dict[str, Any] = {}
    slowest = max(pages, key=lambda t: t.median)
    dom = slowest.dominant()
    if dom:
        wanted[dom[0]] = slowest.args.get(dom[0])
    for timed in [*pages, *stats]:
        for sql, spent in timed.statements.items():
            if statistics.median(spent) > args.explain_over:
                wanted.setdefault(sql, timed.args.get(sql))
    plans = {sql: explain(db, engine, sql, a) for sql, a in wanted.items()}
    db.dispose()
    return EngineResult(
        engine, args.jobs, args.failed,
        args.laravel_jobs if args.laravel else 0, args.laravel_failed if args.laravel else 0,
        seeded, analyzed, sizes, pages, stats, names, plans, failures, app_notes(),
    )  # fmt: skip


# -- the report -----------------------------------------------------------------------------


def name_of(sql: str, names: dict[str, str]) -> str:
    found = names.get(_norm(sql))
    return found if found else short_sql(sql, 60)


def report(results: list[EngineResult]) -> None:
    print()
    print(f"# Dashboard on a large database — code {code_version()}")
    for r in results:
        sizes = ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in r.sizes.items())
        print()
        print(
            f"## {r.engine}: {r.jobs:,} jobs + {r.failed:,} failed"
            + (f"; Laravel {r.laravel_jobs:,} + {r.laravel_failed:,}" if r.laravel_jobs else "")
            + f" (seeded {r.seed_seconds:.0f} s, analyze {r.analyze_seconds:.0f} s; {sizes})"
        )
        head = f"{'request':34} {'median':>7} {'max':>7}  {'sql':>4}  dominant statement (median)"
        print(head)
        print("-" * len(head))
        for t in [*r.pages, *r.stats]:
            share = t.sql_median() / t.median if t.median else 0.0
            dom = t.dominant()
            what = f"{name_of(dom[0], r.names)} ({dom[1]:.3f} s)" if dom else "-"
            flag = "!" if t.median > BOUND or t.max > BOUND else " "
            status = "" if t.status == 200 else f" [HTTP {t.status}]"
            print(f"{t.label:34} {t.median:7.3f} {t.max:7.3f}{flag} {share:4.0%}  {what}{status}")
        for sql, lines in r.plans.items():
            users = [
                f"{t.label} {statistics.median(t.statements[sql]):.3f} s"
                for t in [*r.pages, *r.stats]
                if sql in t.statements
            ]
            print()
            print(f"### {r.engine}: plan of {name_of(sql, r.names)}")
            print(f"    run by: {'; '.join(users)}")
            print("    " + short_sql(sql, 300))
            for line in lines:
                print("    " + line)
        for note in r.app_notes:
            print(f"note: {note}")
        for failure in r.failures:
            print(f"FAILED: {failure}")
    print()
    print("! = median or max over 1 s; sql = share of the request spent in SQL (median)")


def result_json(r: EngineResult) -> dict[str, Any]:
    out = asdict(r)
    for key in ("pages", "stats"):
        out[key] = [
            {
                "label": t.label,
                "path": t.path,
                "status": t.status,
                "median": t.median,
                "max": t.max,
                "seconds": t.seconds,
                "statements": {
                    name_of(sql, r.names): statistics.median(v) for sql, v in t.statements.items()
                },
            }
            for t in getattr(r, key)
        ]
    out["plans"] = {name_of(sql, r.names): lines for sql, lines in r.plans.items()}
    out.pop("names")
    return out


# -- main -----------------------------------------------------------------------------------


@contextlib.contextmanager
def database_urls(engines: Sequence[str], workdir: Path, args: argparse.Namespace) -> Iterator[Any]:
    """``url(engine)``: a fresh database on each engine (servers started here)."""
    started: dict[str, Server] = {}
    try:
        servers = importlib.import_module("servers")

        def url(engine: str) -> str:
            if engine == "sqlite":
                return f"sqlite:///{workdir / 'dashboard.db'}"
            if engine not in started:
                print(f"starting {engine} ...", flush=True)
                started[engine] = servers.STARTERS[STARTER[engine]]()
                if engine == "mariadb" and args.innodb_buffer_pool_mb:
                    import sqlalchemy as sa

                    admin = sa.create_engine(started[engine].admin_url)
                    with admin.connect() as conn:
                        size = args.innodb_buffer_pool_mb * 2**20
                        conn.exec_driver_sql(f"SET GLOBAL innodb_buffer_pool_size = {size}")
                    admin.dispose()
            return started[engine].create_database("dashboard")

        yield url
    finally:
        for server in started.values():
            with contextlib.suppress(Exception):
                server.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)

    def engine_list(text: str) -> list[str]:
        names = [ALIASES.get(e.strip(), e.strip()) for e in text.split(",") if e.strip()]
        unknown = [e for e in names if e not in ENGINES]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown engine(s) {unknown}: of {ENGINES}")
        return names

    p.add_argument(
        "--engines", type=engine_list, default=list(ENGINES),
        help="comma-separated, of: " + ",".join(ENGINES),
    )  # fmt: skip
    p.add_argument("--jobs", type=int, default=1_000_000, help="rows in askr_jobs")
    p.add_argument("--failed", type=int, default=100_000, help="rows in askr_failed_jobs")
    p.add_argument("--laravel", action="store_true", help="seed Laravel's jobs/failed_jobs too")
    p.add_argument(
        "--laravel-index", action="store_true",
        help="with --laravel: add the covering index jobs (queue, reserved_at, available_at)",
    )  # fmt: skip
    p.add_argument("--laravel-jobs", type=int, default=None, help="[default: --jobs]")
    p.add_argument("--laravel-failed", type=int, default=None, help="[default: --failed]")
    p.add_argument("--chunk", type=int, default=100_000, help="rows per INSERT … SELECT")
    p.add_argument("--repeat", type=int, default=5, help="timed requests per page")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests per page first")
    p.add_argument(
        "--explain-over", type=float, default=0.1,
        help="print the plan of every statement slower than this (s, median)",
    )  # fmt: skip
    p.add_argument(
        "--innodb-buffer-pool-mb", type=int, default=0,
        help="resize MariaDB's buffer pool (0: tests/servers.py's 256M)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, help="write the results here too")
    args = p.parse_args(argv)
    if args.laravel_jobs is None:
        args.laravel_jobs = args.jobs
    if args.laravel_failed is None:
        args.laravel_failed = args.failed
    if min(args.jobs, args.failed, args.repeat) < 1:
        p.error("--jobs, --failed and --repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    results: list[EngineResult] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp,
        database_urls(args.engines, Path(tmp), args) as url,
    ):
        for engine in args.engines:
            results.append(run_engine(engine, url(engine), args))
    report(results)
    if args.json:
        args.json.write_text(json.dumps([result_json(r) for r in results], indent=2))
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
