"""PHP and Python workers on one Laravel queue, on SQLite, PostgreSQL and MariaDB: PHP-only
jobs are left to PHP untouched, and jobs both can run run once each.

PHP is Laravel 8.83's real worker (``php/queue_harness.php work``, a daemon as deployed);
Python is the real ``laravel-bridge work`` CLI or a ``Worker`` in a thread.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laravel_harness import LaravelQueueHarness
from laravel_support import APP_KEY

from laravel_bridge import HandlerRegistry, LaravelQueue, Worker, WorkerOptions
from laravel_bridge.tables import JobTable

pytestmark = pytest.mark.timeout(240)

LISTENER = "App\\Things\\SendShipmentNotification"

#: A handlers module for ``laravel-bridge work --handlers``: each Ping it runs, one JSON line.
PING_HANDLERS = """
import json, os
from laravel_bridge import handles

@handles("App\\\\Jobs\\\\Ping")
def ping(job):
    line = json.dumps({"runner": "python", "uuid": job.uuid, "attempts": job.attempts,
                       "pid": os.getpid()}) + "\\n"
    with open(os.environ["PY_RUNS"], "a") as f:
        f.write(line)
"""


@pytest.fixture
def table(queue: LaravelQueueHarness) -> Iterator[JobTable]:
    laravel = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    yield laravel.table
    laravel.close()


def json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def locked_deletes(stderr: str) -> int:
    """Laravel's deleteReserved refused by SQLite (see docs/laravel-queue.md)."""
    return len(re.findall(r"database is locked \(SQL: delete from \"jobs\" where", stderr))


@pytest.mark.parametrize("sleep", [0.1, 3])
def test_php_only_jobs_on_a_shared_queue_are_left_to_php_untouched(
    queue: LaravelQueueHarness, table: JobTable, sleep: float, engine_name: str
) -> None:
    """40 queued mailables (no Python handler) and 10 queued listeners (a Python handler)
    with one PHP and one Python worker, both polling every ``sleep`` s: Python never reserves
    a mail (it once held each for 60 s), PHP sends all 40, every listener runs once.
    How long the mails wait, beside PHP alone, is measured in bench/bench_shared_queue.py."""
    queue.queue_things(*["mailable"] * 40, *["listener"] * 10)
    ran: list[str] = []
    registry = HandlerRegistry()
    registry.register(LISTENER, lambda job: ran.append(job.uuid))
    options = WorkerOptions(sleep=sleep, timeout=0)  # timeouts need the main thread
    python = Worker(table, options, handlers=registry, app_key=APP_KEY)
    thread = threading.Thread(target=python.run)
    thread.start()
    # PHP as deployed: a daemon (--stop-when-empty would end it at the first pop refused).
    php = queue.start_work(sleep=sleep)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(queue.runs()) + len(ran) < 50:
            time.sleep(0.2)
        time.sleep(0.5)  # the last job's delete
    finally:
        php.send_signal(signal.SIGTERM)
        _out, err = php.communicate(timeout=60)
        python.stop()
        thread.join(timeout=30)
    assert php.returncode == 0, err
    runs = queue.runs()
    mails = [r for r in runs if r["class"] == "mail"]
    assert len(mails) == 40 and all(r["runner"] == "php" for r in mails)
    php_listeners = [r for r in runs if r["class"] == LISTENER]
    assert len(ran) + len(php_listeners) == 10 and len(set(ran)) == len(ran)
    assert all(r["attempts"] == 1 for r in php_listeners)  # none was reserved by Python first
    assert python.jobs_processed == len(ran)  # Python reserved no mail at all
    assert queue.failed() == []
    left = table.size("default")
    if engine_name == "sqlite" and left:
        # Laravel's own weakness on SQLite (docs/laravel-queue.md, "Sharing a queue with PHP
        # workers"): its deleteReserved reads, then deletes, in a deferred transaction, which
        # SQLite refuses at once ("database is locked") when another process committed in
        # between. The job ran; its row stays reserved and runs again after retry_after.
        locked = re.findall(r"database is locked \(SQL: delete from \"jobs\" where", err)
        assert len(locked) == left, err
    else:
        assert left == 0, err


def test_two_php_and_two_python_workers_run_2000_jobs_each_once(
    queue: LaravelQueueHarness, engine_name: str, tmp_path: Path
) -> None:
    """Both sides run ``App\\Jobs\\Ping``: every job runs exactly once on the server engines.
    On SQLite, a job whose delete Laravel could not write (``database is locked``) is still
    reserved: it would run again after ``retry_after``; the test counts those."""
    total = 2000
    lq = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    jobs = [lq.build("App\\Jobs\\Ping", {"label": f"p{i}"}) for i in range(total)]
    lq.table.push_many(jobs)
    uuids = {job.uuid for job in jobs}
    (tmp_path / "ping_handlers.py").write_text(PING_HANDLERS)
    py_runs = tmp_path / "python.jsonl"
    env = {
        **os.environ,
        "PY_RUNS": str(py_runs),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    php = [queue.start_work(tmp_path / f"php{n}.out", sleep=0.1) for n in range(2)]
    python_log = (tmp_path / "python.err").open("w")  # a pipe nobody reads could fill
    python = [
        subprocess.Popen(
            [sys.executable, "-m", "laravel_bridge", "work", "--url", queue.db_url,
             "--layout", "laravel", "--sleep", "0.1", "--handlers", "ping_handlers"],
            env=env, stdout=subprocess.DEVNULL, stderr=python_log, text=True,
        )
        for _ in range(2)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and lq.size("default") > 0:
            if (
                sum(1 for _ in json_lines(py_runs)) + len(queue.runs()) >= total
                and engine_name == "sqlite"
            ):
                break  # on SQLite, rows Laravel could not delete stay reserved
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        for proc in python + php:
            proc.send_signal(signal.SIGTERM)
        php_err = "".join(p.communicate(timeout=60)[1] for p in php)
        for p in python:
            p.wait(timeout=60)
        python_log.close()
        py_err = (tmp_path / "python.err").read_text()
    codes = [p.returncode for p in python + php]
    assert codes == [0, 0, 0, 0], (codes, php_err[-2000:], py_err[-2000:])
    runs = json_lines(py_runs) + queue.runs()
    ran = [r["uuid"] for r in runs]
    assert set(ran) == uuids  # none lost
    by_python = len(json_lines(py_runs))
    assert by_python and len(runs) - by_python  # both sides took part
    left = lq.size("default")
    lq.close()
    if engine_name == "sqlite":
        assert left == locked_deletes(php_err), php_err[-3000:]
        assert len(ran) == total  # each ran once in this run; the `left` ones would run again
    else:
        assert len(ran) == total and left == 0, php_err[-3000:]  # exactly once
    assert queue.failed() == []
