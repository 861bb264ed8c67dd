"""Fixtures for the tests against Debian's real Laravel 8.83 (php-laravel-framework)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from laravel_harness import PDO_DRIVERS, Laravel, LaravelQueueHarness
from laravel_support import require_laravel
from support import unavailable


@pytest.fixture(scope="session")
def laravel(php: str, tmp_path_factory: pytest.TempPathFactory) -> Laravel:
    require_laravel()
    return Laravel(php, tmp_path_factory.mktemp("laravel"))


@pytest.fixture(scope="session")
def dispatched(laravel: Laravel) -> dict[str, dict[str, Any]]:
    """Payload rows Laravel itself wrote for each job case in ``php/jobs.php``."""
    return laravel.dispatch()


@pytest.fixture(scope="session")
def pdo_drivers(php: str) -> set[str]:
    out = subprocess.run(
        [php, "-r", "echo implode(',', PDO::getAvailableDrivers());"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return set(out.split(","))


@pytest.fixture
def queue(
    laravel: Laravel, php: str, pdo_drivers: set[str], engine_name: str, db_url: str, tmp_path: Path
) -> LaravelQueueHarness:
    """The harness on a fresh, migrated database of each engine."""
    if PDO_DRIVERS[engine_name] not in pdo_drivers:
        unavailable(
            f"PHP has no pdo_{PDO_DRIVERS[engine_name]} (apt-get install php-pgsql php-mysql)"
        )
    harness = LaravelQueueHarness(php, db_url, tmp_path / "runs.jsonl")
    harness.migrate()
    return harness
