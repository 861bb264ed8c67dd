"""Server-engine behaviour: PostgreSQL wake-ups, surviving a server restart."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from kombu_sqlqueue.store import JobStore

QUEUE = Queue("work", Exchange("work", "direct"), "work")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine_name", ["postgresql"])  # LISTEN/NOTIFY is PostgreSQL's
def test_idle_postgresql_consumer_is_woken_by_notify(engine_name: str, broker_url: str) -> None:
    # Polling so slow that only the NOTIFY path can deliver within the test.
    slow = {"polling_interval": 30, "max_polling_interval": 30}
    got: list[float] = []
    ready = threading.Event()
    stop = threading.Event()

    def consume() -> None:
        with Connection(broker_url, transport_options=slow) as conn:

            def on_message(body: Any, message: Message) -> None:
                got.append(time.monotonic())
                message.ack()

            with Consumer(conn, [QUEUE], callbacks=[on_message]):
                ready.set()
                while not stop.is_set() and not got:
                    with contextlib.suppress(TimeoutError):
                        conn.drain_events(timeout=35)

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        assert ready.wait(10)
        time.sleep(1.0)  # the consumer found nothing and now waits (LISTEN)
        with Connection(broker_url) as producer_conn:
            Producer(producer_conn.channel()).publish(
                {"hi": 1}, exchange=QUEUE.exchange, routing_key="work", declare=[QUEUE]
            )
            sent = time.monotonic()
        consumer.join(10)  # a 30 s poll would miss this; the wake-up does not
        assert got, "the idle consumer was not woken by NOTIFY"
        logging.getLogger(__name__).info("wake-up latency %.1f ms", (got[0] - sent) * 1000)
    finally:
        stop.set()
        consumer.join(40)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine_name", ["postgresql", "mysql"])  # the server engines
def test_producer_and_consumer_survive_a_server_restart(
    db_server: Any, broker_url: str, db_url: str
) -> None:
    total = 300
    sent: list[int] = []
    received: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def produce() -> None:
        try:
            with Connection(broker_url) as conn:
                producer = Producer(conn.channel())
                for i in range(total):
                    producer.publish(
                        {"i": i}, exchange=QUEUE.exchange, routing_key="work", declare=[QUEUE]
                    )
                    sent.append(i)
                    time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    def consume() -> None:
        try:
            # A claim whose reply the restart cut off lapses after the visibility timeout.
            with Connection(broker_url, transport_options={"visibility_timeout": 5}) as conn:

                def on_message(body: Any, message: Message) -> None:
                    received.append(body["i"])
                    message.ack()

                with Consumer(conn, [QUEUE], callbacks=[on_message], prefetch_count=10):
                    deadline = time.monotonic() + 150
                    while len(set(received)) < total and time.monotonic() < deadline:
                        with contextlib.suppress(TimeoutError):
                            conn.drain_events(timeout=1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    while len(received) < total // 3 and not done.is_set():
        time.sleep(0.05)
    db_server.restart()  # every connection of both sides breaks here
    for t in threads:
        t.join(170)
    assert not errors, errors
    assert sorted(set(received)) == list(range(total))  # nothing lost
    store = JobStore(db_url)
    try:
        assert store.backlog("work").total == 0  # every delivery acked
    finally:
        store.close()


@pytest.mark.parametrize("engine_name", ["postgresql"])  # synchronous_commit is PostgreSQL's
def test_synchronous_commit_applies_to_the_queues_connections(
    engine_name: str, db_url: str
) -> None:
    from kombu_sqlqueue.store import StoreOptions

    for mode in ("off", None):
        store = JobStore(db_url, StoreOptions(synchronous_commit=mode))
        try:
            seen = store._exec.run(
                lambda tx: tx.cursor.execute("SHOW synchronous_commit").fetchone()[0]
            )
            assert seen == (mode or "on")  # None: the server's default, "on"
        finally:
            store.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine_name", ["postgresql"])  # LISTEN/NOTIFY is PostgreSQL's
def test_wake_ups_are_for_the_consumers_queues_only(engine_name: str, db_url: str) -> None:
    from kombu_sqlqueue.store import NewJob

    waiter, producer = JobStore(db_url), JobStore(db_url)
    try:
        waiter.ensure_ready()
        waiter.wait_for_jobs(0.01, {"work"})  # LISTEN from here on

        def publish(queue: str) -> None:
            time.sleep(0.3)
            producer.enqueue(NewJob(queue, b"x"))

        other = threading.Thread(target=publish, args=("other",))
        other.start()
        assert waiter.wait_for_jobs(1.5, {"work"}) is False  # not its queue: slept on
        other.join()
        mine = threading.Thread(target=publish, args=("work",))
        mine.start()
        assert waiter.wait_for_jobs(30, {"work"}) is True
        mine.join()
        assert producer.enqueue(NewJob("work", b"y", delay=60))  # delayed: no NOTIFY
        assert waiter.wait_for_jobs(1.0, {"work"}) is False
    finally:
        waiter.close()
        producer.close()
