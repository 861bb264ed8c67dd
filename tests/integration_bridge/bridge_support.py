"""Constants and raw-SQL helpers shared by the tests of laravel_bridge's worker and dispatch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from kombu_sqlqueue.store import NewJob
from laravel_bridge.tables import JobTable

#: A Laravel app key (32 bytes, base64) for encrypted jobs.
APP_KEY = "base64:" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="


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
