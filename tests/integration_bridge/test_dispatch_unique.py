"""``LaravelQueue.dispatch(..., unique_for=…)`` on every engine and both layouts: Laravel's
``DatabaseLock`` rules for the unique lock (taken once, taken again once expired or
released), nothing stored while it is held, and the lock given back when the push fails.
(With real PHP on both sides: e2e_laravel/test_unique_jobs.py.)"""

from __future__ import annotations

import pytest
from support import Clock

from laravel_bridge import LaravelBridgeError, LaravelQueue
from laravel_bridge.tables import JobTable

KEY = "laravel_cachelaravel_unique_job:App\\Jobs\\Report7"


@pytest.fixture
def unique(db_url: str, table: JobTable) -> LaravelQueue:
    locks = table.cache_locks("cache_locks")
    locks.create_schema()  # Laravel's cache:table migration, in an app
    return LaravelQueue(db_url, table.layout, table=table, unique_locks="cache_locks")


def test_a_unique_job_is_stored_once_until_its_lock_goes(
    unique: LaravelQueue, table: JobTable, clock: Clock
) -> None:
    locks = table.cache_locks("cache_locks")
    locks.clock = clock
    assert unique.dispatch("App\\Jobs\\Report", {"id": 7}, unique_for=60, unique_id=7)
    assert unique.dispatch("App\\Jobs\\Report", {"id": 7}, unique_for=60, unique_id=7) is None
    assert unique.dispatch("App\\Jobs\\Report", {"id": 8}, unique_for=60, unique_id=8)
    assert unique.size() == 2
    clock.advance(60)  # expired, as DatabaseLock::acquire sees it: taken over
    assert unique.dispatch("App\\Jobs\\Report", {"id": 7}, unique_for=60, unique_id=7)
    assert locks.force_release(KEY)  # what the worker does when the job is done
    assert unique.dispatch("App\\Jobs\\Report", {"id": 7}, unique_for=0, unique_id=7)
    clock.advance(86399)  # unique_for 0: Laravel's default of a day
    assert unique.dispatch("App\\Jobs\\Report", {"id": 7}, unique_for=0, unique_id=7) is None
    assert unique.size() == 4


def test_a_failed_push_gives_the_lock_back(unique: LaravelQueue, table: JobTable) -> None:
    with pytest.raises(Exception, match="non-printable"):
        unique.dispatch("App\\Jobs\\Report", {}, unique_for=60, unique_id=7, queue="bad\tq")
    assert table.cache_locks("cache_locks").acquire(KEY, 60)  # free: nothing was queued


def test_unique_for_needs_the_lock_table_and_seconds(db_url: str, table: JobTable) -> None:
    plain = LaravelQueue(db_url, table.layout, table=table)
    with pytest.raises(LaravelBridgeError, match="unique_locks='cache_locks'"):
        plain.dispatch("App\\Jobs\\Report", {}, unique_for=60)
    unique = LaravelQueue(db_url, table.layout, table=table, unique_locks="cache_locks")
    with pytest.raises(LaravelBridgeError, match="unique_for must be an int >= 0"):
        unique.dispatch("App\\Jobs\\Report", {}, unique_for=-1)
    assert table.size("default") == 0
