"""Where a Celery user coming from Redis gets Redis's behaviour: real workers, every engine.

A real ``celery worker`` (prefork, two children) of ``apps.parity_app`` with Celery's
database result backend, so the tests read task states (``REVOKED``, ``SUCCESS``) the way a
Celery user would:

* a task whose ``expires`` passed while it waited is delivered and marked ``REVOKED`` by
  the worker (Kombu's Redis transport ignores ``expiration``), not dropped and left
  ``PENDING`` forever;
* a ``revoke`` sent just before its task reaches the worker first, so the task never runs;
* ``Reject(requeue=True)`` puts the message back at once (no ``backoff_base`` delay);
* a ``;``-separated broker URL is a failover list: a worker whose first URL is dead
  connects to the next one.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from apps.parity_app import create_app, result_backend, worker_command
from celery import Celery
from celery.utils import uuid
from e2e_harness import Proc, sql, task_events, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

#: Bound on a task's result (seconds).
RESULT_TIMEOUT = 30


@pytest.fixture
def backend_url(db_url: str, tmp_path: Path) -> str:
    return result_backend(db_url, tmp_path)


@pytest.fixture
def papp(broker_url: str, backend_url: str) -> Iterator[Celery]:
    """The parity app, for sending tasks and reading their states from the test."""
    app = create_app(broker_url, backend_url)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def start_worker(
    spawn: Callable[..., Proc], broker_url: str, backend_url: str, out_file: Path
) -> Callable[..., Proc]:
    """``start_worker(broker=None, **env)``: a worker, ready; ``broker`` overrides the URL."""
    counter = iter(range(100))

    def start(broker: str | None = None, **env: str) -> Proc:
        n = next(counter)
        worker = spawn(
            f"worker{n}",
            worker_command(f"parity{n}"),
            E2E_BROKER_URL=broker or broker_url,
            E2E_RESULT_BACKEND=backend_url,
            E2E_OUT=str(out_file),
            **env,
        )
        wait_until(
            lambda: "ready." in worker.output or worker.popen.poll() is not None,
            40,
            what=f"{worker.name} ready or exited",
        )
        assert "ready." in worker.output, worker.output[-4000:]
        return worker

    return start


def jobs_left(db_url: str) -> int:
    return int(sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = 'parity'")[0][0])


def test_expired_task_is_delivered_and_marked_revoked_not_left_pending(
    papp: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """``expires`` passes while no worker consumes: the worker marks the task ``REVOKED``.

    On Redis the expired message reaches the worker, which discards it as revoked (expired)
    and stores ``REVOKED``. Dropping it in the broker, as RabbitMQ does, leaves the result
    ``PENDING`` forever, and whoever waits on it waits forever.
    """
    record = papp.tasks["parity.record"]
    expired = record.apply_async(("expired",), expires=1)
    sent = time.time()
    fresh = record.apply_async(("fresh",), expires=600)
    # Past the expiry with a margin for rounding to the second (setup, not an assertion).
    time.sleep(max(0.0, sent + 2.5 - time.time()))
    worker = start_worker()

    assert fresh.get(timeout=RESULT_TIMEOUT) == "fresh"
    wait_until(lambda: expired.state != "PENDING", 15, what="the expired task to leave PENDING")
    assert expired.state == "REVOKED"
    assert [r["label"] for r in task_events(out_file)] == ["fresh"]  # the expired never ran
    discarded = f"Discarding revoked task: parity.record[{expired.id}]"
    wait_until(lambda: discarded in worker.output, 10, what="the worker's discard line")
    wait_until(lambda: jobs_left(db_url) == 0, 10, what="parity queue empty")
    assert "Traceback" not in worker.output, worker.output[-4000:]


def test_revoke_sent_just_before_its_task_wins(
    papp: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """10 times: ``revoke(id)`` then at once the task with that id: it never runs (Redis: 0/10).

    Each round waits until the worker settled the task (``REVOKED``, or ``SUCCESS`` if it
    ran) before the next, so every round races an idle worker; the rounds start after
    growing pauses (0 to 0.9 s), so they meet the worker at different points of its idle
    polling (its back-off grows to ``max_polling_interval``, 1 s).
    """
    worker = start_worker()
    record = papp.tasks["parity.record"]
    states = []
    for i in range(10):
        time.sleep(0.1 * i)  # the phase of the worker's idle polling (not an assertion)
        task_id = uuid()
        papp.control.revoke(task_id)
        result = record.apply_async((f"revoked-{i}",), task_id=task_id)
        wait_until(
            lambda r=result: r.state in ("REVOKED", "SUCCESS"),
            20,
            what=f"round {i} settled",
        )
        states.append(result.state)
    ran = [r["label"] for r in task_events(out_file)]
    assert ran == [], f"{len(ran)} of 10 revoked tasks ran: {ran}; states {states}"
    assert states == ["REVOKED"] * 10, f"states {states}:\n{worker.output[-4000:]}"
    # The result backend may say REVOKED before the worker's log line has been read here.
    wait_until(
        lambda: worker.output.count("Discarding revoked task: parity.record[") >= 10,
        10,
        what="the worker's 10 discard lines",
    )
    assert worker.output.count("Discarding revoked task: parity.record[") == 10
    wait_until(lambda: jobs_left(db_url) == 0, 10, what="parity queue empty (revoked ones acked)")


def test_reject_requeue_puts_the_message_back_without_backoff(
    papp: Celery, start_worker: Callable[..., Proc], out_file: Path, db_url: str
) -> None:
    """``Reject(requeue=True)`` (acks_late) is redelivered at once, as Redis's restore is.

    The worker's transport has ``backoff_base=3600``: were the backoff applied to the
    requeue, the second attempt would wait 30-60 minutes and the result wait below would
    time out. No timing is measured.
    """
    start_worker(E2E_BACKOFF_BASE="3600")
    result = papp.tasks["parity.reject_once"].delay("requeued")
    assert result.get(timeout=RESULT_TIMEOUT) == "requeued"
    assert [r["label"] for r in task_events(out_file, "started")] == ["requeued", "requeued"]
    assert [r["label"] for r in task_events(out_file)] == ["requeued"]
    wait_until(lambda: jobs_left(db_url) == 0, 10, what="the job completed (row acked)")
    assert int(sql(db_url, "SELECT count(*) FROM askr_failed_jobs")[0][0]) == 0


def closed_port() -> int:
    """A local TCP port nothing listens on (just bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dead_url(engine_name: str, tmp_path: Path) -> str:
    """A database URL of the engine that cannot be opened."""
    if engine_name == "sqlite":
        unopenable = tmp_path / "a-directory.db"
        unopenable.mkdir()
        return f"sqlite:///{unopenable}"
    scheme = {"postgresql": "postgresql://postgres", "mysql": "mysql://root"}[engine_name]
    return f"{scheme}@127.0.0.1:{closed_port()}/nowhere"


def test_failover_broker_url_list_skips_a_dead_database(
    papp: Celery,
    start_worker: Callable[..., Proc],
    broker_url: str,
    engine_name: str,
    tmp_path: Path,
) -> None:
    """``broker_url = "sqlqueue+<dead>;sqlqueue+<live>"``: the worker fails over and works."""
    dead = dead_url(engine_name, tmp_path)
    worker = start_worker(broker=f"sqlqueue+{dead};{broker_url}")
    result = papp.tasks["parity.record"].delay("failover")
    assert result.get(timeout=RESULT_TIMEOUT) == "failover"
    assert "Will retry using next failover" in worker.output  # it did try the dead one first
    assert "Traceback" not in worker.output, worker.output[-4000:]
