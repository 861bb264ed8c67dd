"""The runnable example of docs/laravel-queue.md keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from laravel_support import require_laravel

ROOT = Path(__file__).resolve().parents[2]


def test_example_runs_php_and_python_jobs(tmp_path: Path, php: str) -> None:
    require_laravel()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/laravel_queue/run.py"), str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "PHP (Laravel 8.83) dispatched App\\Jobs\\ResizeImage" in out
    assert "resize /img/cat.png to 640px" in out  # dispatched by Python
    assert "resize /img/dog.png to 1280px" in out  # dispatched by PHP
    assert "invoice 7 sent to ada@example.com" in out
    assert "invoice 8 failed for good" in out
    assert "failed_jobs:" in out and "ValueError: the invoice has no email address" in out


def test_the_celery_laravel_example_goes_from_php_to_celery_and_back(
    tmp_path: Path, php: str
) -> None:
    """examples/celery_laravel: Laravel dispatch → a real celery worker → send_task → PHP."""
    require_laravel()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples/celery_laravel/run.py"), str(tmp_path / "cl.db")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PHP (Laravel 8.83) dispatched App\\Jobs\\ResizeImage as job ")
    assert "Celery ran App\\Jobs\\ResizeImage: resize /img/cat.png to 640px" in lines
    assert "Celery sent App\\Jobs\\NotifyUser back to PHP" in lines
    assert any(
        line.startswith("PHP (Laravel's worker) ran NotifyUser: user 7: /img/cat.png is ready")
        for line in lines
    )
    assert lines[-1] == "jobs left in the table: 0"
