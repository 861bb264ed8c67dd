"""Fixtures of the e2e tests (helpers live in ``e2e_harness``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from e2e_harness import E2E_DIR, Proc


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
