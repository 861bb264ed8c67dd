"""The examples run as written, end to end: real workers, beat, web servers and databases.

Each example's ``run.py`` checks its own outcome and exits 1 if it is wrong; these tests run
it as a user would and check what it printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_runs_every_task(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "BROKER_URL": f"sqlqueue+sqlite:///{tmp_path / 'queue.db'}",
        "RESULT_BACKEND": f"db+sqlite:///{tmp_path / 'results.db'}",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" -> ") == 31  # 30 results + the countdown task
    assert "'photo-9.jpg resized'" in done.stdout and "countdown task -> 42" in done.stdout
    assert "demo finished" in done.stdout
    # As root (this CI), Celery's SecurityWarning is explained once, not printed mid-output.
    assert "SecurityWarning" not in done.stdout + done.stderr
    assert ("note: running as root" in done.stdout) == (os.geteuid() == 0)


def run_example(path: Path, env: dict[str, str], timeout: float) -> str:
    """``python examples/…/run.py``; its output, after checking it exited 0."""
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_beat_example_runs_each_tick_once_with_two_workers(tmp_path: Path) -> None:
    out = run_example(
        ROOT / "examples" / "beat" / "run.py",
        {
            "BROKER_URL": f"sqlqueue+sqlite:///{tmp_path / 'beat.db'}",
            "TICKS_FILE": str(tmp_path / "ticks.jsonl"),
        },
        timeout=140,
    )
    assert "every tick ran exactly once" in out
    runs = [json.loads(line) for line in (tmp_path / "ticks.jsonl").read_text().splitlines()]
    ids = [run["id"] for run in runs]
    assert len(ids) >= 3 and len(set(ids)) == len(ids)  # several ticks, none run twice
    assert {run["worker"].split("@")[0] for run in runs} <= {"w1", "w2"}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_flask_example_runs_tasks_started_by_its_views(tmp_path: Path) -> None:
    out = run_example(
        ROOT / "examples" / "flask" / "run.py",
        {
            "FLASK_CELERY__broker_url": f"sqlqueue+sqlite:///{tmp_path / 'queue.db'}",
            "FLASK_CELERY__result_backend": f"db+sqlite:///{tmp_path / 'results.db'}",
        },
        timeout=110,
    )
    assert out.count("'successful': True") == 11
    assert "'value': 'Hello, Flask!'" in out  # the task ran inside the app's context


@pytest.mark.slow
@pytest.mark.timeout(150)
# The two stacks: one PostgreSQL database, one SQLite file (db_url: a fresh one each).
@pytest.mark.parametrize("engine_name", ["sqlite", "postgresql"], indirect=True)
def test_django_example_on_one_database(db_url: str, tmp_path: Path) -> None:
    out = run_example(
        ROOT / "examples" / "django" / "run.py",
        {"DATABASE_URL": db_url, "EXAMPLE_LOGS": str(tmp_path)},
        timeout=140,
    )
    assert out.count("-> SUCCESS") == 5
    # The view enqueues inside transaction.atomic() (django_atomic, no on_commit): a view
    # that fails after enqueueing rolls the task back with its order.
    assert "rejected after enqueueing -> rolled back" in out and "never run (PENDING)" in out
    assert "runs of the beat schedule" in out
    assert "django example finished" in out


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("engine_name", ["sqlite", "postgresql"], indirect=True)
def test_sqlalchemy_example_commits_each_task_with_its_order(db_url: str) -> None:
    out = run_example(ROOT / "examples" / "sqlalchemy" / "run.py", {"DATABASE_URL": db_url}, 110)
    assert "payment declined -> rolled back, and its receipt task with it" in out
    assert out.count("receipt_sent=True") == 2 and "receipt_sent=False" not in out
    assert "sqlalchemy example finished" in out
