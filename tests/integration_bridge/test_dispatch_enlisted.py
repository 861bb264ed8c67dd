"""``LaravelQueue.dispatch`` inside ``kombu_sqlqueue.enlist``: the job joins the caller's
transaction, as Laravel's database queue joins ``DB::transaction`` on its connection — on
both table layouts and every engine."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from laravel_support import sql_engine

from kombu_sqlqueue import enlist
from kombu_sqlqueue.exceptions import WrongDatabase
from laravel_bridge import LaravelQueue
from laravel_bridge.tables import JobTable


def test_a_dispatch_in_a_transaction_commits_or_rolls_back_with_it(
    db_url: str, table: JobTable, queue: LaravelQueue
) -> None:
    assert queue.size("default") == 0  # the tables exist before the app's transaction
    engine = sql_engine(db_url)
    try:
        with engine.connect() as conn:
            conn.begin()
            with enlist(conn):
                queue.dispatch("App\\Jobs\\Rolled", {"n": 1})
                queue.dispatch_many([("App\\Jobs\\Rolled", {"n": 2})])
            assert queue.size("default") == 0  # invisible before the commit
            conn.rollback()
            assert queue.size("default") == 0
            conn.begin()
            with enlist(conn):
                queue.dispatch("App\\Jobs\\Kept", {"n": 3})
            conn.commit()
    finally:
        engine.dispose()
    job = table.pop("default", 90)
    assert job is not None and "App\\\\Jobs\\\\Kept" in job.payload
    assert table.pop("default", 90) is None


def test_a_dispatch_enlisted_on_another_database_is_refused(
    engine_name: str, queue: LaravelQueue, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if engine_name == "sqlite":
        other_url = f"sqlite:///{tmp_path / 'other.db'}"
    else:
        other = f"t_{uuid.uuid4().hex[:16]}"
        other_url = request.getfixturevalue("db_server").create_database(other)
    queue.size("default")
    engine = sql_engine(other_url)
    try:
        with engine.connect() as conn:
            conn.begin()
            conn.execute(sa.text("SELECT 1"))
            with enlist(conn), pytest.raises(WrongDatabase):
                queue.dispatch("App\\Jobs\\Never", {})
            conn.rollback()
    finally:
        engine.dispose()
    assert queue.size("default") == 0


def test_a_unique_dispatch_rolled_back_takes_its_lock_with_it(db_url: str) -> None:
    """``dispatch(unique_for=…)`` enlisted: the unique lock joins the transaction too, so a
    rollback leaves neither the job nor a lock that would refuse the next dispatch."""
    queue = LaravelQueue(db_url, "laravel", unique_locks="cache_locks")
    engine = sql_engine(db_url)
    try:
        queue.size("default")
        locks = queue.table.cache_locks("cache_locks")  # type: ignore[attr-defined]
        locks.ensure_ready()
        with engine.connect() as conn:
            conn.begin()
            with enlist(conn):
                assert queue.dispatch("App\\Jobs\\Once", {}, unique_for=3600, unique_id=1)
            conn.rollback()
        assert queue.size("default") == 0
        assert queue.dispatch("App\\Jobs\\Once", {}, unique_for=3600, unique_id=1)
        assert queue.size("default") == 1
    finally:
        engine.dispose()
        queue.close()
