"""What the in-memory store adds to the contract (tests/conformance runs the contract on
it): names, sharing, its wake-ups and its limits."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from kombu_sqlqueue.exceptions import InvalidURL, MessageTooLarge
from kombu_sqlqueue.store import JobStore, MemoryJobStore, NewJob, memory, open_store


@pytest.fixture
def url() -> Iterator[str]:
    name = f"memory://store-{uuid.uuid4().hex[:12]}"
    yield name
    memory.reset(name)


def test_urls_name_the_shared_data() -> None:
    assert [memory.memory_name(u) for u in ("memory://", "memory://a", "MEMORY:///a/")] == [
        "",
        "a",
        "a",
    ]
    assert not memory.is_memory_url("sqlite:///memory.db")
    with pytest.raises(InvalidURL):
        MemoryJobStore("sqlite:///queue.db")


def test_open_store_picks_the_store_by_url(url: str, tmp_path: object) -> None:
    assert isinstance(open_store(url), MemoryJobStore)
    sql = open_store(f"sqlite:///{tmp_path}/q.db")
    assert isinstance(sql, JobStore)
    sql.close()


def test_stores_of_one_name_share_jobs_and_reset_forgets_them(url: str) -> None:
    MemoryJobStore(url).enqueue(NewJob("q", b"x"))
    assert MemoryJobStore(url).size("q") == 1
    assert MemoryJobStore(url + "-other").size("q") == 0
    memory.reset(url)
    assert MemoryJobStore(url).size("q") == 0


def test_bad_arguments_raise_as_the_sql_store_does(url: str) -> None:
    store = MemoryJobStore(url)
    with pytest.raises(ValueError, match="delay"):
        store.enqueue(NewJob("q", b"x", delay=-1))
    with pytest.raises(ValueError, match="max_attempts"):
        store.enqueue(NewJob("q", b"x", max_attempts=0))
    store.max_payload_bytes = 10
    with pytest.raises(MessageTooLarge, match="11 bytes"):
        store.enqueue_many([NewJob("q", b"fits"), NewJob("q", b"x" * 11)])
    assert store.size("q") == 0  # nothing of the batch was stored


def test_a_wait_ends_at_an_enqueue_on_a_watched_queue(url: str) -> None:
    waiter, producer = MemoryJobStore(url), MemoryJobStore(url)
    later = threading.Timer(0.1, producer.enqueue, (NewJob("watched", b"x"),))
    started = time.monotonic()
    later.start()
    assert waiter.wait_for_jobs(5, ["watched"]) is True
    assert time.monotonic() - started < 2
    later.join()


def test_a_wait_ignores_other_queues_and_delayed_jobs(url: str) -> None:
    waiter, producer = MemoryJobStore(url), MemoryJobStore(url)
    producer.enqueue(NewJob("elsewhere", b"x"))
    producer.enqueue(NewJob("watched", b"x", delay=60))
    assert waiter.wait_for_jobs(0.05, ["watched"]) is False


def test_an_enqueue_between_two_waits_ends_the_next_at_once(url: str) -> None:
    waiter = MemoryJobStore(url)
    assert waiter.wait_for_jobs(0.01) is False
    MemoryJobStore(url).enqueue(NewJob("q", b"x"))
    started = time.monotonic()
    assert waiter.wait_for_jobs(5) is True  # as a LISTEN connection keeps a NOTIFY
    assert time.monotonic() - started < 1
