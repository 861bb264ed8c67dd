"""Celery and Laravel on one queue, on SQLite, PostgreSQL and MariaDB: a real ``celery worker``
runs the jobs Laravel 8.83 dispatches (plain ``@app.task(name=<PHP class>)`` tasks,
``laravel_celery_app.py``), settles them by Laravel's rules, and Celery's ``send_task`` writes
jobs Laravel's real worker runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from laravel_harness import CHAINED, WORKER_CASES, LaravelQueueHarness, php_shape, same
from laravel_support import APP_KEY, batch_row, sql_engine, unique_locks

from laravel_bridge import Encrypter, LaravelQueue, ModelIdentifier, Payload, PhpEnum
from laravel_bridge.messages import from_message

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
VISIBILITY = 3.0
LISTENER = "App\\Things\\SendShipmentNotification"
MAILABLE = "App\\Things\\OrderShippedMail"


def json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class CeleryWorker:
    """A ``celery worker`` process of ``laravel_celery_app`` (its output in a file)."""

    def __init__(self, db_url: str, out: Path, log: Path, **env: str) -> None:
        self.log = log
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
            ),
            "LC_BROKER_URL": f"sqlqueue+{db_url}",
            "LC_OUT": str(out),
            "LC_VISIBILITY": str(VISIBILITY),
            **env,
        }
        queues = environ.get("LC_QUEUES", "default,emails")
        with log.open("w") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "laravel_celery_app", "worker",
                 "--pool=prefork", "-c", "2", "-Q", queues, "-l", "info",
                 "-n", f"lc{time.monotonic_ns()}@%h", "--without-mingle", "--without-gossip"],
                env=environ, stdout=sink, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,
            )  # fmt: skip
        wait_for(lambda: "ready." in self.output() or self.proc.poll() is not None, 60, "ready")
        assert self.proc.poll() is None, self.output()[-3000:]

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "celery.jsonl"


@pytest.fixture
def celery_worker(
    queue: LaravelQueueHarness, out: Path, tmp_path: Path
) -> Iterator[Callable[..., CeleryWorker]]:
    started: list[CeleryWorker] = []

    def start(**env: str) -> CeleryWorker:
        worker = CeleryWorker(queue.db_url, out, tmp_path / f"worker{len(started)}.log", **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.fixture
def laravel_queue(queue: LaravelQueueHarness) -> Iterator[LaravelQueue]:
    q = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    yield q
    q.close()


def runs_of(out: Path) -> list[dict[str, Any]]:
    """The Celery tasks' lines, their args and kwargs as Python values again."""
    lines = json_lines(out)
    for line in lines:
        line["args"], line["kwargs"] = from_message(line["args"]), from_message(line["kwargs"])
    return lines


def test_celery_runs_every_job_laravel_dispatches_once_with_type_exact_kwargs(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    laravel_queue: LaravelQueue,
) -> None:
    dispatched = queue.dispatch()  # the 12 cases of php/jobs.php, Laravel's own dispatch
    things = queue.queue_things("listener", "mailable")
    worker = celery_worker()
    expected = len(dispatched) + len(CHAINED) + len(things)
    runs = wait_for(lambda: len(r := runs_of(out)) >= expected and r, 60, f"{expected} runs")
    time.sleep(1)  # nothing runs twice meanwhile
    runs = runs_of(out)
    assert len(runs) == expected, runs
    by_uuid = {r["uuid"]: r for r in runs}
    assert len(by_uuid) == expected  # each once
    encrypter = Encrypter(APP_KEY)
    for case, row in dispatched.items():
        cls, queue_name, props = WORKER_CASES[case]
        run = by_uuid[row["uuid"]]
        assert (run["class"], run["queue"], run["args"]) == (cls, queue_name, []), case
        assert (run["attempts"], run["retries"]) == (1, 0), case
        raw = Payload.parse(row["payload"]).command(encrypter).obj.plain()
        shaped = php_shape(run["kwargs"], {k: raw[k] for k in run["kwargs"]})
        assert same(shaped, props), (case, shaped, props)
    delayed = dispatched["delayed_2s"]
    assert by_uuid[delayed["uuid"]]["ran_at"] >= delayed["available_at"]  # delay(2) waited
    chain = sorted(
        (r for r in runs if r["class"] == "App\\Jobs\\ChainStep"), key=lambda r: r["ran_at"]
    )
    assert [(r["queue"], r["kwargs"]) for r in chain[1:]] == [
        (q, p) for q, p in CHAINED
    ]  # the chain's next jobs, dispatched by Celery's acks, in order
    listener = by_uuid[things["listener"]["uuid"]]
    (event,) = listener["args"]
    assert (listener["class"], listener["kwargs"]) == (LISTENER, {})
    assert event.class_name == "App\\Things\\OrderShipped" and event["orderId"] == 1001
    assert isinstance(event["customer"], ModelIdentifier)
    assert event["shippedAt"] == datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    mail = by_uuid[things["mailable"]["uuid"]]
    assert mail["class"] == MAILABLE and mail["kwargs"]["orderId"] == 1001
    assert mail["kwargs"]["to"] == [{"name": None, "address": "ada@example.com"}]
    assert worker.stop() == 0, worker.output()[-3000:]
    assert laravel_queue.size("default") == laravel_queue.size("emails") == 0
    assert queue.failed() == []


def test_a_task_raising_until_its_tries_are_spent_is_failed_and_queue_retry_brings_it_back(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "flaky-may-pass"
    row = queue.dispatch("flaky")["flaky"]  # App\Jobs\Flaky: tries 3, backoff 0
    worker = celery_worker(LC_MARKER=str(marker))
    failed = wait_for(queue.failed, 60, "the failed job")
    (entry,) = failed
    assert entry["uuid"] == row["uuid"] and entry["connection"] == "database"
    assert entry["exception"].startswith("RuntimeError: flaky attempt 3")
    attempts = [r["attempts"] for r in runs_of(out)]
    assert attempts == [1, 2, 3]  # Laravel's count: each reservation one attempt
    marker.touch()
    (retried,) = queue.retry(row["uuid"])  # php artisan queue:retry's own code
    assert retried["retried"]
    wait_for(lambda: len(runs_of(out)) == 4, 30, "the retried run")
    assert runs_of(out)[-1]["attempts"] == 1 and queue.failed() == []
    assert worker.stop() == 0


def test_a_backoff_list_and_max_exceptions_are_laravels(
    queue: LaravelQueueHarness, celery_worker: Callable[..., CeleryWorker], out: Path
) -> None:
    """``App\\Jobs\\Tuned``: backoff [2, 4, 8], maxExceptions 3, a retryUntil far away (so
    its tries do not count): released after 2 s, then 4 s, and failed at the third exception."""
    row = queue.dispatch("tuned")["tuned"]
    celery_worker(LC_FAIL_TUNED="1")
    (entry,) = wait_for(queue.failed, 60, "the failed job")
    assert entry["uuid"] == row["uuid"] and "tuned attempt 3" in entry["exception"]
    times = [r["ran_at"] for r in runs_of(out)]
    assert len(times) == 3
    assert times[1] - times[0] >= 1.5 and times[2] - times[1] >= 3.5  # whole seconds, floors


def test_retry_until_ends_the_retries(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    laravel_queue: LaravelQueue,
) -> None:
    celery_worker()  # ready first: its start-up (seconds, under load) is not in the window
    until = int(time.time()) + 4
    d = laravel_queue.dispatch(
        "App\\Jobs\\Ping", {"label": "fail-until"}, retry_until=until, tries=1, backoff=1
    )
    (entry,) = wait_for(queue.failed, 60, "the failed job")
    assert entry["uuid"] == d.uuid
    runs = runs_of(out)
    assert len(runs) >= 2  # tries=1 did not stop it: retryUntil did
    assert runs[-1]["ran_at"] >= until - 1


def test_a_worker_killed_mid_task_is_run_again_after_the_visibility_timeout(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    laravel_queue: LaravelQueue,
) -> None:
    d = laravel_queue.dispatch("App\\Jobs\\Ping", {"label": "sleep-once"}, tries=3)
    first = celery_worker()
    wait_for(lambda: runs_of(out), 30, "the first run")
    first.kill()  # kill -9 of the whole worker, its pool with it
    killed_at = time.time()
    second = celery_worker()
    wait_for(lambda: len(runs_of(out)) == 2, 60, "the run after the lapse")
    again = runs_of(out)[1]
    assert again["uuid"] == d.uuid and (again["attempts"], again["retries"]) == (2, 1)
    assert again["ran_at"] >= killed_at + VISIBILITY - 1.5
    assert second.stop() == 0
    assert laravel_queue.size("default") == 0 and queue.failed() == []


def test_send_task_writes_jobs_laravels_worker_runs_and_a_countdown_waits(
    queue: LaravelQueueHarness, tmp_path: Path
) -> None:
    from laravel_celery_app import create_app

    os.environ.setdefault("LC_OUT", str(tmp_path / "unused.jsonl"))
    env = {"LC_BROKER_URL": f"sqlqueue+{queue.db_url}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        app = create_app()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    scalars = WORKER_CASES["scalars"][2]
    app.send_task("App\\Jobs\\Scalars", kwargs=scalars, queue="default")
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    app.send_task(
        "App\\Jobs\\ResizeImage",
        kwargs={
            "path": "/img/c.png",
            # SerializesModels restores a property that is a model's identifier.
            "when": ModelIdentifier("App\\Jobs\\User", 7),
            "status": PhpEnum("App\\Jobs\\Status", "Paid"),
            "statuses": [when, 2.5, {"n": 1}],
        },
        queue="default",
    )
    sent = time.time()
    app.send_task("App\\Jobs\\Ping", kwargs={"label": "later"}, queue="emails", countdown=3)
    app.close()
    result = queue.work(queue=["default", "emails"], sleep=0.1)  # until nothing is ready
    assert result.returncode == 0, result.stderr
    assert "App\\Jobs\\Ping" not in {r["class"] for r in queue.runs()}  # not yet
    time.sleep(max(0.0, sent + 4.1 - time.time()))  # available_at: a whole second, rounded up
    assert queue.work(queue=["emails"], sleep=0.1).returncode == 0
    runs = {r["class"]: r for r in queue.runs()}
    assert same(runs["App\\Jobs\\Scalars"]["props"], scalars)
    resize = runs["App\\Jobs\\ResizeImage"]["props"]
    assert resize["when"] == {"model": "App\\Jobs\\User", "attributes": {"id": 7, "name": "Ada"}}
    assert resize["status"] == {"enum": "App\\Jobs\\Status", "value": "paid"}
    assert same(
        resize["statuses"], ["Carbon\\Carbon 2024-05-06 07:08:09.123456 UTC", 2.5, {"n": 1}]
    )
    assert runs["App\\Jobs\\Ping"]["ran_at"] >= sent + 2
    assert queue.failed() == []


#: ``laravel-bridge work --handlers shared_handlers``: Ping and Nested, one JSON line each.
BRIDGE_HANDLERS = """
import json, os
from laravel_bridge import handles

@handles("App\\\\Jobs\\\\Ping")
@handles("App\\\\Jobs\\\\Nested")
def run(job):
    line = json.dumps({"runner": "bridge", "class": job.name, "uuid": job.uuid}) + "\\n"
    with open(os.environ["PY_RUNS"], "a") as f:
        f.write(line)
"""


def test_php_celery_and_the_bridge_drain_one_shared_queue_each_job_once(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    laravel_queue: LaravelQueue,
    engine_name: str,
    tmp_path: Path,
) -> None:
    """1,000 jobs of four classes: Ping (all three run it), Scalars (Celery and PHP), Nested
    (the bridge and PHP), Unicode (PHP alone). Each claims only what it runs."""
    mix = [
        ("App\\Jobs\\Ping", {"label": "shared"}),
        ("App\\Jobs\\Scalars", WORKER_CASES["scalars"][2]),
        ("App\\Jobs\\Nested", WORKER_CASES["nested"][2]),
        ("App\\Jobs\\Unicode", WORKER_CASES["unicode"][2]),
    ]
    jobs = [laravel_queue.build(*mix[i % 4]) for i in range(1000)]
    uuids = {job.uuid for job in jobs}
    # The three runners first, the jobs then: pushed before, the two that start quickest
    # drained them all while Celery's worker was still starting (a loaded CI machine).
    celery = celery_worker(LC_CLASSES="App\\Jobs\\Ping,App\\Jobs\\Scalars", LC_QUEUES="default")
    (tmp_path / "shared_handlers.py").write_text(BRIDGE_HANDLERS)
    py_runs = tmp_path / "bridge.jsonl"
    env = {
        **os.environ,
        "PY_RUNS": str(py_runs),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    bridge_err = (tmp_path / "bridge.err").open("w")
    bridge = subprocess.Popen(
        [sys.executable, "-m", "laravel_bridge", "work", "--url", queue.db_url,
         "--layout", "laravel", "--sleep", "0.1", "--handlers", "shared_handlers"],
        env=env, stdout=subprocess.DEVNULL, stderr=bridge_err, text=True,
    )  # fmt: skip
    php = queue.start_work(tmp_path / "php.out", sleep=0.1)

    def all_runs() -> list[dict[str, Any]]:
        return json_lines(out) + json_lines(py_runs) + queue.runs()

    try:
        time.sleep(2)  # the bridge and PHP's worker polling (Celery's said it is ready)
        laravel_queue.table.push_many(jobs)
        wait_for(
            lambda: (
                laravel_queue.size("default") == 0
                or (engine_name == "sqlite" and len(all_runs()) >= len(jobs))
            ),
            240,
            "the queue drained",
        )
        time.sleep(0.5)
    finally:
        bridge.send_signal(signal.SIGTERM)
        php.send_signal(signal.SIGTERM)
        php_err = php.communicate(timeout=60)[1]
        bridge.wait(timeout=60)
        bridge_err.close()
        code = celery.stop()
    codes = (code, bridge.returncode, php.returncode)
    assert codes == (0, 0, 0), (php_err[-2000:], (tmp_path / "bridge.err").read_text()[-2000:])
    runs = all_runs()
    ran = [r["uuid"] for r in runs]
    assert set(ran) == uuids  # none lost
    assert len(ran) == len(jobs), "a job ran twice"
    by = {
        runner: {r["class"] for r in runs if r["runner"] == runner}
        for runner in ("celery", "bridge", "php")
    }
    assert by["celery"] <= {"App\\Jobs\\Ping", "App\\Jobs\\Scalars"} and by["celery"]
    assert by["bridge"] <= {"App\\Jobs\\Ping", "App\\Jobs\\Nested"} and by["bridge"]
    assert "App\\Jobs\\Unicode" in by["php"]
    left = laravel_queue.size("default")
    if engine_name == "sqlite":
        # Laravel's deletes SQLite refused (see docs): the job stays reserved, or — when
        # Laravel's worker then fails the job for the exception and its second delete goes
        # through — lands in failed_jobs. It ran once either way.
        refused = set(re.findall(r'locked \(SQL: delete from "jobs" where "id" = (\d+)', php_err))
        assert left + len(queue.failed()) == len(refused), php_err[-3000:]
    else:
        assert left == 0 and queue.failed() == [], php_err[-3000:]


def test_a_job_past_its_timeout_is_stopped_by_celerys_time_limit_and_failed(
    queue: LaravelQueueHarness, celery_worker: Callable[..., CeleryWorker], out: Path
) -> None:
    """``App\\Jobs\\Slow``: timeout 1, failOnTimeout, sleeps 10 s. Its timeout is Celery's soft
    time limit (raised in the task), and the job is failed as Laravel fails it."""
    row = queue.dispatch("timeout")["timeout"]
    worker = celery_worker()
    try:
        (entry,) = wait_for(queue.failed, 60, "the failed job")
    except AssertionError:
        raise AssertionError(worker.output()[-4000:]) from None
    assert entry["uuid"] == row["uuid"]
    assert "MaxAttemptsExceededException" in entry["exception"]
    assert "SoftTimeLimitExceeded" in entry["exception"] or "SoftTimeLimitExceeded" in (
        worker.output()
    )
    assert len(runs_of(out)) == 1
    assert worker.stop() == 0


def test_on_contract_v1s_table_a_job_celery_has_no_task_for_is_handed_back_for_another_worker(
    queue: LaravelQueueHarness, celery_worker: Callable[..., CeleryWorker], out: Path
) -> None:
    """The ``askr`` layout (no class filter): Celery reserves a job it has no task for, and
    hands it back, attempt refunded, for a worker that has (here ``laravel_bridge``'s)."""
    from laravel_bridge import HandlerRegistry, Worker, WorkerOptions

    askr = LaravelQueue(queue.db_url, "askr")
    mine = askr.dispatch("App\\Jobs\\Ping", {"label": "celery's"})
    theirs = askr.dispatch("App\\Jobs\\OnlyPython", {"n": 1}, tries=1)
    worker = celery_worker(LC_LAYOUT="askr", LC_QUEUES="default", LC_CLASSES="App\\Jobs\\Ping")
    wait_for(lambda: runs_of(out), 30, "celery's job")
    wait_for(
        lambda: "no Celery task 'App\\\\Jobs\\\\OnlyPython' here" in worker.output(),
        30,
        "hand-back",
    )
    assert worker.stop() == 0
    assert [r["uuid"] for r in runs_of(out)] == [mine.uuid]
    store: Any = askr.table.store  # type: ignore[attr-defined]
    (row,) = (
        [r for r in store.rows() if r["uuid"] == theirs.uuid]
        if hasattr(store, "rows")
        else [store.get_job(theirs.id)]
    )
    assert row["attempts"] == 0 and row["available_at"] > time.time() + 30  # refunded, later
    ran: list[str] = []
    registry = HandlerRegistry()
    registry.register("App\\Jobs\\OnlyPython", lambda job: ran.append(job.uuid))
    store.clock = lambda: time.time() + 120  # past the hand-back's delay
    Worker(askr.table, WorkerOptions(stop_when_empty=True, sleep=0), handlers=registry).run()
    assert ran == [theirs.uuid] and askr.size("default") == 0
    askr.close()


EXPORT = "App\\Things\\ExportOrders"  # ShouldBeUnique, its uniqueId a property


@pytest.mark.parametrize(
    "fails", [False, True, "completes"], ids=["done", "failed", "completed-in-transaction"]
)
def test_a_celery_worker_releases_a_unique_jobs_lock_as_laravels_worker_does(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    fails: bool | str,
) -> None:
    """``ShouldBeUnique`` dispatched by Laravel 8.83 itself (its lock in the database cache
    store's ``cache_locks``): a Celery worker with the format's ``unique_locks`` releases it
    when the job is done or failed, as ``CallQueuedHandler`` does, so Laravel's next
    ``dispatch()`` of the same job is queued instead of dropped. Completed in the task's
    transaction (``kombu_sqlqueue.complete``, in a prefork child): its effect once, the job
    gone with it, and the lock released once the task returned."""
    engine = sql_engine(queue.db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE effects (label VARCHAR(64) NOT NULL)"))
    assert queue.dispatch_unique("ExportOrders", "2024-05")
    assert not queue.dispatch_unique("ExportOrders", "2024-05")  # held: Laravel drops it
    assert unique_locks(queue.db_url) == [
        "laravel_cachelaravel_unique_job:App\\Things\\ExportOrdersorders-2024-05"
    ]
    env = {"LC_UNIQUE_LOCKS": "cache_locks", "LC_QUEUES": "default"}
    if fails is True:
        env["LC_FAIL_CLASSES"] = EXPORT
    elif fails == "completes":
        env["LC_COMPLETE_CLASSES"] = EXPORT
    worker = celery_worker(**env)
    wait_for(lambda: unique_locks(queue.db_url) == [], 60, "the unique lock released")
    assert [r["class"] for r in runs_of(out)] == [EXPORT]
    assert worker.stop() == 0
    assert [f["class"] for f in queue.failed()] == ([EXPORT] if fails is True else [])
    with engine.connect() as conn:
        effects = conn.execute(sa.text("SELECT label FROM effects")).scalars().all()
    engine.dispose()
    assert effects == ([runs_of(out)[0]["uuid"]] if fails == "completes" else [])
    if fails == "completes":
        assert "stale" not in worker.output() and "Traceback" not in worker.output()
    assert queue.dispatch_unique("ExportOrders", "2024-05")  # queued again


def callbacks(queue: LaravelQueueHarness) -> list[str]:
    return sorted(r["class"] for r in queue.runs() if r["class"].startswith("batch-"))


@pytest.mark.parametrize(
    ("labels", "counts", "expected"),
    [
        (("a", "b"), (0, 0), ["batch-finally", "batch-then"]),
        (("ok", "fail-b"), (1, 1), ["batch-catch", "batch-finally"]),
    ],
)
def test_a_batch_celery_runs_is_recorded_and_php_runs_its_callbacks_once(
    queue: LaravelQueueHarness,
    celery_worker: Callable[..., CeleryWorker],
    out: Path,
    labels: tuple[str, ...],
    counts: tuple[int, int],
    expected: list[str],
) -> None:
    batch = queue.batch(*labels)
    worker = celery_worker(LC_CLASSES="App\\Things\\BatchStep")
    wait_for(lambda: len(runs_of(out)) == len(labels), 30, "the batch's jobs")
    wait_for(
        lambda: (batch_row(queue.db_url, batch["batch_id"])["pending_jobs"],
                 batch_row(queue.db_url, batch["batch_id"])["failed_jobs"]) == counts,
        30,
        "the batch recorded",
    )  # fmt: skip
    assert worker.stop() == 0
    row = batch_row(queue.db_url, batch["batch_id"])
    assert row["finished_at"] is not None
    assert (row["cancelled_at"] is not None) is (counts[1] > 0)  # a first failure cancels
    php = queue.work()  # the callbacks Celery's worker queued for PHP
    assert php.returncode == 0, php.stderr
    assert callbacks(queue) == expected
    assert queue.work().returncode == 0 and callbacks(queue) == expected  # once each
