"""Fixtures of the e2e tests (helpers live in ``e2e_harness``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from apps.celery_app import create_app
from celery import Celery
from e2e_harness import E2E_DIR, E2E_VISIBILITY, Proc, sql
from laravel_support import sql_engine


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(name, args, **env)`` starts a process; all are killed and reaped at teardown."""
    procs: list[Proc] = []
    base_env = dict(os.environ)
    base_env["PYTHONPATH"] = os.pathsep.join(
        [str(E2E_DIR), *filter(None, [base_env.get("PYTHONPATH")])]
    )
    base_env["PYTHONUNBUFFERED"] = "1"

    def start(name: str, args: Sequence[str], **env: str) -> Proc:
        proc = Proc(name, args, tmp_path, {**base_env, **env})
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.destroy()


@pytest.fixture
def out_file(tmp_path: Path) -> Path:
    """Where the e2e Celery app's tasks append their lines (``E2E_OUT``)."""
    return tmp_path / "tasks.jsonl"


@pytest.fixture
def app(broker_url: str) -> Iterator[Celery]:
    """The e2e Celery app, for sending tasks from the test."""
    app = create_app(broker_url, visibility=E2E_VISIBILITY)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def effects(db_url: str) -> Callable[[], list[tuple[str, int]]]:
    """The application's ``effects`` table (created here) for the tests of ``complete()``;
    returns a reader of its rows as (label, pid)."""
    engine = sql_engine(db_url)
    table = sa.Table(
        "effects",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
    )
    table.metadata.create_all(engine)
    engine.dispose()
    return lambda: [(str(r[0]), int(r[1])) for r in sql(db_url, "SELECT label, pid FROM effects")]
