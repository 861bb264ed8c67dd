"""The Kombu transport over the in-memory store (``sqlqueue+memory://``): no database.

Each ``Connection`` has its own transport and store object, as separate processes would;
they share the data of their ``memory://`` name. Time is the stores' clocks, set by the
tests instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue
from support import T0

from kombu_sqlqueue.store import MemoryJobStore, NewJob

#: Fast polls: an idle consumer in these tests waits for nothing.
FAST = {"polling_interval": 0.01, "max_polling_interval": 0.02}

Connect = Callable[..., Connection]


@pytest.fixture
def connect(url: str) -> Iterator[Connect]:
    """Open a Connection on the test's memory store (released at the end)."""
    opened: list[Connection] = []

    def make(**options: Any) -> Connection:
        conn = Connection(f"sqlqueue+{url}", transport_options={**FAST, **options})
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.release()


@pytest.fixture
def store(url: str) -> MemoryJobStore:
    """The test's memory store, as an inspector sees it."""
    return MemoryJobStore(url)


def store_of(conn: Connection) -> MemoryJobStore:
    found = conn.transport.store
    assert isinstance(found, MemoryJobStore)
    return found


def work(name: str = "work") -> Queue:
    return Queue(name, Exchange(name, "direct"), name)


def publish(conn: Connection, bodies: list[Any], queue: Queue | None = None, **kw: Any) -> None:
    queue = queue or work()
    producer = Producer(conn.channel())
    for body in bodies:
        producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key,
                         declare=[queue], correlation_id=str(body), **kw)  # fmt: skip


def drain(conn: Connection, queue: Queue, count: int, **kw: Any) -> list[Any]:
    got: list[Any] = []

    def on_message(body: Any, message: Message) -> None:
        got.append(body)
        message.ack()

    with Consumer(conn, [queue], callbacks=[on_message], **kw):
        deadline = time.monotonic() + 5
        while len(got) < count and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.1)
    return got


def attempts_by_correlation_id(store: MemoryJobStore) -> dict[str, int]:
    return {
        json.loads(r["payload"])["properties"]["correlation_id"]: r["attempts"]
        for r in store.rows()
    }


def test_publish_consume_ack(connect: Connect, store: MemoryJobStore) -> None:
    conn = connect()
    publish(conn, [{"n": i} for i in range(10)])
    assert store.size("work") == 10
    assert [b["n"] for b in drain(conn, work(), 10)] == list(range(10))
    assert store.backlog("work").total == 0 and store.dead_letters() == []


def test_two_connections_share_the_queues_of_their_name(connect: Connect, url: str) -> None:
    publish(connect(), ["across"])
    assert drain(connect(), work(), 1) == ["across"]
    other = Connection("sqlqueue+memory://another-name", transport_options=FAST)
    try:
        assert work()(other.channel()).get() is None  # another name: other data
    finally:
        other.release()


def test_reject_with_requeue_releases_at_once_and_counts_the_attempt(
    connect: Connect, store: MemoryJobStore
) -> None:
    # As Redis and RabbitMQ requeue: no backoff (backoff_base=10 applies to consumer errors).
    conn = connect(backoff_base=10)
    store_of(conn).clock = lambda: T0
    publish(conn, ["again"])
    message = work()(conn.channel()).get()
    assert message is not None
    message.reject(requeue=True)
    (row,) = store.rows()
    assert row["reserved_until"] is None and row["attempts"] == 1
    assert row["available_at"] <= T0
    again = work()(conn.channel()).get()
    assert again is not None and again.payload == "again"
    assert again.delivery_info["redelivered"] is True
    again.reject(requeue=True)
    (row,) = store.rows()
    assert row["attempts"] == 2  # counted: requeued forever, it is dead-lettered at the limit


def test_reject_without_requeue_dead_letters_with_a_reason(
    connect: Connect, store: MemoryJobStore
) -> None:
    conn = connect()
    publish(conn, ["bad"], headers={"id": "task-9"})
    message = work()(conn.channel()).get()
    assert message is not None
    message.reject(requeue=False)
    assert store.size("work") == 0
    (dead,) = store.dead_letters()
    assert dead.uuid == "task-9" and dead.attempts == 1
    assert dead.exception == "rejected by the consumer without requeue (attempt 1)"
    assert json.loads(dead.payload)["headers"]["id"] == "task-9"


def test_a_consumer_crashing_mid_batch_hands_back_the_rest_refunded(
    connect: Connect, store: MemoryJobStore
) -> None:
    conn = connect()
    publish(conn, ["a", "b", "c", "d"])

    def explode(body: Any, message: Message) -> None:
        if body == "b":
            raise RuntimeError("the application failed on b")
        message.ack()

    with (
        Consumer(conn, [work()], callbacks=[explode], prefetch_count=4),
        pytest.raises(RuntimeError, match="failed on b"),
    ):
        for _ in range(50):
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.05)
    # a: acked. b: released with backoff, its attempt counted. c, d: never handed over,
    # handed back at once with their attempts refunded.
    assert attempts_by_correlation_id(store) == {"b": 1, "c": 0, "d": 0}
    assert [r["reserved_until"] for r in store.rows()] == [None, None, None]
    assert store.backlog("work").ready == 2  # c and d; b waits out its backoff


def test_a_lapsed_reservation_is_redelivered_to_another_connection(
    connect: Connect, store: MemoryJobStore, caplog: pytest.LogCaptureFixture
) -> None:
    first = connect(visibility_timeout=30)
    store_of(first).clock = lambda: T0
    publish(first, ["contested"])
    late = work()(first.channel()).get()
    assert late is not None
    second = connect(visibility_timeout=30)
    store_of(second).clock = lambda: T0 + 29
    assert work()(second.channel()).get() is None  # still reserved by the first
    store_of(second).clock = lambda: T0 + 30  # the first froze past its reservation
    winner = work()(second.channel()).get()
    assert winner is not None and winner.payload == "contested"
    assert winner.delivery_info["redelivered"] is True
    with caplog.at_level(logging.WARNING, logger="kombu_sqlqueue.qos"):
        late.ack()  # fenced: the first's settlement writes nothing
    assert "stale ack" in caplog.text
    (row,) = store.rows()
    assert row["attempts"] == 2
    winner.ack()
    assert store.rows() == []


def test_priority_high_first(connect: Connect) -> None:
    conn = connect()
    for p in (0, 9, 3):
        publish(conn, [p], priority=p)
    assert drain(conn, work(), 3) == [9, 3, 0]


def test_a_malformed_stored_row_is_dead_lettered_and_the_consumer_goes_on(
    connect: Connect, store: MemoryJobStore
) -> None:
    store.enqueue(NewJob("work", b"\xff not json", uuid="broken"))
    conn = connect()
    publish(conn, ["fine"])
    assert drain(conn, work(), 1) == ["fine"]
    (dead,) = store.dead_letters()
    assert dead.uuid == "broken" and dead.payload == b"\xff not json"
    assert (dead.exception or "").startswith("malformed stored message")
    assert store.backlog("work").total == 0


def test_topic_routes_by_bindings_another_connection_stored(
    connect: Connect, store: MemoryJobStore
) -> None:
    events = Exchange("ev", type="topic")
    Queue("tasks-only", events, routing_key="task.#", channel=connect().channel()).declare()
    Queue("everything", events, routing_key="#", channel=connect().channel()).declare()
    publisher = Producer(connect().channel())  # never declared the exchange
    publisher.publish({"e": 1}, exchange="ev", routing_key="task.succeeded")
    publisher.publish({"e": 2}, exchange="ev", routing_key="worker.heartbeat")
    assert store.size("tasks-only") == 1 and store.size("everything") == 2
    assert sorted(store.topology.bindings("ev")) == [
        ("#", "everything", "topic"),
        ("task.#", "tasks-only", "topic"),
    ]


def test_fanout_reaches_every_queue_bound_by_another_connection(
    connect: Connect, store: MemoryJobStore
) -> None:
    bcast = Exchange("bcast", type="fanout")
    for name in ("node1", "node2"):
        Queue(f"{name}.box", bcast, channel=connect().channel()).declare()
    Producer(connect().channel()).publish({"ping": 1}, exchange=bcast, routing_key="",
                                          declare=[bcast])  # fmt: skip
    assert store.size("node1.box") == 1 and store.size("node2.box") == 1
    assert drain(connect(), Queue("node2.box", bcast), 1) == [{"ping": 1}]


def test_an_idle_consumer_wakes_on_a_publish(connect: Connect) -> None:
    """The memory store's wait ends at an enqueue: no polling interval to sit out."""
    consumer, publisher = connect(polling_interval=5, max_polling_interval=5), connect()
    publish(publisher, [])  # declared, so the thread below only publishes
    got: list[Any] = []
    later = threading.Timer(0.2, publish, (publisher, ["wake"]))
    with Consumer(consumer, [work()], callbacks=[lambda b, m: (got.append(b), m.ack())]):
        started = time.monotonic()
        later.start()
        consumer.drain_events(timeout=3)  # finds nothing, waits up to 3 s, woken at 0.2 s
    later.join()
    assert got == ["wake"] and time.monotonic() - started < 1


def test_a_consumer_whose_prefetch_is_full_waits_for_an_ack_not_a_back_off(
    connect: Connect,
) -> None:
    """A Celery prefork worker's pool busy: every delivery its prefetch allows is held, so no
    claim is made. Its wait is not an idle poll (the back-off would grow while the queues are
    full), and an ack — from another thread, as Celery's result handler acks — ends it."""
    conn = connect(max_polling_interval=5)
    exchange = Exchange("e", "direct")
    queue = Queue("full", exchange, "full")
    got: list[Message] = []
    with conn.channel() as channel:
        producer = Producer(channel, exchange, routing_key="full")
        queue(channel).declare()
        for i in range(3):
            producer.publish({"i": i})
        with Consumer(channel, [queue], callbacks=[lambda _b, m: got.append(m)], prefetch_count=1):
            conn.drain_events(timeout=1)
            assert len(got) == 1
            for _ in range(3):  # the prefetch is full: nothing is claimed, no back-off grows
                with pytest.raises(TimeoutError):
                    conn.drain_events(timeout=0.05)
            transport = conn.transport
            assert transport._idle_rounds == 0
            acker = threading.Timer(0.1, got[0].ack)
            acker.start()
            conn.drain_events(timeout=4)  # a back-off would wait max_polling_interval (5 s)
            acker.join()
            assert [m.decode()["i"] for m in got] == [0, 1]
