"""PostgreSQL's wake-ups on every URL form the engine accepts (issue 39).

The idle consumer's LISTEN connection must reach the server the engine's connections
reach: a multi-host failover URL (its repeated ``host=h:p``, which libpq read as a URI
takes for one host named ``h:p``), a ``service=`` from a service file, a unix socket
directory, libpq's query parameters. A listener that cannot connect falls back to
polling, so each case waits with a 30 s timeout: woken (True) only through NOTIFY.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import servers
import sqlalchemy as sa
from servers import Server, free_port
from support import unavailable

from kombu_sqlqueue.store import JobStore, NewJob

pytestmark = pytest.mark.timeout(90)


def _database(db_url: str) -> str:
    return str(sa.make_url(db_url).database)


def multi_host(server: Server, db: str, _tmp: Path, _mp: pytest.MonkeyPatch) -> str:
    # The first host refuses (nothing listens there): libpq goes on to the next, as for a
    # primary that is down; the engine and the listener must both end up on the second.
    dead = free_port()
    return (
        f"postgresql://postgres@/{db}?host=127.0.0.1:{dead}&host=127.0.0.1:{server.port}"
        "&target_session_attrs=read-write"
    )


def service_file(server: Server, db: str, tmp: Path, mp: pytest.MonkeyPatch) -> str:
    services = tmp / "pg_service.conf"
    services.write_text(
        f"[queue]\nhost=127.0.0.1\nport={server.port}\ndbname={db}\nuser=postgres\n"
    )
    mp.setenv("PGSERVICEFILE", str(services))
    return "postgresql:///?service=queue"


def unix_socket(server: Server, db: str, _tmp: Path, _mp: pytest.MonkeyPatch) -> str:
    # tests/servers.py puts the server's socket in its root directory.
    return f"postgresql://postgres@:{server.port}/{db}?host={server.root}"


def query_parameters(server: Server, db: str, _tmp: Path, _mp: pytest.MonkeyPatch) -> str:
    return (
        f"postgresql://postgres@127.0.0.1:{server.port}/{db}"
        "?application_name=kq-test&connect_timeout=5&sslmode=disable"
    )


FORMS: dict[str, Callable[[Server, str, Path, pytest.MonkeyPatch], str]] = {
    "multi-host": multi_host,
    "service": service_file,
    "unix-socket": unix_socket,
    "query-parameters": query_parameters,
}


@pytest.mark.parametrize("engine_name", ["postgresql"])  # LISTEN/NOTIFY is PostgreSQL's
@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_idle_consumer_is_woken_on_every_url_form(
    engine_name: str,
    db_url: str,
    db_server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    url = FORMS[form](db_server, _database(db_url), tmp_path, monkeypatch)
    waiter, producer = JobStore(url), JobStore(url)
    try:
        producer.ensure_ready()
        waiter.ensure_ready()
        assert waiter.wait_for_jobs(0.01, {"work"}) is False  # LISTENs from here on

        def publish() -> None:
            time.sleep(0.3)
            producer.enqueue(NewJob("work", b"x"))

        publisher = threading.Thread(target=publish)
        publisher.start()
        # Polling would sleep the whole 30 s and answer False; only a NOTIFY answers True.
        assert waiter.wait_for_jobs(30, {"work"}) is True
        publisher.join()
        assert waiter.claim("work", 1, 60).jobs
    finally:
        waiter.close()
        producer.close()


def _admin(server: Server, sql: str) -> Any:
    engine = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.exec_driver_sql(sql)
            return result.fetchall() if result.returns_rows else None
    finally:
        engine.dispose()


def _woken_by_an_enqueue(waiter: JobStore, producer: JobStore) -> bool:
    def publish() -> None:
        time.sleep(0.3)
        producer.enqueue(NewJob("work", b"x"))

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        # Polling would sleep the whole 30 s and answer False; only a NOTIFY answers True.
        return waiter.wait_for_jobs(30, {"work"})
    finally:
        publisher.join()


@pytest.mark.timeout(240)
def test_the_listener_follows_the_promoted_standby_on_the_failover_url() -> None:
    """The documented failover URL, a primary with a synchronous standby: wake-ups before
    the primary is killed (-9) and after the standby is promoted, on the same store."""
    try:
        primary = servers.start_postgresql()
    except (servers.ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
        unavailable(f"postgresql server unavailable: {exc}")
    standby = None
    stores: list[JobStore] = []
    try:
        _admin(primary, "CREATE DATABASE q")
        standby = servers.start_postgresql_standby(primary)
        _admin(primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        _admin(primary, "SELECT pg_reload_conf()")
        url = (
            f"postgresql://postgres@/q?host=127.0.0.1:{primary.port}"
            f"&host=127.0.0.1:{standby.port}&target_session_attrs=read-write"
        )
        waiter, producer = JobStore(url), JobStore(url)
        stores += [waiter, producer]
        producer.ensure_ready()
        assert waiter.wait_for_jobs(0.01, {"work"}) is False  # LISTENs from here on
        assert _woken_by_an_enqueue(waiter, producer), "no wake-up before the failover"
        assert waiter.claim("work", 1, 60).jobs

        primary.proc.kill()
        primary.proc.wait(timeout=30)
        assert _admin(standby, "SELECT pg_promote(true, 60)") == [(True,)]
        # The listener finds its connection gone in a wait (polling that wait out) and
        # connects again in the next: to the promoted standby, the read-write host now.
        for _ in range(3):
            waiter.wait_for_jobs(0.3, {"work"})
        after = JobStore(url)
        stores.append(after)
        assert _woken_by_an_enqueue(waiter, after), "no wake-up after the promotion"
        assert [j.payload for j in waiter.claim("work", 1, 60).jobs] == [b"x"]
    finally:
        for store in stores:
            store.close()
        for server in (standby, primary):
            if server is not None:
                server.stop()
