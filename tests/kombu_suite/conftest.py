"""Fixtures of Kombu's own integration base classes run against sqlqueue.

The bases (``t/integration/common.py`` of the installed Kombu's sdist) are fetched once per
Kombu version into pytest's cache (``kombu_sdist.py``); each engine's subclasses (in
``test_kombu_bases.py``) name their engine by overriding ``engine_name``, so ``db_url``
(tests/conftest.py) gives every test a fresh database on that engine. The fixtures are the
ones Kombu's own suites provide (its ``t/integration/test_py_amqp.py``): ``connection``,
``invalid_connection`` (nothing answers) and ``failover_connection`` (a dead URL, then the
live one).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import kombu_sdist
import pytest
from kombu import Connection
from servers import free_port

#: Where Kombu's bases run (the suite's test module).
BASES_MODULE = "test_kombu_bases.py"


def pytest_configure(config: pytest.Config) -> None:
    cache = getattr(config, "cache", None)
    folder = (
        cache.mkdir("kombu-sdist")
        if cache is not None
        else Path(tempfile.gettempdir()) / "kombu-sqlqueue-kombu-sdist"
    )
    kombu_sdist.prepare(Path(folder))


@pytest.fixture
def open_connection() -> Iterator[Callable[[str], Connection]]:
    """Open Kombu connections (any URL); all released at the end of the test."""
    opened: list[Connection] = []

    def make(url: str) -> Connection:
        conn = Connection(url)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.release()


@pytest.fixture
def dead_url(engine_name: str, tmp_path: Path) -> str:
    """A broker URL of the engine that nothing answers: a server port nobody listens on,
    an SQLite file in a folder that does not exist."""
    if engine_name == "sqlite":
        return f"sqlqueue+sqlite:///{tmp_path / 'no-such-folder' / 'queue.db'}"
    user = "postgres" if engine_name == "postgresql" else "root"
    return f"sqlqueue+{engine_name}://{user}@127.0.0.1:{free_port()}/absent"


@pytest.fixture
def failover_dead_url(engine_name: str, dead_url: str, tmp_path: Path) -> str:
    """The dead first URL of ``failover_connection``.

    Kombu's ``test_failover_switches_to_alternate_url`` tells the dead URL from the live one
    by port, and Kombu keeps a first ``sqlqueue+`` URL whole (its port None) until a failover
    ``switch()`` splits the next one. So PostgreSQL's dead URL names no port: its server is a
    Unix socket in a folder that does not exist. (MariaDB's keeps ``dead_url``: PyMySQL leaks
    the socket of a failed Unix-socket connect; that test does not apply there, nor on SQLite.)
    """
    if engine_name == "postgresql":
        return f"sqlqueue+postgresql://postgres@/absent?host={tmp_path / 'no-such-folder'}"
    return dead_url


@pytest.fixture
def connection(broker_url: str, open_connection: Callable[[str], Connection]) -> Connection:
    return open_connection(broker_url)


@pytest.fixture
def invalid_connection(dead_url: str, open_connection: Callable[[str], Connection]) -> Connection:
    return open_connection(dead_url)


@pytest.fixture
def failover_connection(
    failover_dead_url: str, broker_url: str, open_connection: Callable[[str], Connection]
) -> Connection:
    return open_connection(f"{failover_dead_url};{broker_url}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for Kombu's bases: how many passed, how many do not apply (and why)."""
    stats = terminalreporter.stats
    mine = {
        outcome: [r for r in stats.get(outcome, []) if BASES_MODULE in getattr(r, "nodeid", "")]
        for outcome in ("passed", "xfailed", "failed", "skipped", "xpassed", "error")
    }
    if not any(mine.values()):
        return
    counts = Counter({outcome: len(reports) for outcome, reports in mine.items()})
    line = f"kombu integration bases (kombu {kombu_sdist.installed_version()}): "
    line += f"{counts['passed']} passed, {counts['xfailed']} not applicable (xfail)"
    line += "".join(
        f", {counts[o]} {o}" for o in ("failed", "error", "xpassed", "skipped") if counts[o]
    )
    terminalreporter.write_sep("-", "kombu integration bases")
    terminalreporter.write_line(line)
    for report in mine["xfailed"]:
        terminalreporter.write_line(f"  {report.nodeid}: {report.wasxfail}")
