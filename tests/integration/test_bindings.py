"""Exchanges and bindings stored in askr_bindings: every process routes alike.

Each ``Connection`` has its own Kombu transport and so its own in-memory exchange state, as
separate processes do; only the database is shared. On every engine.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from kombu_sqlqueue.store import JobStore, Route


def bound(store: JobStore, exchange: str) -> list[tuple[str, str, str]]:
    return sorted(store.topology.bindings(exchange))


def test_fanout_reaches_queues_bound_by_other_processes(connect: Any, store: JobStore) -> None:
    bcast = Exchange("bcast", type="fanout")
    for name in ("node1", "node2"):
        Queue(f"{name}.box", bcast, channel=connect().channel()).declare()
    publisher = Producer(connect().channel())  # never declared anything
    publisher.publish({"ping": 1}, exchange=bcast, routing_key="", declare=[bcast])
    assert store.size("node1.box") == 1
    assert store.size("node2.box") == 1
    assert bound(store, "bcast") == [("", "node1.box", "fanout"), ("", "node2.box", "fanout")]


def test_topic_routes_for_a_publisher_that_never_declared_the_exchange(
    connect: Any, store: JobStore
) -> None:
    events = Exchange("ev", type="topic")
    Queue("tasks-only", events, routing_key="task.#", channel=connect().channel()).declare()
    Queue("everything", events, routing_key="#", channel=connect().channel()).declare()
    publisher = Producer(connect().channel())
    publisher.publish({"e": 1}, exchange="ev", routing_key="task.succeeded")
    publisher.publish({"e": 2}, exchange="ev", routing_key="worker.heartbeat")
    assert store.size("tasks-only") == 1
    assert store.size("everything") == 2


def test_nothing_is_stored_for_an_exchange_without_bound_queues(
    connect: Any, store: JobStore
) -> None:
    publisher = Producer(connect().channel())
    publisher.publish({"x": 1}, exchange=Exchange("lonely", type="fanout"), routing_key="",
                      declare=[Exchange("lonely", type="fanout")])  # fmt: skip
    publisher.publish({"x": 2}, exchange="nobody-declared-this", routing_key="k")
    assert store.backlog("lonely").total == 0
    assert bound(store, "lonely") == []


def test_a_binding_made_after_the_table_was_read_is_seen_at_once(
    connect: Any, store: JobStore
) -> None:
    direct = Exchange("replies", type="direct")
    publisher_conn = connect()
    publisher = Producer(publisher_conn.channel())
    publisher.publish({"early": 1}, exchange=direct, routing_key="r1", declare=[direct])
    Queue("r1.queue", direct, routing_key="r1", channel=connect().channel()).declare()
    publisher.publish({"late": 1}, exchange=direct, routing_key="r1")  # table read just before
    assert store.size("r1.queue") == 1


def test_events_with_no_monitor_do_not_read_the_bindings_per_publish(
    broker_url: str, connect: Any, store: JobStore
) -> None:
    # A worker run with -E and nobody listening: a fresh read found nothing bound, so the
    # next publishes are routed nowhere without a SELECT each, until the cache period ends.
    events = Exchange("ev-idle", type="topic")
    conn = Connection(broker_url, transport_options={"bindings_cache_seconds": 0.5})
    try:
        channel = conn.channel()
        reads: list[str] = []
        real_routes = channel.store.topology.routes

        def counted(exchange: str) -> list[Route]:
            reads.append(exchange)
            return real_routes(exchange)

        channel.store.topology.routes = counted  # type: ignore[method-assign]
        publisher = Producer(channel)
        started = time.monotonic()
        for i in range(200):
            publisher.publish(
                {"i": i}, exchange=events, routing_key="task.succeeded", declare=[events]
            )
        elapsed = time.monotonic() - started
        # One read per cache period at most (plus the first), not one per publish.
        assert 1 <= len(reads) <= 2 + int(elapsed / 0.5), (len(reads), elapsed)
        # A monitor binds from another process: seen once the period has passed.
        Queue("monitor.ev", events, routing_key="#", channel=connect().channel()).declare()
        time.sleep(0.6)
        publisher.publish({"late": 1}, exchange=events, routing_key="task.succeeded")
        assert store.size("monitor.ev") == 1
    finally:
        conn.release()


def test_a_reply_queue_bound_again_right_after_a_miss_gets_the_reply(
    connect: Any, store: JobStore
) -> None:
    # A direct miss is not remembered: a client whose reply queue went with its last call
    # binds it again for the next call, and the worker's reply must find it at once.
    replies = Exchange("reply.x", type="direct")
    worker = Producer(connect().channel())
    worker.publish({"late reply": 1}, exchange=replies, routing_key="client1", declare=[replies])
    assert store.backlog("client1.q").total == 0
    Queue("client1.q", replies, routing_key="client1", channel=connect().channel()).declare()
    worker.publish({"reply": 2}, exchange=replies, routing_key="client1")
    assert store.size("client1.q") == 1


def test_auto_delete_queue_goes_with_its_consumer(connect: Any, store: JobStore) -> None:
    bcast = Exchange("bcast2", type="fanout")
    consumer_conn = connect()
    queue = Queue("ephemeral", bcast, auto_delete=True)
    got: list[Any] = []

    def on_message(body: Any, message: Message) -> None:
        got.append(body)
        message.ack()

    publisher = Producer(connect().channel())
    with Consumer(consumer_conn, [queue], callbacks=[on_message]):
        publisher.publish({"n": 1}, exchange=bcast, routing_key="", declare=[bcast])
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                consumer_conn.drain_events(timeout=1)
        assert got == [{"n": 1}]
        assert bound(store, "bcast2") == [("", "ephemeral", "fanout")]
    # The consumer left: the queue and its binding are gone; broadcasts store nothing (a
    # process that read the bindings less than bindings_cache_seconds ago still routes
    # by what it read: a new publisher here).
    assert bound(store, "bcast2") == []
    Producer(connect().channel()).publish({"n": 2}, exchange=bcast, routing_key="")
    assert store.backlog("ephemeral").total == 0


def test_unbind_and_queue_delete_remove_stored_bindings(connect: Any, store: JobStore) -> None:
    direct = Exchange("d", type="direct")
    channel = connect().channel()
    queue = Queue("dq", direct, routing_key="k", channel=channel)
    queue.declare()
    assert bound(store, "d") == [("k", "dq", "direct")]
    queue.unbind_from(direct, routing_key="k")
    assert bound(store, "d") == []
    queue.declare()
    queue.delete()
    assert bound(store, "d") == []


def _transport(conn: Connection) -> Any:
    conn.default_channel  # noqa: B018 — connects
    return conn.transport


def test_a_queue_whose_process_died_expires_with_its_jobs_and_bindings(
    connect: Any, store: JobStore
) -> None:
    bcast = Exchange("bcast3", type="fanout")
    dead = connect()
    Queue("dead.box", bcast, expires=30, channel=dead.channel()).declare()
    _transport(dead).queue_keeper.stop()  # the process is gone: nobody keeps it alive
    Producer(connect().channel()).publish({"n": 1}, exchange=bcast, routing_key="",
                                          declare=[bcast])  # fmt: skip
    assert store.size("dead.box") == 1
    sweeper = _transport(connect())
    sweeper.store.clock = lambda: time.time() + 20
    sweeper.queue_keeper.run_once()
    assert bound(store, "bcast3") == [("", "dead.box", "fanout")]  # not yet 30 s unused
    sweeper.store.clock = lambda: time.time() + 32
    sweeper.queue_keeper.run_once()
    assert bound(store, "bcast3") == []
    assert store.backlog("dead.box").total == 0
    Producer(connect().channel()).publish({"n": 2}, exchange=bcast, routing_key="")
    assert store.backlog("dead.box").total == 0  # nothing routed to it any more


def test_a_live_process_keeps_its_expiring_queue_and_restores_it_if_swept(
    connect: Any, store: JobStore
) -> None:
    bcast = Exchange("bcast4", type="fanout")
    live = connect()
    Queue("live.box", bcast, expires=30, channel=live.channel()).declare()
    keeper = _transport(live).queue_keeper
    # Its rounds driven by the test: a round of its thread landing between the sweep and
    # the check below (a loaded machine delays the thread's first round) restores early.
    keeper.stop()
    keeper.run_once()
    sweeper = _transport(connect())
    sweeper.store.clock = lambda: time.time() + 32  # as if the live process stalled 32 s
    sweeper.queue_keeper.run_once()
    assert bound(store, "bcast4") == []
    keeper.run_once()  # the live process notices and declares and binds it again
    assert bound(store, "bcast4") == [("", "live.box", "fanout")]
    Producer(connect().channel()).publish({"n": 1}, exchange=bcast, routing_key="",
                                          declare=[bcast])  # fmt: skip
    assert store.size("live.box") == 1
