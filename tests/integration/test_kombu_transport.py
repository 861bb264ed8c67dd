"""The transport through Kombu's public API: Connection, Producer, Consumer, SimpleQueue."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from kombu_sqlqueue.exceptions import ConfigurationError, InvalidURL, UnknownTransportOption
from kombu_sqlqueue.store import JobStore, NewJob, Rate


@pytest.fixture
def conn_factory(broker_url: str) -> Iterator[Any]:
    opened: list[Connection] = []

    def make(**options: Any) -> Connection:
        c = Connection(broker_url, transport_options=options)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.release()


def q(name: str = "work") -> Queue:
    return Queue(name, Exchange(name, "direct"), name)


def publish(conn: Connection, bodies: list[Any], queue: Queue | None = None, **kw: Any) -> None:
    queue = queue or q()
    producer = Producer(conn.channel())
    for body in bodies:
        producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key,
                         declare=[queue], **kw)  # fmt: skip


def drain(conn: Connection, queue: Queue, count: int, ack: bool = True, **kw: Any) -> list[Any]:
    got: list[Any] = []

    def on_message(body: Any, message: Message) -> None:
        got.append((body, message))
        if ack:
            message.ack()

    with Consumer(conn, [queue], callbacks=[on_message], **kw):
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=1)
    return got


def test_publish_consume_ack_round_trip(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    publish(conn, [{"n": i} for i in range(10)])
    assert store.size("work") == 10
    got = drain(conn, q(), 10)
    assert [b["n"] for b, _ in got] == list(range(10))
    assert store.backlog("work").total == 0


def test_message_properties_survive(conn_factory: Any) -> None:
    conn = conn_factory()
    publish(conn, ["x"], headers={"h": 1}, correlation_id="c-1")
    ((body, message),) = drain(conn, q(), 1)
    assert body == "x" and message.headers["h"] == 1
    assert message.properties["correlation_id"] == "c-1"
    assert message.delivery_info["routing_key"] == "work"
    assert message.delivery_info["redelivered"] is False


def test_priority_high_first_by_default(conn_factory: Any) -> None:
    conn = conn_factory()
    for p in (0, 9, 3):
        publish(conn, [p], priority=p)
    assert [b for b, _ in drain(conn, q(), 3)] == [9, 3, 0]


def test_priority_low_first_for_redis_users(conn_factory: Any) -> None:
    conn = conn_factory(priority_order="low_first")
    for p in (5, 0, 9):
        publish(conn, [p], priority=p)
    assert [b for b, _ in drain(conn, q(), 3)] == [0, 5, 9]


def test_celery_eta_header_delays_availability(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    eta = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    publish(conn, ["later"], headers={"eta": eta, "id": "task-7"})
    assert store.backlog("work").ready == 0 and store.size("work") == 1
    assert q()(conn.channel()).get() is None


def test_reject_with_requeue_releases_at_once_counting_the_attempt(
    conn_factory: Any, store: JobStore
) -> None:
    # As Redis and RabbitMQ requeue (Kombu's test_requeue; Celery's Reject(requeue=True)):
    # ready at once whatever the backoff; the attempt stays counted.
    conn = conn_factory(backoff_base=3600)
    publish(conn, ["again"])
    message = q()(conn.channel()).get()
    assert message is not None
    message.reject(requeue=True)
    (row,) = _rows(store)
    assert row["reserved_until"] is None and row["attempts"] == 1
    assert row["available_at"] <= time.time()
    again = q()(conn.channel()).get()
    assert again is not None and again.payload == "again" and again.delivery_info["redelivered"]


def test_a_consumer_raising_releases_its_message_with_backoff(
    conn_factory: Any, store: JobStore
) -> None:
    conn = conn_factory(backoff_base=10)
    publish(conn, ["fails"])

    def explode(body: Any, message: Any) -> None:
        raise RuntimeError("the application failed")

    with (
        Consumer(conn, [q()], callbacks=[explode]),
        pytest.raises(RuntimeError, match="application failed"),
    ):
        for _ in range(50):
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.05)
    (row,) = _rows(store)
    assert row["reserved_until"] is None and row["attempts"] == 1
    assert 5 <= row["available_at"] - time.time() <= 11  # [base/2, base] for attempt 1


def test_reject_without_requeue_dead_letters(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    publish(conn, ["bad"], headers={"id": "task-9"})
    message = q()(conn.channel()).get()
    message.reject(requeue=False)
    assert store.size("work") == 0
    (dead,) = store.dead_letters()
    assert dead.uuid == "task-9" and "rejected" in (dead.exception or "")
    assert json.loads(dead.payload)["headers"]["id"] == "task-9"


def test_purge_size_and_delete(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    publish(conn, list(range(5)))
    bound = q()(conn.channel())
    held = bound.get()
    assert bound.queue_declare().message_count == 4
    assert bound.purge() == 4
    assert store.backlog("work").total == 1  # the held one survives a purge
    held.ack()
    publish(conn, [1])
    bound.delete()
    assert store.backlog("work").total == 0


def test_malformed_row_is_dead_lettered_not_delivered_or_replayed(
    conn_factory: Any, store: JobStore
) -> None:
    store.enqueue(NewJob("work", b"\xff not json", uuid="broken"))
    conn = conn_factory()
    publish(conn, ["fine"])
    got = drain(conn, q(), 1)
    assert [b for b, _ in got] == ["fine"]
    (dead,) = store.dead_letters()
    assert dead.uuid == "broken" and "malformed" in (dead.exception or "")
    assert store.backlog("work").total == 0


def test_close_returns_unacked_deliveries(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    publish(conn, ["held"])
    message = q()(conn.channel()).get()
    assert message is not None and store.backlog("work").ready == 0
    conn.release()
    (row,) = _rows(store)
    assert row["reserved_until"] is None and row["attempts"] == 0  # unstarted: refunded


def test_no_ack_consumers_settle_on_receipt(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory()
    publish(conn, [1, 2])
    got = drain(conn, q(), 2, ack=False, no_ack=True)
    assert len(got) == 2 and store.backlog("work").total == 0


def test_held_reservations_are_renewed_past_the_visibility_timeout(
    conn_factory: Any, broker_url: str, store: JobStore
) -> None:
    holder = conn_factory(visibility_timeout=1, renew_interval=0.2)
    publish(holder, ["long task"])
    message = q()(holder.channel()).get()
    assert message is not None
    other = conn_factory(visibility_timeout=1)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert q()(other.channel()).get() is None
        time.sleep(0.25)
    message.ack()
    assert store.backlog("work").total == 0


def test_ack_after_takeover_is_stale(conn_factory: Any, store: JobStore) -> None:
    first = conn_factory(visibility_timeout=1)
    publish(first, ["contested"])
    late = q()(first.channel()).get()
    first.transport.renewer.stop()  # A freezes (the e2e suite does it with SIGSTOP)
    time.sleep(2.1)  # A's reservation lapses
    second = conn_factory(visibility_timeout=30)
    winner = q()(second.channel()).get()
    assert winner is not None and winner.delivery_info["redelivered"] is True
    late.ack()  # stale: writes nothing
    (row,) = _rows(store)
    assert row["attempts"] == 2
    winner.ack()
    assert _rows(store) == []


def test_driver_type_keeps_celery_features_on(conn_factory: Any) -> None:
    transport = conn_factory().transport
    assert transport.driver_type == "sqlqueue"  # not 'sql': Celery disables events for that


def test_unknown_transport_option_is_refused(broker_url: str) -> None:
    with pytest.raises(UnknownTransportOption):
        Connection(broker_url, transport_options={"fanout_prefix": True}).connect()


def test_in_memory_sqlite_url_is_refused() -> None:
    with pytest.raises(InvalidURL, match="in-memory"):
        Connection("sqlqueue+sqlite://").connect()


def _rows(store: JobStore) -> list[dict[str, Any]]:
    with store._db.connect() as c:
        return [dict(r) for r in c.exec_driver_sql("SELECT * FROM askr_jobs").mappings()]


def test_a_forked_child_uses_its_own_connections(broker_url: str, store: JobStore) -> None:
    import os

    conn = Connection(broker_url)
    publish(conn, ["before fork"])
    pid = os.fork()
    if pid == 0:  # child: publish through the inherited transport, then leave at once
        code = 1
        try:
            publish(conn, ["from child"])
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    publish(conn, ["after fork"])
    assert [b for b, _ in drain(conn, q(), 3)] == ["before fork", "from child", "after fork"]
    conn.release()


def test_a_no_ack_consumer_gets_one_message_per_drain_events(conn_factory: Any) -> None:
    # Kombu's pidbox collects `limit` replies with one drain_events call each; a call that
    # handed over two would leave it waiting its whole timeout for a reply it already had.
    conn = conn_factory()
    publish(conn, [{"n": i} for i in range(3)], queue=q("replies"))
    got: list[Any] = []
    with Consumer(conn, [q("replies")], callbacks=[lambda body, _m: got.append(body)],
                  no_ack=True):  # fmt: skip
        for expected in (1, 2, 3):
            conn.drain_events(timeout=5)
            assert len(got) == expected
    assert [b["n"] for b in got] == [0, 1, 2]


def test_transient_messages_in_a_burst_are_written_together_and_none_is_lost(
    conn_factory: Any, store: JobStore
) -> None:
    # delivery_mode=1, as Celery's events and control messages. A long interval makes the
    # batching visible: the first is written at once, the burst after it is held.
    conn = conn_factory(transient_flush_interval=30)
    publish(conn, [{"n": i} for i in range(50)], delivery_mode=1)
    assert store.size("work") == 1
    conn.release()  # closing writes what is held
    assert store.size("work") == 50


def test_transient_batching_can_be_switched_off(conn_factory: Any, store: JobStore) -> None:
    conn = conn_factory(transient_flush_interval=0)
    publish(conn, [{"n": i} for i in range(5)], delivery_mode=1)
    assert store.size("work") == 5


def test_transient_messages_held_at_exit_are_written(broker_url: str, store: JobStore) -> None:
    # A process that exits without closing its connection (Flower on SIGTERM does).
    script = (
        "import sys\n"
        "from kombu import Connection, Exchange, Producer, Queue\n"
        "conn = Connection(sys.argv[1], transport_options={'transient_flush_interval': 30})\n"
        "q = Queue('work', Exchange('work', 'direct'), 'work')\n"
        "p = Producer(conn.channel())\n"
        "for i in range(20):\n"
        "    p.publish({'n': i}, exchange=q.exchange, routing_key='work', declare=[q],\n"
        "              delivery_mode=1)\n"
    )
    subprocess.run([sys.executable, "-c", script, broker_url], check=True, timeout=60)
    assert store.size("work") == 20


def test_a_persistent_message_is_written_after_the_transient_ones_held_before_it(
    conn_factory: Any,
) -> None:
    conn = conn_factory(transient_flush_interval=30)
    publish(conn, [{"n": 1}, {"n": 2}], delivery_mode=1)  # the second is held
    publish(conn, [{"n": 3}])  # persistent
    got = drain(conn_factory(), q(), 3)
    assert [b["n"] for b, _ in got] == [1, 2, 3]


def test_a_forked_child_neither_duplicates_nor_deletes_what_its_parent_holds(
    conn_factory: Any, store: JobStore
) -> None:
    conn = conn_factory(transient_flush_interval=30)
    publish(conn, [{"n": 1}, {"n": 2}], delivery_mode=1)  # the second is held
    events = Queue("parent.events", Exchange("ev.fork", "topic"), "#", auto_delete=True)
    with Consumer(conn, [events], callbacks=[lambda *_: None]):
        pid = os.fork()
        if pid == 0:  # the child exits normally: its exit hooks run
            try:
                atexit._run_exitfuncs()
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert store.size("work") == 1  # the parent's held message was not written twice
        assert store.topology.bindings("ev.fork") == [("#", "parent.events", "topic")]
    conn.release()
    assert store.size("work") == 2


def test_limits_declared_in_queue_options_are_written_when_consuming_starts(
    conn_factory: Any, store: JobStore
) -> None:
    """``queue_options={"work": {"concurrency": 2, "rate_limit": "20/s"}}``: the queue's
    fleet-wide limits, written to its controls by the first consumer — a Celery worker's
    ``broker_transport_options`` — and the consumer drains under them."""
    publish(conn_factory(), list(range(6)))
    assert store.controls() == []
    conn = conn_factory(queue_options={"work": {"concurrency": 2, "rate_limit": "20/s"}})
    got = drain(conn, q(), 6)
    assert sorted(body for body, _m in got) == list(range(6))
    (control,) = store.controls()
    assert (control.queue, control.concurrency, control.rate) == ("work", 2, Rate(20, 1.0))


def test_a_limit_declared_for_another_formats_queue_is_a_configuration_error(
    conn_factory: Any,
) -> None:
    conn = conn_factory(
        queue_formats={"work": "laravel"},
        queue_options={"work": {"concurrency": 2}},
    )
    with pytest.raises(ConfigurationError, match="declares a limit"):
        drain(conn, q(), 1)
