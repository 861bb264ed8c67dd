"""Helpers shared by the tests of laravel_bridge's worker and dispatch: a settable clock and
a worker on it, failed rows read back, raw SQL as another writer, the CLI as a process."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from laravel_support import APP_KEY, sql_engine
from support import Clock

from kombu_sqlqueue.store import NewJob
from laravel_bridge import HandlerRegistry, Worker, WorkerOptions
from laravel_bridge.laravel_tables import LaravelTableStore
from laravel_bridge.tables import JobTable


def make_worker(table: JobTable, registry: HandlerRegistry, clock: Clock, **options: Any) -> Worker:
    """A worker on ``clock`` that stops when its queues are empty (``options`` override)."""
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    w = Worker(table, WorkerOptions(**options), handlers=registry, app_key=APP_KEY)
    w.clock = clock
    return w


def failed(table: JobTable) -> list[dict[str, Any]]:
    """Failed rows of either layout, read through the store, as {uuid, queue, payload (text),
    exception} (and connection on Laravel's layout). :func:`failed_rows` reads them raw."""
    store: Any = table.store  # type: ignore[attr-defined]
    if table.layout == "laravel":
        return [
            {k: r[k] for k in ("uuid", "queue", "payload", "exception", "connection")}
            for r in reversed(store.failed_jobs())
        ]
    return [
        {"uuid": d.uuid, "queue": d.queue, "payload": d.payload.decode(), "exception": d.exception}
        for d in store.dead_letters()
    ]


def handlers_module_env(tmp_path: Path, module: str, source: str, **env: str) -> dict[str, str]:
    """The environment of a ``laravel-bridge work`` process that can import the handlers
    module ``module`` (``source``, written to ``tmp_path``), with ``env`` added."""
    (tmp_path / f"{module}.py").write_text(source)
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(tmp_path), out.get("PYTHONPATH", "")])
    out.update(env)
    return out


def bridge_cli(*args: str) -> list[str]:
    """The ``laravel-bridge`` command line with ``args``, on the tests' interpreter."""
    return [sys.executable, "-m", "laravel_bridge", *args]


def raw_engine(table: JobTable) -> sa.engine.Engine:
    """A connection pool of its own to the table's database, with the package's driver."""
    store: Any = table.store  # type: ignore[attr-defined]
    table.size("default")  # the tables exist from first use on
    return sa.create_engine(store.url)  # the SQLAlchemy URL the store parsed


@contextmanager
def _engine(table: JobTable, engine: sa.engine.Engine | None) -> Iterator[sa.engine.Engine]:
    if engine is not None:
        yield engine
        return
    own = raw_engine(table)
    try:
        yield own
    finally:
        own.dispose()


def insert_raw(
    table: JobTable,
    queue: str,
    raw: bytes,
    *,
    blob: bool = False,
    engine: sa.engine.Engine | None = None,
) -> None:
    """Store ``raw`` as another writer could: raw SQL into Laravel's ``jobs`` (text when it
    is UTF-8, else — SQLite only — a BLOB or text that is not UTF-8), or contract v1's
    ``enqueue`` (a BLOB column)."""
    store: Any = table.store  # type: ignore[attr-defined]
    if table.layout == "askr":
        store.enqueue(NewJob(queue, raw, max_attempts=255))
        return
    value: str | bytes = raw
    placeholder = ":payload"
    if not blob:
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:  # text that is not UTF-8: only SQLite takes it
            placeholder = "CAST(:payload AS TEXT)"
    statement = sa.text(
        "INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, created_at) "
        f"VALUES (:queue, {placeholder}, 0, NULL, :now, :now)"
    )
    with _engine(table, engine) as db, db.begin() as conn:
        conn.execute(statement, {"queue": queue, "now": int(time.time()), "payload": value})


def failed_rows(
    table: JobTable, queue: str | None = None, *, engine: sa.engine.Engine | None = None
) -> list[dict[str, Any]]:
    """Failed rows, oldest first: uuid (Laravel's layout; None on askr, whose uuid is the
    row's own), payload as stored (bytes), exception, and SQLite's storage class of it."""
    store: Any = table.store  # type: ignore[attr-defined]
    if table.layout == "askr":
        return [
            {"uuid": None, "payload": d.payload, "exception": d.exception, "kind": "blob"}
            for d in store.dead_letters(queue, limit=1000)
        ]
    with _engine(table, engine) as db, db.connect() as conn:
        sqlite = db.dialect.name == "sqlite"
        columns = "CAST(payload AS BLOB), typeof(payload)" if sqlite else "payload, 'text'"
        where = "" if queue is None else "WHERE queue = :queue"
        rows = conn.execute(
            sa.text(f"SELECT uuid, {columns}, exception FROM failed_jobs {where} ORDER BY id"),
            {"queue": queue},
        ).fetchall()
    return [
        {
            "uuid": u,
            "payload": p.encode("utf-8") if isinstance(p, str) else bytes(p),
            "kind": k,
            "exception": e,
        }
        for u, p, k, e in rows
    ]


def laravel_13_jobs_table(db_url: str, engine_name: str) -> None:
    """Laravel's ``jobs`` table as 13's stub makes it: ``unsignedSmallInteger('attempts')``
    (a ``SMALLINT UNSIGNED`` on MariaDB/MySQL; PostgreSQL's and SQLite's columns already
    hold more than 8-12's ``TINYINT``)."""
    store = LaravelTableStore(db_url)
    store.ensure_ready()  # creates Laravel 8's tables
    store.close()
    if engine_name == "mysql":
        engine = sql_engine(db_url)
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE jobs MODIFY attempts SMALLINT UNSIGNED NOT NULL"))
        engine.dispose()
