"""Fixtures for the tests against Debian's real Laravel 8.83 (php-laravel-framework)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from laravel_harness import Laravel


@pytest.fixture(scope="session")
def laravel(php: str, tmp_path_factory: pytest.TempPathFactory) -> Laravel:
    if not Path("/usr/share/php/Illuminate/autoload.php").exists():
        message = "Laravel is not installed (apt-get install php-laravel-framework)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return Laravel(php, tmp_path_factory.mktemp("laravel"))


@pytest.fixture(scope="session")
def dispatched(laravel: Laravel) -> dict[str, dict[str, Any]]:
    """Payload rows Laravel itself wrote for each job case in ``php/jobs.php``."""
    return laravel.dispatch()
