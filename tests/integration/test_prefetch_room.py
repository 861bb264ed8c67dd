"""Room freed in a channel whose prefetch was full is claimed for at once, whatever else the
connection waits for.

A Celery worker on this transport has a task channel (prefetch: the pool's size) and a
broadcast channel without a limit. While its pool is busy the task channel is full, so
``drain_events`` waits for jobs for the other channel; the ack that frees room comes from
the prefork pool's result thread. That ack must end the wait: before it did, every round
of a busy worker waited out the polling interval (measured: ~90 ms per round at
``polling_interval=0.1`` on PostgreSQL and MariaDB — a Celery worker ran 10 ms tasks at
~30 per second)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kombu import Connection, Consumer, Message, Producer, Queue

#: Polls so rare that a test waiting on one times out first (pytest-timeout below).
NO_POLLING = {"polling_interval": 300.0, "max_polling_interval": 300.0}


@pytest.mark.timeout(60)
def test_an_ack_from_another_thread_ends_the_wait_of_a_channel_with_room(
    broker_url: str, connect: Callable[..., Connection]
) -> None:
    conn = connect()
    conn.transport_options.update(NO_POLLING)
    work, other = Queue("room_work"), Queue("room_other")
    with conn.channel() as publishing:
        producer = Producer(publishing)
        for i in range(3):
            producer.publish({"i": i}, routing_key="room_work", declare=[work])
        other(publishing).declare()

    received: list[int] = []
    acks: list[threading.Timer] = []

    def on_work(body: Any, message: Message) -> None:
        received.append(body["i"])
        # Acked later from another thread, as a prefork pool's result handler does.
        acks.append(threading.Timer(0.2, message.ack))
        acks[-1].start()

    def on_other(body: Any, message: Message) -> None:  # nothing is sent there
        message.ack()

    with (
        Consumer(conn.channel(), [work], callbacks=[on_work], prefetch_count=1),
        Consumer(conn.channel(), [other], callbacks=[on_other]),
    ):
        for expected in range(3):
            # Each round after the first finds the work channel full; the ack ends the wait
            # (without it: the 300 s poll, and the test's timeout).
            conn.drain_events()
            assert received == list(range(expected + 1))
    for timer in acks:
        timer.join()
