"""Laravel 8.83 and the Python worker on one ``jobs`` table, on SQLite, PostgreSQL and MariaDB.

PHP is the real thing throughout (``php/queue_harness.php``: Laravel's Bus dispatcher,
``DatabaseQueue``, ``Illuminate\\Queue\\Worker`` with WorkCommand's failed-job listener, the
UUID failer and ``queue:retry``'s code); Python is ``laravel_bridge``.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from laravel_harness import CHAINED, WORKER_CASES, LaravelQueueHarness, php_shape, same
from laravel_support import APP_KEY

from laravel_bridge import (
    HandlerRegistry,
    Job,
    JobCommand,
    LaravelQueue,
    PhpEnum,
    Worker,
    WorkerOptions,
    private,
    protected,
)
from laravel_bridge.payload import date_to_php

pytestmark = pytest.mark.timeout(240)

# Every class the PHP cases use, for the Python registry.
CLASSES = sorted({cls for cls, _, _ in WORKER_CASES.values()} | {"App\\Jobs\\AlwaysFails"})


def python_registry(runs: list[dict[str, Any]], fail: set[str] = frozenset()) -> HandlerRegistry:  # type: ignore[assignment]
    registry = HandlerRegistry()

    def record(job: Job) -> None:
        assert job.command is not None
        raw = {k: v for k, v in job.command.obj.plain().items() if k in job.properties}
        runs.append(
            {
                "runner": "python",
                "class": job.name,
                "props": php_shape(job.properties, raw),
                "attempts": job.attempts,
                "queue": job.queue,
                "uuid": job.uuid,
            }
        )
        if job.uuid in fail:
            raise RuntimeError(f"python refuses {job.uuid}")

    for name in CLASSES:
        registry.register(name, record)
    return registry


def python_worker(queue: LaravelQueueHarness, registry: HandlerRegistry, **options: Any) -> Worker:
    table = LaravelQueue(queue.db_url, "laravel", create_tables=False).table
    options.setdefault("queues", ["default", "emails"])
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    return Worker(table, WorkerOptions(**options), handlers=registry, app_key=APP_KEY)


def test_php_dispatches_every_shape_and_python_runs_each_once_with_phps_values(
    queue: LaravelQueueHarness,
) -> None:
    dispatched = queue.dispatch()
    runs: list[dict[str, Any]] = []
    worker = python_worker(queue, python_registry(runs))
    worker.run()
    # Everything but the 2-second delayed job ran at once.
    assert "after 2 s" not in [r["props"].get("label") for r in runs]
    deadline = time.monotonic() + 60
    while len(runs) < len(WORKER_CASES) + len(CHAINED) and time.monotonic() < deadline:
        time.sleep(0.2)
        worker.run()
    worker.table.close()

    by_uuid = {r["uuid"]: r for r in runs}
    assert len(by_uuid) == len(runs) == len(WORKER_CASES) + len(CHAINED)  # each exactly once
    for case, (cls, queue_name, props) in WORKER_CASES.items():
        run = by_uuid[dispatched[case]["uuid"]]
        assert (run["class"], run["queue"], run["attempts"]) == (cls, queue_name, 1), case
        php_props = {k: v for k, v in props.items() if k in run["props"]}
        assert same(run["props"], php_props), (case, run["props"], php_props)
        # What PHP itself saw when it dispatched (its harness printed the object's props).
        assert same(run["props"], {k: dispatched[case]["props"][k] for k in run["props"]}), case
    # The chain continued in Python, in order, on the chain's queues.
    chain_runs = [r for r in runs if r["class"] == "App\\Jobs\\ChainStep"]
    assert [(r["queue"], r["props"]) for r in chain_runs[1:]] == CHAINED
    assert queue.failed() == []


def python_cases(queue: LaravelQueue) -> dict[str, Any]:
    """Dispatch, from Python, the shapes of ``worker_cases()``; return case → Dispatched."""
    paris = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=ZoneInfo("Europe/Paris"))
    d = queue.dispatch
    status = PhpEnum("App\\Jobs\\Status", "Paid")
    open_ = PhpEnum("App\\Jobs\\Status", "Open")
    return {
        "scalars": d("App\\Jobs\\Scalars", WORKER_CASES["scalars"][2]),
        "unicode": d("App\\Jobs\\Unicode", WORKER_CASES["unicode"][2]),
        "floats": d("App\\Jobs\\Floats", WORKER_CASES["floats"][2]),
        "nested": d("App\\Jobs\\Nested", WORKER_CASES["nested"][2]),
        "dates": d(
            "App\\Jobs\\Dates",
            {
                "at": paris,
                "since": date_to_php(
                    datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), "Carbon\\CarbonImmutable"
                ),
                "offset": date_to_php(
                    datetime(
                        2023, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=5, minutes=30))
                    ),
                    "Carbon\\CarbonImmutable",
                ),
                "never": None,
            },
        ),
        "enums": d(
            "App\\Jobs\\Enums",
            {"status": status, "statuses": [open_, status, open_], "maybe": None},
        ),
        "promoted": d(
            "App\\Jobs\\Promoted",
            {
                "plain": "class body",
                "visible": "shown",
                protected("guarded"): "protected value",
                private("App\\Jobs\\Promoted", "secret"): {"k": "v", "n": 1},
                private("App\\Jobs\\Promoted", "count"): 3,
            },
        ),
        "delayed_2s": d("App\\Jobs\\Ping", {"label": "after 2 s"}, delay=2),
        "named_queue": d("App\\Jobs\\Ping", {"label": "on emails"}, queue="emails"),
        "tuned": d(
            "App\\Jobs\\Tuned",
            {
                "tries": 4,
                "backoff": [2, 4, 8],
                "timeout": 30,
                "maxExceptions": 3,
                "failOnTimeout": True,
                "label": "knobs",
            },
            tries=4,
            backoff=[2, 4, 8],
            timeout=30,
            max_exceptions=3,
            fail_on_timeout=True,
            retry_until=4102444800,
        ),
        "chain": d(
            "App\\Jobs\\ChainStep",
            {"step": "first", "position": 1},
            chain=[
                ("App\\Jobs\\ChainStep", {"step": "second", "position": 2}),
                JobCommand.build(
                    "App\\Jobs\\ChainStep", {"step": "third", "position": 3}, queue="emails"
                ),
            ],
        ),
        "secret": d("App\\Jobs\\SecretWork", WORKER_CASES["secret"][2], encrypt=True),
    }


def test_python_dispatches_every_shape_and_laravels_worker_runs_each_with_its_values(
    queue: LaravelQueueHarness,
) -> None:
    lq = LaravelQueue(queue.db_url, "laravel", app_key=APP_KEY, create_tables=False)
    sent = python_cases(lq)
    lq.close()
    result = queue.work(queue=["default", "emails"])
    assert result.returncode == 0, result.stderr
    runs = {r["uuid"]: r for r in queue.runs()}
    assert "after 2 s" not in [r["props"].get("label") for r in runs.values()]
    deadline = time.monotonic() + 60
    while len(queue.runs()) < len(WORKER_CASES) + len(CHAINED) and time.monotonic() < deadline:
        time.sleep(0.2)
        queue.work(queue=["default", "emails"])
    runs_list = queue.runs()
    runs = {r["uuid"]: r for r in runs_list}
    assert len(runs) == len(runs_list) == len(WORKER_CASES) + len(CHAINED)
    for case, (cls, queue_name, props) in WORKER_CASES.items():
        run = runs[sent[case].uuid]
        assert (run["class"], run["queue"], run["attempts"]) == (cls, queue_name, 1), case
        assert same(run["props"], props), (case, run["props"], props)
    chain_runs = [r for r in runs_list if r["class"] == "App\\Jobs\\ChainStep"]
    assert [(r["queue"], r["props"]) for r in chain_runs[1:]] == CHAINED
    assert queue.failed() == []


def test_python_failure_lands_in_failed_jobs_and_queue_retry_brings_it_back(
    queue: LaravelQueueHarness,
) -> None:
    (row,) = queue.dispatch_rows("always_fails_emails")
    runs: list[dict[str, Any]] = []
    worker = python_worker(queue, python_registry(runs, fail={row["uuid"]}), tries=2)
    worker.run()
    assert [r["attempts"] for r in runs] == [1, 2]
    (failed,) = queue.failed()  # what `php artisan queue:failed` lists
    assert failed["uuid"] == row["uuid"]
    assert failed["connection"] == "database"
    assert failed["queue"] == "emails"
    assert failed["payload"] == row["payload"]  # verbatim
    assert failed["exception"].startswith("RuntimeError: python refuses")
    (retried,) = queue.retry(row["uuid"])  # `php artisan queue:retry <uuid>`
    assert retried["retried"] is True
    assert queue.failed() == []
    runs.clear()
    again = python_worker(queue, python_registry(runs))
    again.run()  # this time Python's handler succeeds
    again.table.close()
    assert [(r["uuid"], r["attempts"], r["queue"]) for r in runs] == [(row["uuid"], 1, "emails")]
    assert queue.failed() == []
    worker.table.close()


def test_php_and_python_workers_drain_one_queue_each_job_once(
    queue: LaravelQueueHarness,
) -> None:
    cases = ["scalars", "unicode", "floats", "nested", "enums", "promoted", "named_queue"] * 12
    rows = queue.dispatch_rows(*cases)
    lq = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    lq.dispatch_many([("App\\Jobs\\Ping", {"label": f"python {i}"}) for i in range(60)])
    lq.close()
    total = len(rows) + 60
    # PHP rests 20 ms between jobs (queue:work --rest), so a Python worker that starts a
    # moment later still finds jobs: both take part, whichever machine runs the test.
    php = queue.start_work(queue="default,emails", sleep=0.1, rest=0.02)
    python_runs: list[dict[str, Any]] = []
    try:
        # Let PHP get going first (its boot takes longer than Python's), then both drain.
        deadline = time.monotonic() + 60
        while not queue.runs() and php.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        worker = python_worker(queue, python_registry(python_runs))
        deadline = time.monotonic() + 120
        while len(python_runs) + len(queue.runs()) < total and time.monotonic() < deadline:
            worker.run()
            time.sleep(0.05)
        worker.table.close()
    finally:
        php.send_signal(signal.SIGTERM)
        php.communicate(timeout=60)
    php_runs = queue.runs()
    all_runs = python_runs + php_runs
    uuids = [r["uuid"] for r in all_runs]
    assert len(uuids) == total, (len(python_runs), len(php_runs))
    assert len(set(uuids)) == total  # every job ran exactly once; none lost
    assert python_runs and php_runs  # both workers took part
    assert {row["uuid"] for row in rows} <= set(uuids)
    assert queue.failed() == []


@pytest.mark.parametrize("version", [12, 13])
def test_laravel_8s_worker_runs_jobs_python_wrote_in_a_newer_versions_shape(
    queue: LaravelQueueHarness, version: int
) -> None:
    """The keys Laravel 12 and 13 add (createdAt, delay, data.batchId,
    deleteWhenMissingModels) are extra to an older worker: it runs the job as its own."""
    lq = LaravelQueue(queue.db_url, "laravel", create_tables=False, laravel_version=version)
    d = lq.dispatch("App\\Jobs\\Ping", {"label": f"written for {version}"})
    lq.close()
    result = queue.work()
    assert result.returncode == 0, result.stderr
    (run,) = queue.runs()
    assert (run["uuid"], run["props"]["label"]) == (d.uuid, f"written for {version}")
    assert queue.failed() == []
