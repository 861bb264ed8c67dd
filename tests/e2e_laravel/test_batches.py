"""``Bus::batch`` jobs run, failed and skipped by Python, beside PHP's worker (Laravel 8.83's
own ``PendingBatch`` and ``DatabaseBatchRepository``, on SQLite, PostgreSQL and MariaDB):
``job_batches`` is kept as Laravel keeps it, and the batch's then/catch/finally callbacks —
PHP closures — run once each, in PHP, whichever side completed the batch."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from laravel_harness import LaravelQueueHarness
from laravel_support import APP_KEY, batch_row

from laravel_bridge import HandlerRegistry, Job, LaravelQueue, Worker, WorkerOptions
from laravel_bridge.tables import JobTable

pytestmark = pytest.mark.timeout(180)

STEP = "App\\Things\\BatchStep"


@pytest.fixture
def table(queue: LaravelQueueHarness) -> Iterator[JobTable]:
    laravel = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    yield laravel.table
    laravel.close()


def python(
    table: JobTable, ran: list[str], app_key: str | None = APP_KEY, **options: Any
) -> Worker:
    def handle(job: Job) -> None:
        ran.append(job.properties["label"])
        if job.properties["label"].startswith("fail"):
            raise RuntimeError(f"{job.properties['label']} cannot be done")

    registry = HandlerRegistry()
    registry.register(STEP, handle)
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    return Worker(table, WorkerOptions(**options), handlers=registry, app_key=app_key)


def callbacks(queue: LaravelQueueHarness) -> list[str]:
    return [r["class"] for r in queue.runs() if r["class"].startswith("batch-")]


def test_python_runs_one_fails_one_php_runs_the_third_and_each_callback_runs_once(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    batch = queue.batch("ok", "fail-b", "by-php")
    ran: list[str] = []
    python(table, ran, max_jobs=2).run()  # ok, then fail-b (tries 1)
    assert ran == ["ok", "fail-b"]
    (failed,) = queue.failed()
    row = batch_row(queue.db_url, batch["batch_id"])
    assert (row["total_jobs"], row["pending_jobs"], row["failed_jobs"]) == (3, 2, 1)
    assert json.loads(row["failed_job_ids"]) == [failed["uuid"]]
    assert row["cancelled_at"] is not None and row["finished_at"] is not None  # not allowFailures
    php = queue.work()  # by-php, then the catch callbacks Python handed over
    assert php.returncode == 0, php.stderr
    assert [r["label"] for r in queue.runs() if r["class"] == STEP] == ["by-php"]
    assert sorted(callbacks(queue)) == ["batch-catch", "batch-finally"]
    (catch,) = [r for r in queue.runs() if r["class"] == "batch-catch"]
    assert catch["error"] == "fail-b cannot be done" and catch["batch"] == batch["batch_id"]
    row = batch_row(queue.db_url, batch["batch_id"])
    assert (row["pending_jobs"], row["failed_jobs"]) == (1, 1)  # what Laravel leaves
    assert table.size("default") == 0


def test_python_completing_a_batch_hands_then_and_finally_to_php(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    batch = queue.batch("first-by-php", "last-by-python")
    php = queue.work(max_jobs=1, stop_when_empty=False)
    assert php.returncode == 0, php.stderr
    ran: list[str] = []
    python(table, ran).run()
    assert ran == ["last-by-python"]
    row = batch_row(queue.db_url, batch["batch_id"])
    assert (row["pending_jobs"], row["failed_jobs"], row["failed_job_ids"]) == (0, 0, "[]")
    assert row["finished_at"] is not None and row["cancelled_at"] is None
    assert callbacks(queue) == []  # not run by Python: queued for PHP
    php = queue.work()
    assert php.returncode == 0, php.stderr
    assert callbacks(queue) == ["batch-then", "batch-finally"]
    assert [s["name"] for s in php.statuses if s["status"] == "Processed"] == [
        "Closure (laravel_bridge: batch then callbacks)",
        "Closure (laravel_bridge: batch finally callbacks)",
    ]


def test_a_job_of_a_cancelled_batch_is_skipped_and_counted_as_done(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    batch = queue.batch("fail-first", "skipped", allow_failures=False)
    ran: list[str] = []
    python(table, ran).run()
    assert ran == ["fail-first"]  # the second was not run: its batch was cancelled
    row = batch_row(queue.db_url, batch["batch_id"])
    assert (row["pending_jobs"], row["failed_jobs"]) == (1, 1) and row["cancelled_at"] is not None
    assert table.size("default") == 2  # the catch and finally closures, for PHP


def test_allowed_failures_do_not_cancel(queue: LaravelQueueHarness, table: JobTable) -> None:
    batch = queue.batch("fail-one", "runs", allow_failures=True)
    ran: list[str] = []
    python(table, ran).run()
    assert ran == ["fail-one", "runs"]
    row = batch_row(queue.db_url, batch["batch_id"])
    assert (row["pending_jobs"], row["failed_jobs"]) == (1, 1) and row["cancelled_at"] is None


def test_without_the_app_key_the_counts_are_kept_and_the_log_says_the_callbacks_did_not_run(
    queue: LaravelQueueHarness, table: JobTable, caplog: pytest.LogCaptureFixture
) -> None:
    batch = queue.batch("alone")
    ran: list[str] = []
    with caplog.at_level(logging.WARNING, logger="laravel_bridge.worker"):
        python(table, ran, app_key=None).run()
    assert batch_row(queue.db_url, batch["batch_id"])["pending_jobs"] == 0
    assert any("callbacks did not run" in r.getMessage() and "--app-key" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert table.size("default") == 0
