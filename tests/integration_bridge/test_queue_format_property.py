"""Property (hypothesis): whatever a row of a Laravel-format queue holds, a Kombu consumer
(the transport's reader, ``LaravelFormat.read``) delivers it as a Celery task message or
settles it once in the failed table with the stored bytes — never raises, never leaves it
reserved, and never fails it with an error nobody foresaw.

Rows: the hostile payloads of ``test_worker_bad_rows_property`` (random bytes as text or
BLOB, deep JSON, real Laravel payloads mutated). SQLite only: its TEXT column holds everything
another writer could leave.
"""

from __future__ import annotations

import re
from queue import Empty
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import failed_rows, insert_raw, raw_engine
from hypothesis import HealthCheck, given, settings
from kombu import Connection
from laravel_support import APP_KEY
from test_worker_bad_rows_property import stored_payloads

from laravel_bridge.tables import LAYOUTS, open_table

#: How the transport words an exception the format did not raise on purpose.
UNFORESEEN = re.compile(r"malformed stored message: [A-Z]\w*(Error|Exception|Warning)\b")


def _left(engine: sa.engine.Engine, layout: str, queue: str) -> int:
    table = "jobs" if layout == "laravel" else "askr_jobs"
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(f"SELECT COUNT(*) FROM {table} WHERE queue = :q"), {"q": queue}
            ).scalar_one()
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_any_row_is_delivered_or_failed_once_as_stored(tmp_path: Any, layout: str) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    table = open_table(url, layout)
    engine = raw_engine(table)
    queues = [f"q{n}" for n in range(200)]
    fmt = {"format": "laravel", "layout": layout, "app_key": APP_KEY}
    conn = Connection(
        f"sqlqueue+{url}", transport_options={"queue_formats": {q: fmt for q in queues}}
    )
    names = iter(queues)
    outcomes = {"delivered": 0, "failed": 0}

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(stored=stored_payloads)
    def check(stored: tuple[bytes, bool]) -> None:
        raw, blob = stored
        queue = next(names)
        insert_raw(table, queue, raw, blob=blob, engine=engine)
        try:
            message = conn.SimpleQueue(queue).get(block=False)
        except Empty:
            (row,) = failed_rows(table, queue, engine=engine)
            assert row["payload"] == raw  # exactly as stored
            assert not UNFORESEEN.match(row["exception"]), row["exception"][:500]
            outcomes["failed"] += 1
        else:
            outcomes["delivered"] += 1
            args, kwargs, _embed = message.decode()
            assert isinstance(args, list) and isinstance(kwargs, dict)
            assert isinstance(message.headers["task"], str) and message.headers["id"]
            message.ack()
            assert failed_rows(table, queue, engine=engine) == []
        assert _left(engine, layout, queue) == 0  # settled, not left held

    try:
        check()
        assert outcomes["delivered"] and outcomes["failed"], outcomes  # both kinds were drawn
    finally:
        conn.release()
        engine.dispose()
        table.close()
