"""Process harness for the e2e tests: real subprocesses, bounded waits, no leaks.

Every process a test starts goes through the ``spawn`` fixture (conftest.py): it runs in its
own session (so ``os.killpg`` reaches a Celery worker's pool children too),
writes stdout and stderr to files under ``tmp_path``, and is SIGCONTed,
SIGKILLed and reaped at teardown whatever the test did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

E2E_DIR = Path(__file__).resolve().parent
APPS_DIR = E2E_DIR / "apps"
CONSUMER = str(APPS_DIR / "consumer.py")
PRODUCER = str(APPS_DIR / "producer.py")


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


class Proc:
    """A subprocess with its output in files."""

    def __init__(self, name: str, args: Sequence[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.args = list(args)
        self.stdout_path = workdir / f"{name}.out"
        self.stderr_path = workdir / f"{name}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(E2E_DIR),
                env=env,
                start_new_session=True,
            )
        self.pid = self.popen.pid

    # -- output -------------------------------------------------------------------

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """The JSON event lines this process printed (complete lines only)."""
        found = []
        for line in self.stdout.splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:  # a line still being written
                continue
            if event is None or record.get("event") == event:
                found.append(record)
        return found

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            got = self.events(event)
            if got:
                return got[0]
            if self.popen.poll() is not None:
                pytest.fail(
                    f"{self.name} exited ({self.popen.returncode}) before {event!r}:\n"
                    f"{self.output[-4000:]}"
                )
            return None

        return wait_until(check, timeout, what=f"{self.name}: {event!r}")  # type: ignore[no-any-return]

    def wait_text(self, text: str, timeout: float) -> None:
        wait_until(lambda: text in self.output, timeout, what=f"{self.name}: {text!r}")

    # -- lifecycle ----------------------------------------------------------------

    def wait(self, timeout: float) -> int:
        """Wait (bounded) for the process to exit; fail the test if it does not."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit within {timeout}s:\n{self.output[-4000:]}")

    def send_signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a Celery worker and its pool children)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def destroy(self) -> None:
        self.kill_group(signal.SIGCONT)
        self.kill_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def consumer_args(broker_url: str, queue: str, mode: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        CONSUMER,
        "--broker",
        broker_url,
        "--queue",
        queue,
        "--mode",
        mode,
        *extra,
    ]


def producer_args(broker_url: str, queue: str, count: int, prefix: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        PRODUCER,
        "--broker",
        broker_url,
        "--queue",
        queue,
        "--count",
        str(count),
        "--prefix",
        prefix,
        *extra,
    ]


def db_path(db_url: str) -> str:
    assert db_url.startswith("sqlite:///"), db_url
    return db_url[len("sqlite:///") :]


def sql(db_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one read query (``?`` placeholders) on the test database, outside the store."""
    if db_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(db_path(db_url), timeout=30)) as conn:
            return conn.execute(query, params).fetchall()
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    from kombu_sqlqueue.store import parse_store_url

    engine = sa.create_engine(parse_store_url(db_url)[1], poolclass=NullPool)
    try:
        with engine.connect() as conn:
            result = conn.exec_driver_sql(query.replace("?", "%s"), params)
            return [tuple(r) for r in result]
    finally:
        engine.dispose()


#: The transport's visibility timeout of the e2e Celery app's ``app`` fixture (seconds).
E2E_VISIBILITY = 2


def task_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines the e2e Celery app's tasks appended to ``E2E_OUT`` (none yet: [])."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def task_events(path: Path, event: str = "ran") -> list[dict[str, Any]]:
    """The lines of one event (``started``, ``ran``)."""
    return [r for r in task_lines(path) if r["event"] == event]


def celery_worker_args(
    node: str,
    *options: str,
    app: str = "apps.celery_app",
    pool: str = "prefork",
    concurrency: int = 2,
) -> list[str]:
    """The command line of a ``celery worker`` of one of the e2e apps: ``pool`` (two
    children by default; the solo pool has none), log level info, node name ``node@%h``,
    then ``options`` (``-Q``, ``--without-gossip``…)."""
    children = [] if pool == "solo" else ["-c", str(concurrency)]
    return [
        sys.executable, "-m", "celery", "-A", app, "worker",
        f"--pool={pool}", *children, "-l", "info", "-n", f"{node}@%h", *options,
    ]  # fmt: skip


def written_ids(path: Path) -> list[str]:
    """The ids a producer or worker wrote to ``path``, one per line or space ([] if none)."""
    return path.read_text().split() if path.exists() else []
