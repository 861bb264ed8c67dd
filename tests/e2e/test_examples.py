"""The README's demo runs as written: a real Celery worker processes every task."""

from __future__ import annotations

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
