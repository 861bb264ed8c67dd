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


def _wait_in_threads(
    stores: list[JobStore], seconds: float, queues: set[str], private: set[str] | None = None
) -> tuple[list[threading.Thread], list[bool | None]]:
    woke: list[bool | None] = [None] * len(stores)

    def wait(i: int) -> None:
        woke[i] = stores[i].wait_for_jobs(seconds, queues, private or set())

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    return threads, woke


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine_name", ["postgresql"])  # LISTEN/NOTIFY is PostgreSQL's
def test_one_enqueue_wakes_one_idle_consumer_of_many(engine_name: str, db_url: str) -> None:
    """Idle consumers of the same queue take turns to listen: an enqueue wakes one of them,
    and once that one has work (its claim), the next enqueue wakes another."""
    from kombu_sqlqueue.store import NewJob

    waiters = [JobStore(db_url) for _ in range(4)]
    producer = JobStore(db_url)
    try:
        producer.ensure_ready()
        threads, woke = _wait_in_threads(waiters, 15, {"work"})
        time.sleep(1.0)  # every waiter connected: one listening, three in line for the turn
        producer.enqueue(NewJob("work", b"1"))
        first = None
        for _ in range(120):  # the first to wake (bounded: 12 s)
            first = next((i for i, w in enumerate(woke) if w), None)
            if first is not None:
                break
            time.sleep(0.1)
        assert first is not None, "no idle consumer woke for the enqueue"
        threads[first].join(5)
        # The others stay in their wait; the woken one claims, passing its turn on.
        assert waiters[first].claim("work", 1, 60).jobs
        rest = [w for i, w in enumerate(waiters) if i != first]
        producer.enqueue(NewJob("work", b"2"))
        for t in threads:
            t.join(40)
        assert sum(1 for w in woke if w) == 2  # one per enqueue: the first, then one other
        assert woke[first] is True
        # Nothing left waiting; the second job is there for whoever woke.
        woken_second = [w for i, w in enumerate(waiters) if i != first and woke[i]]
        assert len(woken_second) == 1 and woken_second[0] in rest
        assert woken_second[0].claim("work", 1, 60).jobs
    finally:
        for store in [*waiters, producer]:
            store.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine_name", ["postgresql"])
def test_a_private_queue_wakes_its_consumer_whoever_listens_for_the_shared_ones(
    engine_name: str, db_url: str
) -> None:
    """A no-ack queue only one consumer reads (a pidbox) wakes it even while another
    consumer holds the turn for the shared queue."""
    from kombu_sqlqueue.store import NewJob

    holder, other, producer = JobStore(db_url), JobStore(db_url), JobStore(db_url)
    try:
        producer.ensure_ready()
        holder.wait_for_jobs(0.5, {"work"})  # takes the turn (nobody else in line)
        threads, woke = _wait_in_threads([holder], 6, {"work"})
        time.sleep(0.3)
        t2, woke2 = _wait_in_threads([other], 30, {"work", "mine.pidbox"}, {"mine.pidbox"})
        time.sleep(1.0)  # other: LISTENing on its own queue, in line for the shared one
        producer.enqueue(NewJob("mine.pidbox", b"x"))
        t2[0].join(40)
        assert woke2 == [True]
        threads[0].join(10)
        assert woke == [False]  # the holder: no job on its queue
    finally:
        for store in (holder, other, producer):
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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine_name", ["postgresql"])  # LISTEN/NOTIFY is PostgreSQL's
def test_an_enlisted_enqueue_wakes_an_idle_consumer_at_the_commit_not_before(
    engine_name: str, db_url: str
) -> None:
    """The NOTIFY of an enqueue written in the caller's transaction is delivered by that
    transaction's commit: an idle consumer sleeps through the open transaction and wakes
    when it commits (no poll: its wait is 20 s)."""
    import sqlalchemy as sa

    from kombu_sqlqueue import enlist
    from kombu_sqlqueue.store import NewJob, parse_store_url
    from kombu_sqlqueue.store.enlist import current

    waiter, producer = JobStore(db_url), JobStore(db_url)
    app = sa.create_engine(parse_store_url(db_url)[1])
    try:
        producer.ensure_ready()
        threads, woke = _wait_in_threads([waiter], 20, {"work"})
        time.sleep(1.0)  # the waiter listens
        with app.connect() as conn:
            conn.begin()
            with enlist(conn):
                joined = producer.joined(current())  # type: ignore[arg-type]
                assert joined is not None
                joined.enqueue(NewJob("work", b"enlisted"))
            time.sleep(1.5)
            assert woke == [None]  # still waiting: nothing is committed
            conn.commit()
        threads[0].join(10)
        assert woke == [True]  # woken by the commit, long before its 20 s wait ended
        assert [j.payload for j in waiter.claim("work", 5, 60).jobs] == [b"enlisted"]
    finally:
        app.dispose()
        waiter.close()
        producer.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine_name", ["mysql"])  # auto_increment_increment is MySQL's
def test_bulk_enqueue_returns_the_stored_ids_one_increment_apart(
    engine_name: str, db_url: str
) -> None:
    """Galera sets ``auto_increment_increment`` to the cluster's size: one multi-row INSERT's
    ids are that far apart, and ``enqueue_many`` names the rows it stored (it said
    ``first, first+1, …``: ids of rows that do not exist)."""
    from kombu_sqlqueue.store import NewJob, StoreOptions
    from kombu_sqlqueue.store.admin import ContractAdmin

    url = f"{db_url}?init_command=SET SESSION auto_increment_increment = 3"
    store = JobStore(url, StoreOptions())
    store.create_schema()
    try:
        ids = store.enqueue_many([NewJob("q", b"%d" % i) for i in range(5)])
        assert [ids[i + 1] - ids[i] for i in range(4)] == [3, 3, 3, 3]
        assert [store.get_job(i)["payload"] for i in ids] == [b"0", b"1", b"2", b"3", b"4"]  # type: ignore[index]
        assert ContractAdmin(store).issued()[0] == 5  # ids issued, not the id range spanned
    finally:
        store.close()
