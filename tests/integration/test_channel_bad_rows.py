"""Bad rows through the real channel (a real SQLite file): the consumer never raises.

The property test stores arbitrary rows — random bytes, random JSON, real Kombu
messages with a field replaced by any value, nesting of any depth — and drains
them with a Kombu consumer that handles what Kombu leaves to it (``on_decode_error``,
as Celery does). Every row is delivered and acked or dead-lettered; drain_events
never raises. Also here: the delivery rules of what counts as an attempt.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection, Consumer, Message, Producer, Queue

from kombu_sqlqueue.store import JobStore, NewJob

pytestmark = pytest.mark.timeout(300)

OPTIONS = {"polling_interval": 0.01, "max_polling_interval": 0.02}


def kombu_row(body: Any = "hello") -> dict[str, Any]:
    """A message exactly as the transport stores what Kombu publishes."""
    return {
        "body": "ImhlbGxvIg==" if body == "hello" else body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {},
        "properties": {
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": "q"},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": "t",
        },
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=12,
)


@st.composite
def stored_rows(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "field", "deep"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    row = kombu_row()
    if kind == "field":
        where = draw(st.sampled_from([row, row["properties"], row["headers"]]))
        key = draw(st.sampled_from([*sorted(where), "compression", "task", "id"]))
        where[key] = draw(json_values)
        return json.dumps(row).encode()
    depth = draw(st.integers(min_value=0, max_value=3000))
    text = json.dumps(row)
    return (text[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}").encode()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(stored_rows(), min_size=1, max_size=6))
def test_any_stored_rows_are_delivered_or_dead_lettered_and_the_consumer_never_raises(
    tmp_path_factory: pytest.TempPathFactory, rows: list[bytes]
) -> None:
    db = tmp_path_factory.mktemp("prop") / "queue.db"
    store = JobStore(f"sqlite:///{db}")
    try:
        for payload in rows:
            store.enqueue(NewJob("q", payload))
        delivered: list[Any] = []

        def on_message(body: Any, message: Message) -> None:
            delivered.append(body)
            message.ack()

        def on_decode_error(message: Message, exc: Exception) -> None:
            message.reject()  # what the application does with what it cannot decode

        with (
            Connection(f"sqlqueue+sqlite:///{db}", transport_options=OPTIONS) as conn,
            Consumer(conn, [Queue("q")], callbacks=[on_message], accept=["json"],
                     on_decode_error=on_decode_error),
        ):  # fmt: skip
            deadline = time.monotonic() + 30
            while store.backlog("q").total and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)  # must never raise anything else
        assert store.backlog("q").total == 0
        dead = store.dead_letters("q", limit=100)
        assert len(delivered) + len(dead) == len(rows)
        assert sorted(d.payload for d in dead) == sorted(
            p for p in rows if p in {d.payload for d in dead}
        )
    finally:
        store.close()


# -- what counts as an attempt ---------------------------------------------------------


def attempts_of(store: JobStore) -> dict[str, int]:
    jobs = store.q.jobs
    with store._db.connect() as c:  # a test-side read of every row
        rows = c.execute(jobs.select().order_by(jobs.c.id)).mappings().all()
    return {
        json.loads(bytes(r["payload"]))["properties"]["correlation_id"]: r["attempts"] for r in rows
    }


def publish(conn: Connection, names: list[str], queue: str = "work") -> None:
    producer = Producer(conn.channel())
    for name in names:
        producer.publish(name, routing_key=queue, correlation_id=name, serializer="json")


def test_a_consumer_raising_keeps_that_attempt_and_hands_back_the_rest(
    broker_url: str, store: JobStore
) -> None:
    with Connection(broker_url, transport_options=OPTIONS) as conn:
        publish(conn, ["a", "b", "c", "d"])

        def explode(body: Any, message: Message) -> None:
            if body == "b":
                raise RuntimeError("the application failed on b")
            message.ack()

        with (
            Consumer(conn, [Queue("work")], callbacks=[explode], prefetch_count=4),
            pytest.raises(RuntimeError, match="failed on b"),
        ):
            for _ in range(50):
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)
    # a: acked. b: released with its attempt counted. c, d: never handed over, refunded.
    assert attempts_of(store) == {"b": 1, "c": 0, "d": 0}


def test_a_redelivered_message_is_delivered_alone(broker_url: str, store: JobStore) -> None:
    with Connection(broker_url, transport_options=OPTIONS) as conn:
        publish(conn, ["x", "y", "z"])
    # A consumer that died holding x: its reservation lapsed (made so here by the clock).
    claimed = store.claim("work", 1, visibility=1)
    assert len(claimed.jobs) == 1
    lapse = time.time() + 5
    order: list[tuple[str, int]] = []
    with Connection(broker_url, transport_options=OPTIONS) as conn:
        conn.transport.store.clock = lambda: lapse  # the consumer's clock is past the lapse
        held: list[Message] = []

        def on_message(body: Any, message: Message) -> None:
            order.append((body, len(held)))
            held.append(message)

        with Consumer(conn, [Queue("work")], callbacks=[on_message], prefetch_count=3):
            for _ in range(20):
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)
            # x came alone, and nothing more is claimed while it is held.
            assert order == [("x", 0)]
            assert attempts_of(store) == {"x": 2, "y": 0, "z": 0}
            held[0].ack()
            for _ in range(20):
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)
            assert sorted(b for b, _ in order) == ["x", "y", "z"]
            for m in held[1:]:
                m.ack()
    assert store.backlog("work").total == 0


def test_a_null_delivery_info_is_read_as_kombu_reads_it(broker_url: str, store: JobStore) -> None:
    row = kombu_row()
    row["properties"]["delivery_info"] = None
    store.enqueue(NewJob("work", json.dumps(row).encode()))
    got: list[Any] = []
    with (
        Connection(broker_url, transport_options=OPTIONS) as conn,
        Consumer(conn, [Queue("work")], callbacks=[lambda b, m: (got.append(b), m.ack())]),
    ):
        for _ in range(40):
            if got:
                break
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.05)
    assert got == ["hello"] and store.backlog("work").total == 0


def test_a_store_error_half_way_through_a_batch_hands_the_batch_back(
    broker_url: str, store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed-jobs table refuses the bad row's move once (a missing privilege): the
    consumer sees the error, and nothing stays reserved by it; then all goes through."""
    from kombu_sqlqueue.exceptions import StorePermissionError

    with Connection(broker_url, transport_options=OPTIONS) as conn:
        publish(conn, ["a"])
        store.enqueue(NewJob("work", b"not json"))
        publish(conn, ["b"])
        consumer_store = conn.transport.store
        real = consumer_store.dead_letter
        refusals: list[int] = []

        def refuse_once(receipt: Any, reason: str) -> bool:
            if not refusals:
                refusals.append(receipt.job_id)
                raise StorePermissionError("permission denied for table askr_failed_jobs")
            return bool(real(receipt, reason))

        monkeypatch.setattr(consumer_store, "dead_letter", refuse_once)
        got: list[Any] = []
        with Consumer(conn, [Queue("work")], callbacks=[lambda b, m: got.append((b, m))],
                      prefetch_count=10):  # fmt: skip
            with pytest.raises(StorePermissionError):
                for _ in range(20):
                    with contextlib.suppress(TimeoutError):
                        conn.drain_events(timeout=0.05)
            assert not conn.transport.held.snapshot()  # nothing kept, nothing renewed
            assert store.backlog("work").ready == 3  # all three handed back at once
            for _ in range(40):
                if len(got) == 2:
                    break
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)
            assert sorted(b for b, _ in got) == ["a", "b"]
            for _, m in got:
                m.ack()
    assert store.backlog("work").total == 0 and len(store.dead_letters("work")) == 1


def test_a_consumer_needing_a_second_message_before_it_settles_a_redelivered_one_gets_it(
    broker_url: str, store: JobStore
) -> None:
    """Delivered alone is bounded by the visibility timeout: slowed, never stuck."""
    options = {**OPTIONS, "visibility_timeout": 1}
    with Connection(broker_url, transport_options=options) as conn:
        publish(conn, ["x", "y"])
    store.claim("work", 1, visibility=1)  # x: its holder died
    time.sleep(2.1)  # x's reservation lapses (whole seconds, rounded up)
    with Connection(broker_url, transport_options=options) as conn:
        got: list[Message] = []
        with Consumer(conn, [Queue("work")], callbacks=[lambda b, m: got.append(m)]):
            deadline = time.monotonic() + 20
            while len(got) < 2 and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.1)
            assert [m.payload for m in got] == ["x", "y"]  # y came while x is still held
            for m in got:
                m.ack()
    assert store.backlog("work").total == 0


def test_a_storage_condition_raised_by_the_application_reaches_it(broker_url: str) -> None:
    """Only a claim's condition is swallowed (reported, polled on); the application's own
    (its publish from inside a callback hit a full disk) goes up to it."""
    from kombu_sqlqueue.exceptions import StoreFullError

    def callback(body: Any, message: Message) -> None:
        raise StoreFullError("the application's own publish: database is full")

    with Connection(broker_url, transport_options=OPTIONS) as conn:
        publish(conn, ["a"])
        with (
            Consumer(conn, [Queue("work")], callbacks=[callback]),
            pytest.raises(StoreFullError, match="application's own"),
        ):
            for _ in range(40):
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.05)
