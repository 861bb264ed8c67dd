"""Runs the PHP harness (real Illuminate components) for the Laravel interop tests."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from laravel_support import APP_KEY
from sqlalchemy.engine import make_url

from laravel_bridge import PhpEnum, PhpObject
from laravel_bridge.payload import CARBON_CLASSES

HARNESS = Path(__file__).resolve().parent / "php" / "harness.php"
#: The PDO driver PHP needs for each engine of tests/conftest.py.
PDO_DRIVERS = {"sqlite": "sqlite", "postgresql": "pgsql", "mysql": "mysql"}


@dataclass
class Laravel:
    """Runs ``tests/e2e_laravel/php/harness.php`` with the real Illuminate components."""

    php: str
    workdir: Path

    def run(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [self.php, str(HARNESS), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"harness {args[0]} failed: {done.stderr or done.stdout}")
        return done.stdout

    def dispatch(self) -> dict[str, dict[str, Any]]:
        db = self.workdir / "laravel.db"
        db.touch()
        out = self.run("dispatch", str(db), APP_KEY)
        return {row["case"]: row for row in map(json.loads, out.splitlines())}

    def queue(self, db_url: str, log: Path | None = None) -> LaravelQueueHarness:
        """Laravel's real queue (``php/queue_harness.php``) on the database at ``db_url``."""
        return LaravelQueueHarness(self.php, db_url, log or self.workdir / "runs.jsonl")


QUEUE_HARNESS = Path(__file__).resolve().parent / "php" / "queue_harness.php"

#: A ``work`` status line as WorkCommand::writeStatus prints it (without the console tags).
STATUS_LINE = re.compile(
    r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\[(?P<id>\d+)\] "
    r"(?P<status>Processing|Processed|Failed): +(?P<name>.+)$"
)

_DRIVERS = {"sqlite": "sqlite", "postgresql": "pgsql", "mysql": "mysql", "mariadb": "mysql"}
_DEFAULT_PORTS = {"pgsql": 5432, "mysql": 3306}


def laravel_connection(sqlalchemy_url: str) -> dict[str, Any]:
    """The CONN object ``queue_harness.php`` takes (a Laravel ``database.connections`` entry).

    ``sqlite:///relative.db`` (made absolute), ``sqlite:////abs.db``, ``postgresql[+driver]://``
    and ``mysql[+driver]://`` / ``mariadb[+driver]://``; default ports; empty password.
    """
    url = make_url(sqlalchemy_url)
    backend = url.get_backend_name()
    driver = _DRIVERS.get(backend)
    if driver is None:
        raise ValueError(f"no Laravel driver for {backend!r} ({sqlalchemy_url})")
    if driver == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("the PHP and Python processes need a SQLite file, not :memory:")
        return {"driver": "sqlite", "database": os.path.abspath(url.database)}
    conn: dict[str, Any] = {
        "driver": driver,
        "host": url.host or "127.0.0.1",
        "port": url.port or _DEFAULT_PORTS[driver],
        "database": url.database or "",
        "username": url.username or "",
        "password": url.password or "",
    }
    charset = url.query.get("charset")
    if isinstance(charset, str):
        conn["charset"] = charset
    return conn


@dataclass
class WorkResult:
    """What one ``queue_harness.php work`` run printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def statuses(self) -> list[dict[str, Any]]:
        """The status lines: ``{"time", "id" (int), "status", "name"}``, in order."""
        return parse_status_lines(self.stdout)


def parse_status_lines(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.split("\n"):
        m = STATUS_LINE.match(line)
        if m:
            found.append({**m.groupdict(), "id": int(m["id"])})
    return found


@dataclass
class LaravelQueueHarness:
    """Laravel 8.83's real queue (dispatcher, DatabaseQueue, Worker, failer) on one database.

    ``log`` is the ``QUEUE_HARNESS_LOG`` file every PHP job's ``handle()`` appends a line to.
    """

    php: str
    db_url: str
    log: Path
    app_key: str = APP_KEY
    timeout: float = 60

    @property
    def conn(self) -> dict[str, Any]:
        return laravel_connection(self.db_url)

    def command(self, *args: str, with_key: bool = False) -> list[str]:
        key = [self.app_key] if with_key else []
        return [self.php, str(QUEUE_HARNESS), args[0], json.dumps(self.conn), *key, *args[1:]]

    def env(self) -> dict[str, str]:
        return {**os.environ, "QUEUE_HARNESS_LOG": str(self.log)}

    def run(
        self, *args: str, with_key: bool = False, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args, with_key=with_key),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            env=self.env(),
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"queue_harness {args[0]} exited {done.returncode}: {done.stderr or done.stdout}"
            )
        return done

    def json_lines(self, *args: str, with_key: bool = False, stdin: str | None = None) -> list[Any]:
        out = self.run(*args, with_key=with_key, stdin=stdin).stdout
        return [json.loads(line) for line in out.split("\n") if line.strip()]

    def migrate(self) -> None:
        """Create ``jobs``, ``failed_jobs`` (Laravel 8.83's stubs) and ``users``; idempotent."""
        self.run("migrate")

    def info(self) -> dict[str, Any]:
        """``{"driver", "server_version", "lock_for_popping"}`` of DatabaseQueue here."""
        return dict(self.json_lines("info")[0])

    def dispatch(self, *cases: str) -> dict[str, dict[str, Any]]:
        """Dispatch cases from ``php/jobs.php`` (default: every ``worker_cases()`` case).

        Per case: ``{"case", "id", "uuid", "queue", "payload", "class", "props", "available_at",
        "created_at"}``, in dispatch order.
        """
        return {row["case"]: row for row in self.dispatch_rows(*cases)}

    def dispatch_rows(self, *cases: str) -> list[dict[str, Any]]:
        """Like ``dispatch`` but one row per dispatch (a case may be named several times)."""
        return self.json_lines("dispatch", *cases, with_key=True)

    def queue_things(self, *cases: str) -> dict[str, dict[str, Any]]:
        """Queue what a Laravel app queues besides jobs, through Laravel's own calls
        (``php/things.php``: ``listener``, ``mailable``, ``notification``, ``closure``; default
        all). Per case: ``{"case", "id", "uuid", "queue", "payload"}``."""
        return {row["case"]: row for row in self.json_lines("queue-things", *cases, with_key=True)}

    def batch(self, *labels: str, allow_failures: bool = False) -> dict[str, Any]:
        """``Bus::batch()`` of ``App\\Things\\BatchStep(label)`` jobs with then/catch/finally
        callbacks that log ``batch-then`` … lines: ``{"batch_id", "ids"}``."""
        flag = ["--allow-failures"] if allow_failures else []
        return dict(self.json_lines("batch", *flag, *labels, with_key=True)[0])

    def dispatch_unique(self, class_name: str, arg: str) -> bool:
        """``dispatch(new App\\Things\\<class_name>(arg))`` of a ``ShouldBeUnique`` job with the
        database cache store (lock in ``cache_locks``); True if it was queued, False if
        Laravel dropped it because its unique lock is held."""
        row = self.json_lines("dispatch-unique", class_name, arg, with_key=True)[0]
        return bool(row["dispatched"])

    def queue_pause(self, verb: str, queue: str, ttl: int | None = None) -> bool:
        """Laravel 12.40+'s ``QueueManager`` ``pause`` / ``pause-for`` (``ttl`` seconds) /
        ``resume`` / ``is-paused`` of ``queue`` of the ``database`` connection, on the
        database cache store; whether ``isPaused()`` says it is paused after."""
        extra = [] if ttl is None else [str(ttl)]
        return bool(self.json_lines("queue-pause", verb, "database", queue, *extra)[0]["paused"])

    def work_args(
        self,
        *,
        queue: str | list[str] | None = None,
        once: bool = False,
        stop_when_empty: bool = False,
        tries: int | None = None,
        backoff: int | None = None,
        timeout: int | None = None,
        sleep: float | None = 0,
        max_jobs: int | None = None,
        max_time: int | None = None,
        rest: float | None = None,
    ) -> list[str]:
        args = []
        if queue is not None:
            args.append("--queue=" + (queue if isinstance(queue, str) else ",".join(queue)))
        if once:
            args.append("--once")
        if stop_when_empty:
            args.append("--stop-when-empty")
        for name, value in [
            ("tries", tries),
            ("backoff", backoff),
            ("timeout", timeout),
            ("sleep", sleep),
            ("max-jobs", max_jobs),
            ("max-time", max_time),
            ("rest", rest),
        ]:
            if value is not None:
                args.append(f"--{name}={value}")
        return args

    def work(
        self,
        *,
        queue: str | list[str] | None = None,
        once: bool = False,
        stop_when_empty: bool = True,
        tries: int | None = None,
        backoff: int | None = None,
        timeout: int | None = None,
        sleep: float | None = 0,
        max_jobs: int | None = None,
        max_time: int | None = None,
        process_timeout: float | None = None,
    ) -> WorkResult:
        """``php artisan queue:work database …`` until it exits (``--stop-when-empty`` by default).

        ``sleep`` defaults to 0 (WorkCommand's default, 3, only slows the empty-queue exit).
        A non-zero exit is returned, not raised: a job past its timeout SIGKILLs the worker.
        """
        args = self.work_args(
            queue=queue,
            once=once,
            stop_when_empty=stop_when_empty and not once,
            tries=tries,
            backoff=backoff,
            timeout=timeout,
            sleep=sleep,
            max_jobs=max_jobs,
            max_time=max_time,
        )
        done = subprocess.run(
            self.command("work", *args, with_key=True),
            capture_output=True,
            text=True,
            timeout=process_timeout or self.timeout,
            env=self.env(),
            check=False,
        )
        return WorkResult(done.returncode, done.stdout, done.stderr)

    def start_work(self, output: Path | None = None, **options: Any) -> subprocess.Popen[str]:
        """Start ``work`` in the background (same options as ``work_args``; stdout/stderr piped,
        or stdout to the file ``output``: a worker that prints more than a pipe holds blocks
        until someone reads it, and is killed by its own timeout alarm).

        Stop it with ``proc.send_signal(signal.SIGTERM)`` (the Worker finishes its current job
        and exits 0), then ``proc.communicate()``; ``parse_status_lines`` reads its stdout.
        """
        stdout: Any = subprocess.PIPE if output is None else output.open("w")
        try:
            return subprocess.Popen(
                self.command("work", *self.work_args(**options), with_key=True),
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                env=self.env(),
            )
        finally:
            if output is not None:
                stdout.close()  # the child has its own copy

    def retry(self, *uuids: str) -> list[dict[str, Any]]:
        """``php artisan queue:retry UUID…`` (or ``"all"``): per id ``{"uuid", "retried", …}``."""
        return self.json_lines("retry", *uuids, with_key=True)

    def failed(self) -> list[dict[str, Any]]:
        """``queue:failed``, newest first: ``{"uuid", "connection", "queue", "class", "failed_at",
        "exception" (first line), "payload"}``."""
        return self.json_lines("failed")

    def push_raw(self, payload: str, queue: str | None = None) -> int:
        """``Queue::connection('database')->pushRaw($payload, $queue)``; the new jobs row id."""
        args = ["push-raw"] if queue is None else ["push-raw", queue]
        return int(self.json_lines(*args, stdin=payload)[0]["id"])

    def runs(self) -> list[dict[str, Any]]:
        """Every line the jobs' ``handle()`` logged (both runners, if they share the file)."""
        if not self.log.exists():
            return []
        text = self.log.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.split("\n") if line.strip()]


# -- the cases of php/jobs.php, as a job's handle() logs them --------------------

STATUS = {"enum": "App\\Jobs\\Status", "value": "paid"}
OPEN = {"enum": "App\\Jobs\\Status", "value": "open"}

#: case → (class, queue, props) of every ``worker_cases()`` case in ``php/jobs.php``.
WORKER_CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "scalars": (
        "App\\Jobs\\Scalars",
        "default",
        {
            "count": 42,
            "negative": -7,
            "big": 9223372036854775807,
            "name": "plain ascii",
            "empty": "",
            "yes": True,
            "no": False,
            "nothing": None,
        },
    ),
    "unicode": (
        "App\\Jobs\\Unicode",
        "default",
        {
            "text": 'Zoë Ünïcode — 日本語 "quoted" back\\slash /slash',
            "emoji": "😀👍🏽",
            "separators": "line\u2028para\u2029tab\tnewline\n",
        },
    ),
    "floats": (
        "App\\Jobs\\Floats",
        "default",
        {"tenth": 0.1, "tiny": 1e-7, "huge": 1.5e300, "whole": 2.0, "negativeZero": -0.0},
    ),
    "nested": (
        "App\\Jobs\\Nested",
        "default",
        {
            "list": [1, "two", 3.5, True, None, [4, [5, 6]], []],
            "map": {
                "name": "x",
                "inner": {"a": 1, "b": [1, 2], "c": {"deep": {"deeper": "yes"}}},
                "empty": [],
                "ключ": "значение",
            },
        },
    ),
    "dates": (
        "App\\Jobs\\Dates",
        "default",
        {
            "at": "Carbon\\Carbon 2024-05-06 07:08:09.123456 Europe/Paris",
            "since": "Carbon\\CarbonImmutable 2025-01-02 03:04:05.000000 UTC",
            "offset": "Carbon\\CarbonImmutable 2023-12-31 23:59:59.000000 +05:30",
            "never": None,
        },
    ),
    "enums": (
        "App\\Jobs\\Enums",
        "default",
        {"status": STATUS, "statuses": [OPEN, STATUS, OPEN], "maybe": None},
    ),
    "promoted": (
        "App\\Jobs\\Promoted",
        "default",
        {
            "plain": "class body",
            "visible": "shown",
            "guarded": "protected value",
            "secret": {"k": "v", "n": 1},
            "count": 3,
        },
    ),
    "delayed_2s": ("App\\Jobs\\Ping", "default", {"label": "after 2 s"}),
    "named_queue": ("App\\Jobs\\Ping", "emails", {"label": "on emails"}),
    "tuned": (
        "App\\Jobs\\Tuned",
        "default",
        {
            "tries": 4,
            "backoff": [2, 4, 8],
            "timeout": 30,
            "maxExceptions": 3,
            "failOnTimeout": True,
            "label": "knobs",
        },
    ),
    "chain": ("App\\Jobs\\ChainStep", "default", {"step": "first", "position": 1}),
    "secret": (
        "App\\Jobs\\SecretWork",
        "default",
        {"token": "t0k3n", "meta": {"scope": "billing"}},
    ),
}

#: The jobs the "chain" case's first job dispatches when it succeeds: (queue, props).
CHAINED = [
    ("default", {"step": "second", "position": 2}),
    ("emails", {"step": "third", "position": 3}),
]


def same(a: Any, b: Any) -> bool:
    """Equal with the same JSON types all the way down (2 ≠ 2.0, True ≠ 1, -0.0 ≠ 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


ENUM_VALUES = {"Paid": "paid", "Open": "open"}  # App\Jobs\Status's backing values


def php_shape(python: Any, raw: Any) -> Any:
    """A Python property value in the harness log's JSON shape (``harness_value`` in jobs.php).

    ``raw`` is the same value as decoded PHP, for what Python's view drops (which Carbon class).
    """
    if isinstance(raw, PhpObject) and raw.class_name in CARBON_CLASSES:
        assert isinstance(python, datetime) and python.tzinfo is not None
        tz = python.tzinfo
        if isinstance(tz, ZoneInfo):
            label = tz.key
        elif tz is UTC:
            label = "UTC"
        else:
            minutes = int((python.utcoffset() or timedelta()).total_seconds() // 60)
            label = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        return f"{raw.class_name} {python.strftime('%Y-%m-%d %H:%M:%S.%f')} {label}"
    if isinstance(python, PhpEnum):
        return {"enum": python.class_name, "value": ENUM_VALUES[python.case]}
    if isinstance(python, list):
        return [php_shape(p, r) for p, r in zip(python, raw, strict=True)]
    if isinstance(python, dict):
        return {k: php_shape(python[k], raw[k]) for k in python}
    return python
