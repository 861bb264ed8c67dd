"""``ShouldBeUnique`` jobs run by Python: their lock in Laravel's database cache store
(``cache_locks``) is released when Python finishes or fails them, as Laravel's
``CallQueuedHandler`` does, so the next ``dispatch()`` is queued instead of dropped
(Laravel 8.83's own ``PendingDispatch``, on SQLite, PostgreSQL and MariaDB)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from laravel_harness import LaravelQueueHarness
from laravel_support import APP_KEY, unique_locks

from laravel_bridge import HandlerRegistry, Job, LaravelQueue, Worker, WorkerOptions
from laravel_bridge.tables import JobTable

pytestmark = pytest.mark.timeout(180)

REPORT = "App\\Things\\BuildReport"  # uniqueId() is a method: the handler gives it
EXPORT = "App\\Things\\ExportOrders"  # uniqueId is a property


@pytest.fixture
def table(queue: LaravelQueueHarness) -> Iterator[JobTable]:
    laravel = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    yield laravel.table
    laravel.close()


def run(table: JobTable, fail: bool = False, **options: Any) -> list[str]:
    ran: list[str] = []

    def handle(job: Job) -> None:
        ran.append(job.name)
        if fail:
            raise RuntimeError("the report cannot be built")

    registry = HandlerRegistry()
    registry.register(REPORT, handle, unique_id=lambda job: job.properties["reportId"])
    registry.register(EXPORT, handle)
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    Worker(table, WorkerOptions(**options), handlers=registry, app_key=APP_KEY).run()
    return ran


def test_python_releases_the_unique_lock_when_the_job_is_done(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    assert queue.dispatch_unique("BuildReport", "7") and queue.dispatch_unique(
        "ExportOrders", "2024-05"
    )
    assert not queue.dispatch_unique("BuildReport", "7")  # held: Laravel drops the duplicate
    assert unique_locks(queue.db_url) == [
        "laravel_cachelaravel_unique_job:App\\Things\\BuildReport7",
        "laravel_cachelaravel_unique_job:App\\Things\\ExportOrdersorders-2024-05",
    ]
    assert run(table, unique_locks="cache_locks") == [REPORT, EXPORT]
    assert unique_locks(queue.db_url) == []
    assert queue.dispatch_unique("BuildReport", "7")  # queued again, as after a PHP run
    assert queue.dispatch_unique("ExportOrders", "2024-05")


def test_python_releases_the_unique_lock_when_the_job_fails(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    assert queue.dispatch_unique("BuildReport", "8")
    run(table, fail=True, unique_locks="cache_locks")
    assert [f["class"] for f in queue.failed()] == [REPORT] and unique_locks(queue.db_url) == []
    assert queue.dispatch_unique("BuildReport", "8")


def test_a_job_released_for_a_retry_keeps_its_lock(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    assert queue.dispatch_unique("BuildReport", "9")
    run(table, fail=True, unique_locks="cache_locks", tries=3, once=True)
    assert table.size("default") == 1  # released for its next try
    assert unique_locks(queue.db_url) == [
        "laravel_cachelaravel_unique_job:App\\Things\\BuildReport9"
    ]
    assert not queue.dispatch_unique("BuildReport", "9")


def test_without_the_lock_table_the_lock_stays_and_the_log_says_so_once_per_class(
    queue: LaravelQueueHarness, table: JobTable, caplog: pytest.LogCaptureFixture
) -> None:
    assert queue.dispatch_unique("ExportOrders", "2024-06")
    assert queue.dispatch_unique("ExportOrders", "2024-07")
    with caplog.at_level(logging.WARNING, logger="laravel_bridge.worker"):
        assert run(table) == [EXPORT, EXPORT]
    warned = [r.getMessage() for r in caplog.records if "looks unique" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "'laravel_unique_job:App\\\\Things\\\\ExportOrdersorders-2024-06'" in warned[0]
    assert "--unique-locks-table" in warned[0]
    assert len(unique_locks(queue.db_url)) == 2
    assert not queue.dispatch_unique("ExportOrders", "2024-06")  # dropped for uniqueFor


def test_a_missing_lock_table_is_a_warning_not_a_crash(
    queue: LaravelQueueHarness, table: JobTable, caplog: pytest.LogCaptureFixture
) -> None:
    assert queue.dispatch_unique("ExportOrders", "2024-08")
    with caplog.at_level(logging.WARNING, logger="laravel_bridge.worker"):
        assert run(table, unique_locks="no_such_locks") == [EXPORT]
    assert table.size("default") == 0  # the job itself is done
    assert any("no_such_locks" in r.getMessage() for r in caplog.records)


def test_python_dispatches_a_unique_job_as_laravel_does(queue: LaravelQueueHarness) -> None:
    """``dispatch(..., unique_for=…)`` takes the lock Laravel's PendingDispatch takes: PHP's
    dispatch of the same job is dropped while it is queued, the lock is released when the
    job is done, and the next dispatch from either side is queued again."""
    python = LaravelQueue(queue.db_url, "laravel", create_tables=False, unique_locks="cache_locks")
    try:
        first = python.dispatch(REPORT, {"reportId": 21}, unique_for=3600, unique_id=21)
        assert first is not None
        assert unique_locks(queue.db_url) == [
            "laravel_cachelaravel_unique_job:App\\Things\\BuildReport21"
        ]
        assert not queue.dispatch_unique("BuildReport", "21")  # Laravel sees Python's lock
        assert python.dispatch(REPORT, {"reportId": 21}, unique_for=3600, unique_id=21) is None
        assert python.dispatch(REPORT, {"reportId": 22}, unique_for=3600, unique_id=22)
        assert python.size() == 2

        # This harness's PHP worker has an array cache store, so the jobs are run by ours,
        # which releases the locks as CallQueuedHandler::ensureUniqueJobLockIsReleased does.
        assert run(python.table, unique_locks="cache_locks") == [REPORT, REPORT]
        assert unique_locks(queue.db_url) == []
        assert python.dispatch(REPORT, {"reportId": 21}, unique_for=3600, unique_id=21)
        assert not queue.dispatch_unique("BuildReport", "21")
        # And a lock PHP took holds Python back the same way.
        assert queue.dispatch_unique("BuildReport", "23")
        assert python.dispatch(REPORT, {"reportId": 23}, unique_for=3600, unique_id=23) is None
    finally:
        python.close()
