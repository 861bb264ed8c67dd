"""The sqlqueue+ URL resolves in a fresh interpreter with no import; the operator CLI's
first commands work (the rest, and its errors: integration_bridge/test_operator_cli.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kombu_sqlqueue.store import JobStore, NewJob
from kombu_sqlqueue.store.contract import render_url


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_broker_url_resolves_without_importing_the_package(broker_url: str, tmp_path: Path) -> None:
    code = (
        "import sys, kombu\n"
        f"c = kombu.Connection({broker_url!r})\n"
        "with c:\n"
        "    c.SimpleQueue('hello').put('hi')\n"
        "print(type(c.transport).__module__)\n"
    )
    done = run(sys.executable, "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kombu_sqlqueue.transport"


@pytest.mark.parametrize(
    ("broker", "meant"),
    [
        ("sqlqueue:///q.db", "did you mean sqlqueue+sqlite:///q.db?"),
        ("sqlqueue:////srv/q.db", "did you mean sqlqueue+sqlite:////srv/q.db?"),
        ("sqlqueue+sqlite://srv/q.db", "did you mean sqlqueue+sqlite:////srv/q.db (absolute)"),
    ],
)
def test_a_celery_broker_url_that_is_almost_ours_says_which_was_meant(
    broker: str, meant: str, tmp_path: Path
) -> None:
    """What a Celery app with this ``broker=`` ends on: our InvalidURL, naming the URL meant."""
    code = (
        "from celery import Celery\n"
        f"app = Celery('t', broker={broker!r})\n"
        "with app.connection_for_write() as conn:\n"
        "    conn.ensure_connection(max_retries=1)\n"
    )
    done = run(sys.executable, "-c", code, cwd=tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kombu_sqlqueue.exceptions.InvalidURL: ") and meant in last, last
    assert not list(tmp_path.iterdir())  # nothing created


def test_cli_backlog_dead_letters_and_sweep(db_url: str, store: JobStore) -> None:
    store.enqueue_many([NewJob("celery", b"a"), NewJob("celery", b"b", delay=60)])
    store.enqueue(NewJob("mail", b"m", uuid="task-1"))
    (held,) = store.claim("mail", 1, 30).jobs
    store.dead_letter(held.receipt, "boom")
    cli = [sys.executable, "-m", "kombu_sqlqueue"]

    out = run(*cli, "backlog", f"sqlqueue+{db_url}", "celery", "--json")
    assert out.returncode == 0, out.stderr
    assert '"total": 2' in out.stdout and '"ready": 1' in out.stdout

    out = run(*cli, "dead-letters", db_url)
    assert "mail" in out.stdout and "task-1" in out.stdout and "boom" in out.stdout

    out = run(*cli, "sweep", db_url, "--retention", "3600")
    assert out.stdout.strip() == "deleted 0 dead letter(s)"


def dead_url(engine_name: str, tmp_path: Path) -> str:
    """A URL of this engine nothing answers at: a closed port, an unopenable file."""
    from servers import free_port

    if engine_name == "sqlite":
        return f"sqlite:///{tmp_path / 'missing-dir' / 'queue.db'}"
    scheme = "postgresql" if engine_name == "postgresql" else "mysql"
    user = "postgres" if engine_name == "postgresql" else "root"
    return f"{scheme}://{user}@127.0.0.1:{free_port()}/nowhere"


def test_a_failover_list_switches_to_the_next_url(
    engine_name: str, db_url: str, tmp_path: Path, store: JobStore
) -> None:
    """Kombu's failover (``a;b``): ``switch()`` parses ``sqlqueue+<scheme>://…`` as the
    transport ``sqlqueue+<scheme>``; it resolves to ours, with the URL the list gave."""
    from kombu import Connection

    live = f"sqlqueue+{db_url}"
    conn = Connection(f"sqlqueue+{dead_url(engine_name, tmp_path)};{live}")
    try:
        switched: list[Any] = []
        conn.ensure_connection(
            max_retries=3, interval_start=0, interval_step=0.1,
            errback=lambda exc, _interval: switched.append(exc),
        )  # fmt: skip
        assert switched, "the dead URL should have failed first"
        assert conn.transport.database_url == db_url
        assert conn.as_uri() == render_url(live)
        with conn.SimpleQueue("failover") as queue:
            queue.put("after the switch")
        assert store.size("failover") == 1
        # Round robin: back to the first, then the live one again (its whole URL kept).
        conn.switch(f"sqlqueue+{db_url}")
        assert conn.transport.database_url == db_url
    finally:
        conn.release()


def test_a_libpq_multi_host_url_reaches_the_host_that_answers(
    engine_name: str, db_url: str
) -> None:
    """docs/engines.md's first choice on PostgreSQL: one URL, libpq tries the hosts in turn."""
    if engine_name != "postgresql":
        pytest.skip("libpq's multi-host URLs are PostgreSQL's")
    from kombu import Connection
    from servers import free_port
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    hosts = f"host=127.0.0.1:{free_port()}&host={url.host}:{url.port}"
    broker = (
        f"sqlqueue+postgresql+psycopg://{url.username}@/{url.database}"
        f"?{hosts}&target_session_attrs=read-write"
    )
    with Connection(broker) as conn, conn.SimpleQueue("multi-host") as queue:
        queue.put("through the second host")
        message = queue.get(timeout=5)
        assert message.payload == "through the second host"
        message.ack()
