"""Fixtures of the e2e tests (helpers live in ``e2e_harness``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from apps.celery_app import create_app
from celery import Celery
from e2e_harness import E2E_DIR, E2E_VISIBILITY, Proc


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
