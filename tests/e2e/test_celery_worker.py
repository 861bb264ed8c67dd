"""A real ``celery worker --pool=prefork`` over kombu-sqlqueue.

Tasks append JSON lines to a file (``E2E_OUT``); there is no result backend.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery
from e2e_harness import E2E_VISIBILITY, Proc, celery_worker_args, sql, task_events, wait_until

from kombu_sqlqueue.store import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

VISIBILITY = E2E_VISIBILITY  # the app fixture's


@pytest.fixture
def start_worker(
    spawn: Callable[..., Proc], broker_url: str, out_file: Path
) -> Callable[..., Proc]:
    counter = iter(range(100))

    def start(concurrency: int = 2, prefetch: int = 1) -> Proc:
        n = next(counter)
        worker = spawn(
            f"worker{n}",
            celery_worker_args(f"e2e{n}", concurrency=concurrency),
            E2E_BROKER_URL=broker_url,
            E2E_OUT=str(out_file),
            E2E_VISIBILITY=str(VISIBILITY),
            E2E_PREFETCH=str(prefetch),
        )  # fmt: skip
        worker.wait_text("ready.", timeout=30)
        return worker

    return start


def stop_worker(worker: Proc) -> None:
    """Warm shutdown, bounded (Celery takes ~6 s even on memory://); teardown SIGKILLs leftovers."""
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)


def jobs_left(db_url: str) -> int:
    return int(sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0])


def test_delay_countdown_and_acks_late(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """delay() runs; countdown=3 runs no sooner than 3 s after sending; acks_late runs once."""
    worker = start_worker(concurrency=2)
    record, record_late = app.tasks["e2e.record"], app.tasks["e2e.record_late"]

    sent_cd = time.time()
    record.apply_async(("countdown",), countdown=3)
    for i in range(5):
        record.delay(f"plain-{i}")
    record_late.delay("late")

    wait_until(lambda: len(task_events(out_file)) >= 6, 20, what="plain and acks_late tasks")
    wait_until(lambda: len(task_events(out_file)) >= 7, 20, what="countdown task")
    by_label = {r["label"]: r for r in task_events(out_file)}
    assert sorted(by_label) == sorted(["countdown", "late", *(f"plain-{i}" for i in range(5))])
    assert len(task_events(out_file)) == 7, "a task ran twice"
    # Native delay: never run before its countdown (available_at is rounded up). How soon
    # after is a matter of load, bounded only by the wait above (no timed assertion).
    delay = by_label["countdown"]["t"] - sent_cd
    assert delay >= 3.0, delay
    assert all(not r["redelivered"] for r in task_events(out_file))
    # Every task ran in a pool child, not in the main process.
    assert all(r["pid"] != worker.pid for r in task_events(out_file))

    wait_until(lambda: jobs_left(db_url) == 0, 10, what="askr_jobs empty after the acks")
    stop_worker(worker)
    assert "database is locked" not in worker.output
    assert "Traceback" not in worker.output, worker.output[-4000:]


def test_acks_late_task_longer_than_visibility_is_renewed_not_redelivered(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, store: JobStore, db_url: str
) -> None:
    """An acks_late task running 3x the visibility timeout keeps its reservation; runs once."""
    worker = start_worker(concurrency=2)
    app.tasks["e2e.record_late"].delay("slow", sleep=3 * VISIBILITY)
    wait_until(lambda: task_events(out_file, "started"), 20, what="slow task started")
    (job_id,) = (r[0] for r in sql(db_url, "SELECT id FROM askr_jobs"))
    deadline = time.time() + 3 * VISIBILITY - 0.5
    while time.time() < deadline and not task_events(out_file):
        row = store.get_job(job_id)
        assert row is not None
        assert row["attempts"] == 1, row
        # Held, and renewed: its reservation never lapses while the worker lives.
        assert row["reserved_until"] >= int(time.time()), row
        time.sleep(0.2)
    wait_until(lambda: task_events(out_file), 20, what="slow task finished")
    wait_until(lambda: store.get_job(job_id) is None, 10, what="row deleted by the late ack")
    time.sleep(VISIBILITY + 1)  # would a (wrong) redelivery run it again?
    assert len(task_events(out_file, "started")) == 1
    assert len(task_events(out_file)) == 1
    assert "reservation of job" not in worker.output  # no lost-reservation warning


def test_priorities_higher_first(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """Queued before the worker starts (-c 1, prefetch 1): run by priority desc, FIFO within."""
    record = app.tasks["e2e.record"]
    sent = [("p3", 3), ("p9", 9), ("p0", 0), ("p5a", 5), ("p7", 7), ("p5b", 5), ("p1", 1)]
    for label, priority in sent:
        record.apply_async((label,), priority=priority)
    assert sorted(r[0] for r in sql(db_url, "SELECT priority FROM askr_jobs")) == sorted(
        p for _, p in sent
    )
    worker = start_worker(concurrency=1, prefetch=1)
    wait_until(lambda: len(task_events(out_file)) >= len(sent), 30, what="all priority tasks")
    order = [r["label"] for r in task_events(out_file)]
    assert order == ["p9", "p7", "p5a", "p5b", "p3", "p1", "p0"], order
    assert "Traceback" not in worker.output, worker.output[-4000:]


def test_worker_killed_mid_acks_late_task_is_redelivered(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, store: JobStore, db_url: str
) -> None:
    """kill -9 of the whole worker during an acks_late task: a new worker reruns it (attempts 2)."""
    first = start_worker(concurrency=2)
    app.tasks["e2e.record_late"].delay("crash", sleep=60, sleep_redelivered=2)
    wait_until(
        lambda: task_events(out_file, "started"), 20, what="task started on the first worker"
    )
    (job_id,) = (r[0] for r in sql(db_url, "SELECT id FROM askr_jobs"))
    first.kill_group(signal.SIGKILL)
    first.wait(timeout=10)

    second = start_worker(concurrency=2)
    wait_until(lambda: len(task_events(out_file, "started")) == 2, 20, what="redelivery started")
    redelivery = task_events(out_file, "started")[1]
    assert redelivery["redelivered"] is True
    # Not before the dead worker's reservation (claimed before the first start) lapsed.
    assert redelivery["t"] - task_events(out_file, "started")[0]["t"] >= VISIBILITY - 0.1
    row = store.get_job(job_id)
    assert row is not None and row["attempts"] == 2, row
    wait_until(lambda: task_events(out_file), 20, what="redelivered task finished")
    wait_until(lambda: store.get_job(job_id) is None, 10, what="row deleted")
    assert [r["label"] for r in task_events(out_file)] == ["crash"]
    assert "Traceback" not in second.output, second.output[-4000:]


def test_pool_child_lost_with_reject_on_worker_lost_is_released_and_rerun(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, store: JobStore, db_url: str
) -> None:
    """A pool child dies mid-task: Celery rejects with requeue, the job comes back at once
    (as on Redis), its attempt counted."""
    worker = start_worker(concurrency=1)
    app.tasks["e2e.die_once"].delay("child-dies")
    wait_until(lambda: task_events(out_file), 30, what="the redelivery finished")
    starts = task_events(out_file, "started")
    assert [s["redelivered"] for s in starts] == [False, True]
    wait_until(lambda: jobs_left(db_url) == 0, 10, what="row deleted after the ack")
    assert store.dead_letters() == []
    assert "WorkerLostError" in worker.output


def test_warm_shutdown_returns_prefetched_unstarted_messages(
    app: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """SIGTERM while a worker holds rate-limited (unstarted) tasks: they go back, attempt refunded.

    ``rate_limit="1/m"``: the first task runs, the worker holds the other two,
    reserved and unacked, in its token bucket. A warm shutdown must hand them
    back ready, with ``attempts`` back to 0, and a new worker runs them.
    """
    limited = app.tasks["e2e.limited"]
    for i in range(3):
        limited.delay(f"limited-{i}")
    first = start_worker(concurrency=1, prefetch=4)
    wait_until(lambda: task_events(out_file), 20, what="first rate-limited task")

    def reserved() -> list[tuple[int, int]]:
        return [
            (r[0], r[1])
            for r in sql(
                db_url, "SELECT id, attempts FROM askr_jobs WHERE reserved_token IS NOT NULL"
            )
        ]

    wait_until(lambda: len(reserved()) == 2, 10, what="worker holding the other two")
    assert all(attempts == 1 for _, attempts in reserved())
    time.sleep(VISIBILITY + 1)  # held past a visibility timeout: renewed, not redelivered
    assert len(reserved()) == 2
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=30)
    assert [r["label"] for r in task_events(out_file)] == ["limited-0"]
    rows = sql(db_url, "SELECT attempts, reserved_until, reserved_token FROM askr_jobs")
    # Handed back ready now, the attempt their claim counted refunded.
    assert rows == [(0, None, None), (0, None, None)], rows
    assert "Traceback" not in first.output, first.output[-4000:]

    start_worker(concurrency=1)
    wait_until(
        lambda: len(task_events(out_file)) >= 2, 20, what="a returned task run by a new worker"
    )
    second = task_events(out_file)[1]
    assert second["label"] in ("limited-1", "limited-2")
    assert second["redelivered"] is False  # a returned, unstarted delivery is not a redelivery
