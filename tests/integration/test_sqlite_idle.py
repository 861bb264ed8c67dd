"""SQLite's idle consumers: an empty poll takes no write lock, and a commit wakes them.

SQLite has one write lock for the whole file. A claim that found nothing used to take it
all the same (``BEGIN IMMEDIATE``), so idle consumers took it from the producer in turn;
and with no wake-up they slept up to ``max_polling_interval`` through a burst.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from kombu import Connection, Consumer, Producer, Queue

from kombu_sqlqueue.store import JobStore, NewJob, StoreOptions
from kombu_sqlqueue.store.engines.sqlite import SQLiteListener


def test_an_empty_claim_does_not_wait_for_the_write_lock(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    store = JobStore(f"sqlite:///{db}", StoreOptions(busy_timeout=0.05))
    store.enqueue(NewJob("other", b"{}"))  # the tables exist; queue "q" is empty
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        # Another process's open write transaction (an application's, a producer's).
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO orders DEFAULT VALUES")
        # Looks (a read: WAL readers never wait for the writer), finds nothing, returns;
        # a claim that took the lock first would fail busy after its retries instead.
        assert store.claim("q", 4, 30).jobs == []
        # A ready job is claimed with the lock, so it waits for the writer as before.
        writer.execute("ROLLBACK")
        store.enqueue(NewJob("q", b"{}"))
        assert len(store.claim("q", 4, 30).jobs) == 1
    finally:
        writer.close()
        store.close()


def test_a_waiting_consumer_wakes_on_another_process_commit(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    store = JobStore(f"sqlite:///{db}")
    store.enqueue(NewJob("q", b"{}"))
    listener = SQLiteListener(str(db))
    try:
        assert listener.wait(0.01) is False  # nothing committed since it first looked
        results: list[bool] = []
        waiting = threading.Thread(target=lambda: results.append(listener.wait(60.0)))
        waiting.start()
        # A commit from another process ends the 60 s wait.
        subprocess.run(
            [sys.executable, "-c", _ENQUEUE_ONE, str(db)],
            check=True,
            timeout=60,
        )
        waiting.join(60)
        assert results == [True]
        # A commit made while nobody waited ends the next wait at once.
        store.enqueue(NewJob("q", b"{}"))
        assert listener.wait(60.0) is True
    finally:
        listener.close()
        store.close()


_ENQUEUE_ONE = """
import sys
from kombu_sqlqueue.store import JobStore, NewJob
store = JobStore(f"sqlite:///{sys.argv[1]}")
store.enqueue(NewJob("q", b"{}"))
store.close()
"""


def test_an_idle_kombu_consumer_is_woken_not_polled(tmp_path: Path) -> None:
    # Polling every 60 s: the idle wait before the second message ends woken (True), not
    # at its timeout (a polled consumer's wait would time out and claim after it).
    url = f"sqlqueue+sqlite:///{tmp_path / 'queue.db'}"
    options = {"polling_interval": 60.0, "max_polling_interval": 60.0}
    queue = Queue("woken", routing_key="woken")
    received: list[str] = []
    waits: list[bool] = []
    with (
        Connection(url, transport_options=options) as consumer_conn,
        Connection(url) as producer_conn,
    ):
        Producer(producer_conn).publish("first", routing_key="woken", declare=[queue])

        def on_message(body: str, message: object) -> None:
            received.append(body)
            message.ack()  # type: ignore[attr-defined]

        with Consumer(consumer_conn, [queue], callbacks=[on_message]):
            consumer_conn.drain_events(timeout=30)
            assert received == ["first"]
            store = consumer_conn.transport.store
            wait_for_jobs = store.wait_for_jobs

            def recorded(*args: object, **kwargs: object) -> bool:
                woken = bool(wait_for_jobs(*args, **kwargs))
                waits.append(woken)
                return woken

            store.wait_for_jobs = recorded

            def publish_later() -> None:
                with Connection(url) as later:
                    Producer(later).publish("second", routing_key="woken")

            # The consumer is idle (its queue drained) when the second message commits.
            threading.Timer(0.3, publish_later).start()
            consumer_conn.drain_events(timeout=30)
            assert received == ["first", "second"]
            assert waits and waits[-1] is True
