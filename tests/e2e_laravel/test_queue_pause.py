"""``queue:pause`` both ways, against real PHP on SQLite, PostgreSQL and MariaDB: a pause
written by Laravel 12.40+'s ``QueueManager::pause`` / ``pauseFor`` (their code, on Laravel
8.83's real database cache store: 8.83 has no pause of its own) stops ``laravel-bridge
work``, and ``resume`` lets it on; a pause written by ``kombu-sqlqueue pause --layout
laravel`` is one Laravel's ``isPaused()`` — what ``Worker::getNextJob`` asks of each queue —
reads as paused, and ours ``resume`` is one it reads as resumed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from laravel_harness import LaravelQueueHarness
from laravel_support import APP_KEY

from laravel_bridge import HandlerRegistry, LaravelQueue, Worker, WorkerOptions

pytestmark = pytest.mark.timeout(180)

JOB = "App\\Jobs\\Mail"


def work(db_url: str, queues: list[str]) -> list[str]:
    """``laravel-bridge work --stop-when-empty`` over ``queues``: what it ran."""
    ran: list[str] = []
    registry = HandlerRegistry()
    registry.register(JOB, lambda job: ran.append(f"{job.queue}:{job.properties['n']}"))
    laravel = LaravelQueue(db_url, "laravel", create_tables=False)
    try:
        options = WorkerOptions(queues=queues, stop_when_empty=True, sleep=0)
        Worker(laravel.table, options, handlers=registry, app_key=APP_KEY).run()
    finally:
        laravel.close()
    return ran


def dispatch(db_url: str, queue: str, n: int) -> None:
    laravel = LaravelQueue(db_url, "laravel", create_tables=False)
    try:
        laravel.dispatch(JOB, {"n": n}, queue=queue)
    finally:
        laravel.close()


def operator(*args: str) -> str:
    """The operator's CLI on Laravel's layout, with the harness's cache prefix (Laravel 8's
    default, which its DatabaseStore is built with)."""
    laravel = ["--layout", "laravel", "--cache-prefix", "laravel_cache"]
    done = subprocess.run(
        [sys.executable, "-m", "kombu_sqlqueue", *args, *laravel],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_pause_laravel_writes_stops_our_worker(queue: LaravelQueueHarness) -> None:
    db = queue.db_url
    dispatch(db, "emails", 1)
    dispatch(db, "default", 1)
    assert queue.queue_pause("pause", "emails") is True
    assert work(db, ["emails", "default"]) == ["default:1"]
    assert queue.queue_pause("resume", "emails") is False
    assert work(db, ["emails", "default"]) == ["emails:1"]

    dispatch(db, "emails", 2)
    assert queue.queue_pause("pause-for", "emails", 6) is True  # pauseFor(6)
    assert work(db, ["emails"]) == []
    time.sleep(7.1)  # the key expired: absent, as DatabaseStore reads it
    assert queue.queue_pause("is-paused", "emails") is False
    assert work(db, ["emails"]) == ["emails:2"]


def test_a_pause_we_write_is_one_laravel_reads(queue: LaravelQueueHarness) -> None:
    db = queue.db_url
    assert queue.queue_pause("is-paused", "emails") is False
    assert operator("pause", db, "emails").strip() == "paused queue 'emails' until resumed"
    assert queue.queue_pause("is-paused", "emails") is True
    assert operator("resume", db, "emails").strip() == "resumed queue 'emails'"
    assert queue.queue_pause("is-paused", "emails") is False
    operator("pause", db, "emails", "--for", "10m")
    assert queue.queue_pause("is-paused", "emails") is True
    assert queue.queue_pause("resume", "emails") is False  # Laravel's resume, of our pause
    assert "queue 'emails' was not paused" in operator("resume", db, "emails")
