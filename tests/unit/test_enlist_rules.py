"""``enlist``'s rules without a database server: which enlistment is current (innermost,
this thread's only, none once a block ended), what it refuses, the in-memory broker (no
database to share a transaction with), and the ``django_atomic`` option."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from kombu import Connection

from kombu_sqlqueue import enlist
from kombu_sqlqueue.exceptions import ConfigurationError, EnlistError, WrongDatabase
from kombu_sqlqueue.options import TransportOptions
from kombu_sqlqueue.store.enlist import current


def test_the_innermost_block_of_this_thread_is_current_and_none_after(tmp_path: Path) -> None:
    outer, inner = sqlite3.connect(tmp_path / "a.db"), sqlite3.connect(tmp_path / "a.db")
    seen_by_thread: list[object] = []
    assert current() is None
    with enlist(outer) as first:
        assert current() is first
        with enlist(inner) as second:
            assert current() is second and second.source is inner
            thread = threading.Thread(target=lambda: seen_by_thread.append(current()))
            thread.start()
            thread.join()
        assert current() is first
    assert current() is None and first.closed and first.connection() is None
    assert seen_by_thread == [None]  # a new thread starts with no enlistment


@pytest.mark.parametrize("given", ["sqlite:///q.db", 42, object()])
def test_what_is_no_connection_is_refused_at_once(given: object) -> None:
    refused = pytest.raises(EnlistError, match="takes a SQLAlchemy Connection or Session")
    with refused, enlist(given):
        pass


def test_an_in_memory_broker_refuses_an_enlisted_publish_and_writes_nothing(
    tmp_path: Path,
) -> None:
    app = sqlite3.connect(tmp_path / "app.db")
    app.execute("CREATE TABLE t (x)")
    with Connection(f"sqlqueue+memory://{uuid.uuid4().hex}") as broker:
        queue = broker.SimpleQueue("q")
        with enlist(app), pytest.raises(WrongDatabase, match="in-memory store"):
            queue.put("never")
        assert queue.qsize() == 0
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
        with engine.connect() as conn, enlist(conn):  # no transaction open: as usual
            queue.put("at once")
        engine.dispose()
        assert queue.qsize() == 1


@pytest.mark.parametrize(
    ("given", "parsed"), [(True, "default"), ("replica", "replica"), (False, None), (None, None)]
)
def test_the_django_atomic_option_names_a_database_alias(given: object, parsed: object) -> None:
    assert TransportOptions.from_mapping({"django_atomic": given}).django_atomic == parsed


@pytest.mark.parametrize("given", [1, "", ["default"]])
def test_a_django_atomic_that_is_no_alias_is_refused(given: object) -> None:
    with pytest.raises(ConfigurationError, match="django_atomic is a Django database alias"):
        TransportOptions.from_mapping({"django_atomic": given})


def test_an_asyncio_task_outside_the_block_is_not_enlisted(tmp_path: Path) -> None:
    """Each asyncio task has its own context: a block in one never covers another's
    publishes, even while both run."""
    import asyncio

    conn = sqlite3.connect(tmp_path / "a.db")
    seen: dict[str, object] = {}

    async def inside(ready: asyncio.Event, done: asyncio.Event) -> None:
        with enlist(conn) as mine:
            ready.set()
            await done.wait()
            seen["inside"] = current() is mine

    async def outside(ready: asyncio.Event, done: asyncio.Event) -> None:
        await ready.wait()
        seen["outside"] = current()
        done.set()

    async def main() -> None:
        ready, done = asyncio.Event(), asyncio.Event()
        await asyncio.gather(inside(ready, done), outside(ready, done))

    asyncio.run(main())
    assert seen == {"inside": True, "outside": None}
