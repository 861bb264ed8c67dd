"""Shared fixtures.

Tiers (by folder): ``unit/`` — pure logic, no database; ``conformance/`` — the
contract-v1 suite against the store, parametrized over every engine;
``integration/`` — Kombu through ``kombu.Connection``; ``e2e/`` — real
``celery worker`` processes and real process crashes.

Engines: ``ENGINES`` lists the databases the parametrized suites run on. The
SQLite engine needs only a file; server engines (later) need their server,
and under ``CI=true`` a missing server fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kombu_sqlqueue.store import JobStore, StoreOptions

ROOT = Path(__file__).resolve().parent.parent
#: Engines the parametrized suites run on.
ENGINES = ["sqlite"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def database_url(engine: str, tmp_path: Path) -> str:
    """A fresh, empty database of ``engine`` for one test."""
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    raise AssertionError(f"unknown engine {engine}")  # pragma: no cover


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(engine_name: str, tmp_path: Path) -> str:
    """SQLAlchemy URL of an empty database (no ``sqlqueue+`` prefix)."""
    return database_url(engine_name, tmp_path)


@pytest.fixture
def broker_url(db_url: str) -> str:
    """Kombu/Celery broker URL for the same database."""
    return f"sqlqueue+{db_url}"


@pytest.fixture
def store(db_url: str) -> Iterator[JobStore]:
    s = JobStore(db_url, StoreOptions())
    yield s
    s.close()


@pytest.fixture
def python() -> str:
    """The interpreter running the tests, for subprocesses."""
    return sys.executable


def require_binary(name: str, install_hint: str) -> str:
    """Path of an external program a test needs: a failure under CI, a skip elsewhere."""
    found = shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed ({install_hint})"
    if in_ci():
        pytest.fail(f"{message}; .ci/run should have installed it")
    pytest.skip(message)


@pytest.fixture(scope="session")
def php() -> str:
    """Debian's PHP CLI (``php-cli``)."""
    return require_binary("php", "apt-get install php-cli php-sqlite3 php-laravel-framework")
