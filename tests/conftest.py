"""Shared fixtures.

Tiers (by folder): ``unit/`` — pure logic, no database; ``conformance/`` — the
contract-v1 suite against the store, parametrized over every engine;
``integration/`` — Kombu through ``kombu.Connection``; ``e2e/`` — real
``celery worker`` processes and real process crashes.

Engines: ``ENGINES`` (tests/support.py) lists the databases the parametrized suites run on. The
SQLite engine needs only a file; PostgreSQL and MariaDB tests start a
throwaway server once per session (``tests/servers.py``) and give each test a
fresh database on it. Under ``CI=true`` a missing server fails the test
instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kombu_sqlqueue.store import JobStore, StoreOptions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402  (tests/servers.py: throwaway PostgreSQL and MariaDB)
from progress import Progress  # noqa: E402  (tests/progress.py: a long run's progress lines)
from servers import in_ci  # noqa: E402
from support import ENGINES, unavailable  # noqa: E402

_started: dict[str, servers.Server | BaseException] = {}


def server_for(engine: str) -> servers.Server:
    """The session's server for ``engine``, started on first use; fail (CI) or skip if absent."""
    found = _started.get(engine)
    if found is None:
        try:
            found = servers.STARTERS[engine]()
        except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
            found = exc
        _started[engine] = found
    if isinstance(found, BaseException):
        unavailable(f"{engine} server unavailable: {found}")
    return found


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the process the reports reach (xdist: controller)
        config.pluginmanager.register(Progress(config), "kombu_sqlqueue_progress")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for found in _started.values():
        if isinstance(found, servers.Server):
            found.stop()


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(engine_name: str, tmp_path: Path) -> str:
    """SQLAlchemy URL of an empty database (no ``sqlqueue+`` prefix)."""
    if engine_name == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    server = server_for(engine_name)
    return server.create_database(f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def db_server(engine_name: str) -> servers.Server:
    """The session's server for a server engine (tests needing one skip SQLite)."""
    if engine_name == "sqlite":
        pytest.skip("SQLite has no server")
    return server_for(engine_name)


@pytest.fixture
def redis_url() -> str:
    """An empty database of the session's throwaway Redis (the broker a migration leaves)."""
    import redis

    url = server_for("redis").url("0")
    redis.Redis.from_url(url).flushdb()
    return url


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


def require_binary(
    name: str, install_hint: str, problem: Callable[[str], str | None] | None = None
) -> str:
    """Path of an external program a test needs: a failure under CI, a skip elsewhere, when it
    is missing or ``problem(path)`` says what is wrong with it."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed ({install_hint})"
    else:
        wrong = problem(found) if problem is not None else None
        if wrong is None:
            return found
        message = wrong
    unavailable(f"{message}; .ci/run should have installed it" if in_ci() else message)


def _php_before_8_1(path: str) -> str | None:
    version = subprocess.run(
        [path, "-r", "echo PHP_VERSION_ID;"], capture_output=True, text=True, timeout=30
    )
    if version.returncode != 0 or not version.stdout.isdigit() or int(version.stdout) < 80100:
        return f"{path} is not a working PHP >= 8.1: {version.stdout!r} {version.stderr!r}"
    return None


@pytest.fixture(scope="session")
def php() -> str:
    """The PHP CLI (``$PHP_BINARY``, else Debian's ``php-cli``), 8.1 or later (enums)."""
    return require_binary(
        os.environ.get("PHP_BINARY", "php"),
        "apt-get install php-cli php-sqlite3 php-laravel-framework",
        _php_before_8_1,
    )
