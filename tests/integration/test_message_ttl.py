"""Message time to live over the transport: ``expiration``, ``x-message-ttl``, on every engine.

AMQP discards a message that outlived its TTL (the shorter of its own ``expiration`` and its
queue's ``x-message-ttl``) instead of delivering it. Celery relies on it for its control and
event queues (``control_queue_ttl``, ``event_queue_ttl``) and sets ``expiration`` on a task
sent with ``expires``. Each connection below is a separate transport, as separate processes
are; the consuming side's clock is moved forward instead of sleeping.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from celery import Celery
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from kombu_sqlqueue.store import JobStore


def later(conn: Connection, seconds: float) -> Connection:
    """Run ``conn``'s transport ``seconds`` in the future."""
    conn.default_channel  # noqa: B018 — connects
    conn.transport.store.clock = lambda: time.time() + seconds
    return conn


def drain(conn: Connection, queue: Queue, rounds: int = 3) -> list[Any]:
    got: list[Any] = []

    def on_message(body: Any, message: Message) -> None:
        got.append(body)
        message.ack()

    with Consumer(conn, [queue], callbacks=[on_message]):
        for _ in range(rounds):
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.3)
    return got


def expires_at(store: JobStore, queue: str) -> list[int | None]:
    with store._db.connect() as c:
        rows = c.exec_driver_sql(
            "SELECT expires_at FROM askr_jobs WHERE queue = %s ORDER BY id"
            if store.engine.name != "sqlite"
            else "SELECT expires_at FROM askr_jobs WHERE queue = ? ORDER BY id",
            (queue,),
        ).fetchall()
    return [r[0] for r in rows]


def test_a_message_past_its_expiration_is_not_delivered(connect: Any, store: JobStore) -> None:
    queue = Queue("ttl.q", Exchange("ttl.x", type="direct"), routing_key="ttl.q")
    publisher = Producer(connect().channel())
    publisher.publish({"n": 1}, exchange=queue.exchange, routing_key="ttl.q", declare=[queue],
                      expiration=2)  # fmt: skip
    publisher.publish({"n": 2}, exchange=queue.exchange, routing_key="ttl.q")
    now = int(time.time())
    first, second = expires_at(store, "ttl.q")
    assert first is not None and now + 2 <= first <= now + 4
    assert second is None
    assert drain(later(connect(), 10), queue) == [{"n": 2}]
    assert store.backlog("ttl.q").total == 0  # discarded, not left behind
    assert store.dead_letters() == []  # an expired message is not a failure


def test_a_message_within_its_expiration_is_delivered(connect: Any, store: JobStore) -> None:
    queue = Queue("ttl.ok", Exchange("ttl.x2", type="direct"), routing_key="ttl.ok")
    Producer(connect().channel()).publish(
        {"n": 1}, exchange=queue.exchange, routing_key="ttl.ok", declare=[queue], expiration=60
    )
    assert drain(connect(), queue) == [{"n": 1}]


def test_queue_ttl_declared_by_the_consumer_stamps_another_process_publishes(
    connect: Any, store: JobStore
) -> None:
    events = Exchange("ev.ttl", type="topic")
    monitor_conn = connect()
    monitor_queue = Queue("monitor.ttl", events, routing_key="#", message_ttl=5.0)
    monitor_queue(monitor_conn.channel()).declare()
    worker = Producer(connect().channel())  # never declared the monitor's queue
    # The queue's 5 s is shorter than the first message's own 60 s; the second's 1 s wins.
    worker.publish({"type": "task-succeeded"}, exchange=events, routing_key="task.succeeded",
                   declare=[events], expiration=60)  # fmt: skip
    worker.publish({"type": "worker-heartbeat"}, exchange=events, routing_key="worker.heartbeat",
                   expiration=1)  # fmt: skip
    now = int(time.time())
    first, second = expires_at(store, "monitor.ttl")
    assert first is not None and now + 5 <= first <= now + 7
    assert second is not None and now + 1 <= second <= now + 3
    assert drain(later(connect(), 3), monitor_queue) == [{"type": "task-succeeded"}]


def test_the_queue_keeper_discards_expired_messages_nobody_consumes(
    connect: Any, store: JobStore
) -> None:
    replies = Exchange("reply.ttl", type="direct")
    client = connect()
    Queue("client.reply", replies, routing_key="c1", message_ttl=2.0)(client.channel()).declare()
    Producer(connect().channel()).publish({"reply": 1}, exchange=replies, routing_key="c1",
                                          declare=[replies])  # fmt: skip
    keeper_conn = connect()
    keeper_conn.default_channel  # noqa: B018 — connects
    keeper = keeper_conn.transport.queue_keeper
    keeper.run_once()
    assert store.backlog("client.reply").total == 1  # young: kept
    keeper_conn.transport.store.clock = lambda: time.time() + 10
    keeper.run_once()
    assert store.backlog("client.reply").total == 0


def test_a_celery_task_sent_with_expires_is_kept_for_its_worker_to_revoke(
    broker_url: str, store: JobStore
) -> None:
    """Celery turns ``expires`` into the message's ``expiration``; the row keeps no TTL, so
    a worker receives the expired task and marks it REVOKED, as on Redis (discarded here,
    its result would stay PENDING forever). Other messages keep their TTL."""
    app = Celery("ttl", broker=broker_url, set_as_current=False)
    try:
        app.send_task("anything", queue="celery.ttl", expires=30)
        app.send_task("anything", queue="celery.ttl")
        with app.connection_for_write() as conn:
            Producer(conn.channel()).publish(
                {"not": "a task"}, routing_key="celery.ttl", expiration=30,
                declare=[Queue("celery.ttl")],
            )  # fmt: skip
    finally:
        app.close()
    now = int(time.time())
    task, plain_task, other = expires_at(store, "celery.ttl")
    assert task is None and plain_task is None
    assert other is not None and now + 29 <= other <= now + 31


def test_a_queue_declared_again_without_a_ttl_is_no_longer_stamped(
    broker_url: str, connect: Any, store: JobStore
) -> None:
    exchange = Exchange("ttl.re", type="direct")
    Queue("re.q", exchange, routing_key="re", message_ttl=1.0)(connect().channel()).declare()
    publisher_conn = Connection(broker_url, transport_options={"bindings_cache_seconds": 0.2})
    try:
        publisher = Producer(publisher_conn.channel())
        publisher.publish({"n": 1}, exchange=exchange, routing_key="re", declare=[exchange])
        assert expires_at(store, "re.q")[0] is not None  # the publisher learnt the TTL
        store.topology.drop_queue("re.q")
        Queue("re.q", exchange, routing_key="re")(connect().channel()).declare()  # no TTL now
        time.sleep(0.3)  # the publisher's bindings cache period
        publisher.publish({"n": 2}, exchange=exchange, routing_key="re")
        assert expires_at(store, "re.q") == [None]
    finally:
        publisher_conn.release()
