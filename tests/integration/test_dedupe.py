"""Enqueue once through Kombu and Celery (transport option ``dedupe_window``): a publish
whose identity — the ``dedupe_key`` header, else the Celery task id — was first written to
its queue within the window writes nothing, and the producer's transport counts it."""

from __future__ import annotations

from kombu import Connection, Exchange, Queue

from kombu_sqlqueue.store import JobStore


def publish(conn: Connection, queue: str, body: object, **headers: object) -> None:
    exchange = Exchange("", type="direct")
    with conn.Producer() as producer:
        producer.publish(
            body,
            exchange=exchange,
            routing_key=queue,
            declare=[Queue(queue, exchange=exchange, routing_key=queue)],
            headers=headers,
        )


def test_a_dedupe_key_is_written_once_per_window(broker_url: str, store: JobStore) -> None:
    with Connection(broker_url, transport_options={"dedupe_window": 600}) as conn:
        publish(conn, "billing", {"n": 1}, dedupe_key="invoice-7")
        publish(conn, "billing", {"n": 2}, dedupe_key="invoice-7")
        publish(conn, "billing", {"n": 3}, dedupe_key="invoice-8")
        publish(conn, "billing", {"n": 4})  # no identity: never deduplicated
        publish(conn, "billing", {"n": 5})
        assert conn.transport.deduplicated == 1
        with conn.SimpleQueue("billing") as q:
            got = [q.get(timeout=5) for _ in range(4)]
            for message in got:
                message.ack()
        assert sorted(m.payload["n"] for m in got) == [1, 3, 4, 5]
        # Done and deleted, still inside the window: nothing again.
        publish(conn, "billing", {"n": 6}, dedupe_key="invoice-7")
        assert conn.transport.deduplicated == 2
    assert store.size("billing") == 0


def test_a_celery_task_id_is_its_identity_and_windows_are_per_queue(
    broker_url: str, store: JobStore
) -> None:
    from celery import Celery

    app = Celery("dedupe", broker=broker_url, set_as_current=False)
    app.conf.broker_transport_options = {"dedupe_window": {"billing": 600}}
    try:
        for _ in range(3):
            app.send_task("billing.charge", args=(1,), task_id="charge-1", queue="billing")
            app.send_task("mail.send", task_id="mail-1", queue="mail")  # no window there
        app.send_task("billing.charge", args=(2,), task_id="charge-2", queue="billing")
    finally:
        app.close()
    assert store.size("billing") == 2
    assert store.size("mail") == 3
