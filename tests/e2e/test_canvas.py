"""Celery's canvas (chain, group, chord) over the SQL broker, with a database result backend.

A real ``celery worker`` (prefork, two children) of ``apps.parity_app``; results go to
Celery's SQLAlchemy result backend (``db+…``: the same server's database on PostgreSQL and
MariaDB, a file next to the queue's on SQLite). That backend has no native chord support:
a chord's body is started by ``celery.chord_unlock``, a task the worker runs and retries
(``countdown`` = ``result_chord_retry_interval``, a delayed message here) until the header's
results are all in — so a chord exercises delayed messages and retries too. On every engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from apps.parity_app import create_app, result_backend, worker_command
from celery import Celery, chain, chord, group
from e2e_harness import Proc, sql, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

#: Bound on a canvas's result (seconds): a chord takes a few chord_unlock rounds of 1 s.
RESULT_TIMEOUT = 30


@pytest.fixture
def backend_url(db_url: str, tmp_path: Path) -> str:
    return result_backend(db_url, tmp_path)


@pytest.fixture
def papp(broker_url: str, backend_url: str) -> Iterator[Celery]:
    """The parity app, for sending canvases and reading their results from the test."""
    app = create_app(broker_url, backend_url)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def worker(spawn: Callable[..., Proc], broker_url: str, backend_url: str, out_file: Path) -> Proc:
    started = spawn(
        "worker",
        worker_command("canvas"),
        E2E_BROKER_URL=broker_url,
        E2E_RESULT_BACKEND=backend_url,
        E2E_OUT=str(out_file),
    )
    started.wait_text("ready.", timeout=30)
    return started


def settled(worker: Proc, db_url: str) -> None:
    """Every message was acked (the queue's table is empty) and the worker logged no error."""
    wait_until(
        lambda: sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = 'parity'")[0][0] == 0,
        10,
        what="parity queue empty",
    )
    assert "Traceback" not in worker.output, worker.output[-4000:]


def test_chain_passes_each_result_on(papp: Celery, worker: Proc, db_url: str) -> None:
    add, mul = papp.tasks["parity.add"], papp.tasks["parity.mul"]
    result = chain(add.s(1, 2), add.s(3), mul.s(10)).apply_async()
    assert result.get(timeout=RESULT_TIMEOUT) == 60  # ((1 + 2) + 3) * 10
    assert result.parent.get(timeout=RESULT_TIMEOUT) == 6
    assert result.parent.parent.get(timeout=RESULT_TIMEOUT) == 3
    settled(worker, db_url)


def test_group_returns_every_result_in_order(papp: Celery, worker: Proc, db_url: str) -> None:
    add = papp.tasks["parity.add"]
    result = group(add.s(i, i) for i in range(10)).apply_async()
    assert result.get(timeout=RESULT_TIMEOUT) == [2 * i for i in range(10)]
    assert result.successful()
    settled(worker, db_url)


def test_chord_body_gets_the_header_results_via_chord_unlock(
    papp: Celery, worker: Proc, db_url: str, tmp_path: Path
) -> None:
    """The header's last task waits for a gate the test opens only once ``chord_unlock`` has
    retried: the join's polling (a retried task, a delayed message) is exercised every time."""
    add, tsum, gate = (papp.tasks[f"parity.{n}"] for n in ("add", "tsum", "gate"))
    gate_file = tmp_path / "gate"
    header = [*(add.s(i, i) for i in range(10)), gate.s(str(gate_file), 100)]
    result = chord(header)(tsum.s())
    wait_until(
        lambda: re.search(r"celery\.chord_unlock\[[-0-9a-f]+\] retry", worker.output),
        RESULT_TIMEOUT,
        what="celery.chord_unlock retrying while the header is incomplete",
    )
    gate_file.touch()
    assert result.get(timeout=RESULT_TIMEOUT) == 190  # sum(2 * i for i in range(10)) + 100
    settled(worker, db_url)


def test_chain_with_a_group_then_a_task_becomes_a_chord(
    papp: Celery, worker: Proc, db_url: str
) -> None:
    add, mul, tsum = (papp.tasks[f"parity.{n}"] for n in ("add", "mul", "tsum"))
    # add(1, 1) = 2 -> group(add(2, 10), mul(2, 10)) = [12, 20] -> tsum = 32
    result = chain(add.s(1, 1), group(add.s(10), mul.s(10)), tsum.s()).apply_async()
    assert result.get(timeout=RESULT_TIMEOUT) == 32
    settled(worker, db_url)
