"""The dashboard in a real browser (headless Chromium) against real workers, on every engine:
the overview follows a real ``celery worker`` draining a backlog (htmx refreshes, no reload),
and a job a Laravel 8.83 app queued and Laravel's own worker failed into ``failed_jobs`` is
retried from the page — signed in, confirmed — and Laravel's worker then runs it.

The workers and the Laravel app are the e2e suites' own: ``tests/e2e/apps/celery_app.py``
(``e2e.record_late``, which sleeps) run by ``celery worker``, and
``tests/e2e_laravel/php/queue_harness.php`` (Laravel's dispatcher, ``queue:work`` and failer).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from browser_support import console_errors
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from kombu_sqlqueue.dashboard import create_app

# The e2e suites' helpers and apps, imported from their folders (not on sys.path when only
# this folder runs; nor on mypy's path when it checks this file alone, hence the ignores).
TESTS = Path(__file__).resolve().parent.parent
for _folder in ("e2e", "e2e_laravel"):
    if str(TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(TESTS / _folder))

from apps.celery_app import QUEUE  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
from apps.celery_app import create_app as celery_app  # noqa: E402
from e2e_harness import (  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
    E2E_DIR,
    Proc,
    celery_worker_args,
    sql,
    task_events,
    wait_until,
)
from laravel_harness import (  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
    PDO_DRIVERS,
    LaravelQueueHarness,
    parse_status_lines,
)
from laravel_support import require_laravel, sql_engine  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
from support import unavailable  # type: ignore[import-not-found, unused-ignore]  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: The backlog the Celery worker drains, and what each task takes (a worker of two pool
#: children runs two at once: about 9 s, four or five refreshes of the overview).
TASKS = 60
TASK_SECONDS = 0.3
TOKEN = "live-t0ken"
SYNC_CUSTOMERS = "App\\Things\\SyncCustomers"


#: The row of a queue in a layout's section of the overview's table (``#overview``, the part
#: htmx refreshes), as {column header: text}; null when the section lists no such queue.
#: Read in one script: a refresh of the overview cannot replace the row halfway through.
ROW_SCRIPT = """
const [layout, queue] = arguments;
const sections = document.querySelectorAll(`#overview section[data-layout="${layout}"]`);
if (sections.length !== 1) { return {error: `${sections.length} sections`}; }
const section = sections[0];
const banner = section.querySelector(".banner");
if (banner !== null) { return {error: banner.textContent}; }
const heads = [...section.querySelectorAll("thead th")].map((th) => th.textContent.trim());
for (const tr of section.querySelectorAll("tbody tr[data-queue]")) {
  if (tr.getAttribute("data-queue") === queue) {
    const row = {};
    [...tr.children].forEach((td, n) => { row[heads[n]] = td.textContent.trim(); });
    return {row: row};
  }
}
return {row: null};
"""


def overview_row(browser: Any, layout: str, queue: str) -> dict[str, str] | None:
    """``queue``'s row in the ``layout`` section of the overview the browser shows."""
    found = browser.execute_script(ROW_SCRIPT, layout, queue)
    assert "error" not in found, f"the {layout} section: {found['error']}"
    row: dict[str, str] | None = found["row"]
    return row


def is_empty(row: dict[str, str] | None) -> bool:
    """The overview says the queue holds nothing: no row, or 0 ready and 0 held."""
    return row is None or (row["ready"], row["held"]) == ("0", "0")


def mark_document(browser: Any) -> None:
    """A flag on this document's ``window``: gone if the page is ever loaded again."""
    browser.execute_script("window.__sameDocument = 'yes'")


def same_document(browser: Any) -> bool:
    return bool(browser.execute_script("return window.__sameDocument === 'yes'"))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``start(name, args, **env)``: a process of the e2e harness (its own session, output
    in files under ``tmp_path``); every one killed and reaped at teardown."""
    started: list[Proc] = []
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join([str(E2E_DIR), *filter(None, [base.get("PYTHONPATH")])])
    base["PYTHONUNBUFFERED"] = "1"

    def start(name: str, args: list[str], **env: str) -> Proc:
        proc = Proc(name, args, tmp_path, {**base, **env})
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.destroy()


def test_the_overview_follows_a_celery_worker_draining_a_backlog(
    browser: Any,
    serve: Callable[..., str],
    db_url: str,
    broker_url: str,
    tmp_path: Path,
    processes: Callable[..., Proc],
) -> None:
    out_file = tmp_path / "tasks.jsonl"
    # A visibility timeout far longer than a task: no job comes back to ready meanwhile.
    app = celery_app(broker_url, visibility=60)
    try:
        for n in range(TASKS):
            app.send_task("e2e.record_late", args=[f"t{n}"], kwargs={"sleep": TASK_SECONDS})
    finally:
        app.close()
    browser = browser
    base = serve(create_app(db_url))
    browser.get(base + "/")
    mark_document(browser)
    first = overview_row(browser, "askr", QUEUE)
    assert first is not None and (first["ready"], first["held"]) == (str(TASKS), "0"), first

    worker = processes(
        "worker",
        celery_worker_args("live", "-Q", QUEUE, "--without-gossip", "--without-mingle"),
        E2E_BROKER_URL=broker_url,
        E2E_DB_URL=db_url,
        E2E_OUT=str(out_file),
        E2E_VISIBILITY="60",
    )
    # What the page shows, each change once, until it shows the queue empty.
    seen: list[str] = [first["ready"]]
    started = time.monotonic()
    deadline = started + 60
    while True:
        row = overview_row(browser, "askr", QUEUE)
        if is_empty(row):
            break
        assert row is not None
        if row["ready"] != seen[-1]:
            seen.append(row["ready"])
        if time.monotonic() > deadline:
            pytest.fail(f"the overview did not show the queue drained; it showed {seen}:\n"
                        f"{worker.output[-3000:]}")  # fmt: skip
        assert worker.popen.poll() is None, worker.output[-3000:]
        time.sleep(0.1)
    drained_after = time.monotonic() - started
    if seen[-1] != "0":
        seen.append("0")  # (no row: nothing ready)
    counts = [int(ready) for ready in seen]
    assert counts == sorted(counts, reverse=True), seen  # only ever falling
    between = [n for n in counts if 0 < n < TASKS]
    assert len(between) >= 2, f"ready went {seen} in {drained_after:.1f} s"
    assert counts[-1] == 0
    assert same_document(browser)  # refreshed in place: the page was never loaded again
    # The page said so because it is so: every task ran, once; nothing is left.
    assert int(sql(db_url, "SELECT count(*) FROM askr_jobs")[0][0]) == 0
    wait_until(lambda: len(task_events(out_file, "ran")) == TASKS, 10, what="every task ran")
    labels = sorted(e["label"] for e in task_events(out_file, "ran"))
    assert labels == sorted(f"t{n}" for n in range(TASKS))
    assert "Traceback" not in worker.output, worker.output[-3000:]
    assert console_errors(browser) == []


@pytest.fixture
def laravel_app(php: str, engine_name: str, db_url: str, tmp_path: Path) -> LaravelQueueHarness:
    """Laravel 8.83's queue (dispatcher, ``queue:work``, the failer) on a migrated database."""
    require_laravel()
    drivers = subprocess.run(
        [php, "-r", "echo implode(',', PDO::getAvailableDrivers());"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split(",")
    if PDO_DRIVERS[engine_name] not in drivers:
        unavailable(f"PHP has no pdo_{PDO_DRIVERS[engine_name]} (apt-get install php-pgsql …)")
    harness = LaravelQueueHarness(php, db_url, tmp_path / "runs.jsonl")
    harness.migrate()
    return harness


def execute(db_url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """One statement on the test database, outside Laravel and the dashboard."""
    engine = sql_engine(db_url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def statuses(out: str) -> list[tuple[str, str]]:
    """``queue:work``'s status lines as (status, job name)."""
    return [(line["status"], line["name"]) for line in parse_status_lines(out)]


def sign_in(browser: Any, base: str) -> None:
    browser.delete_all_cookies()  # the session's browser: no earlier test's session
    browser.get(base + "/login")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "form.signout"))


def test_a_laravel_job_failed_by_laravel_is_retried_from_the_page_and_laravel_runs_it(
    browser: Any,
    serve: Callable[..., str],
    db_url: str,
    laravel_app: LaravelQueueHarness,
) -> None:
    # The Laravel app queues SyncCustomers (SerializesModels: customers 7 and 8, owner 7);
    # the owner's row is gone when the worker runs it (deleted, or not yet committed), so
    # Laravel fails it: ModelNotFoundException, one try, into failed_jobs.
    queued = laravel_app.queue_things("models")["models"]
    assert queued["queue"] == "default"
    execute(db_url, "DELETE FROM users WHERE id = 7")
    failed_run = laravel_app.work(once=True)
    assert statuses(failed_run.stdout) == [
        ("Processing", SYNC_CUSTOMERS),
        ("Failed", SYNC_CUSTOMERS),
    ], failed_run.stdout + failed_run.stderr
    (entry,) = laravel_app.failed()
    assert entry["uuid"] == queued["uuid"]
    assert "ModelNotFoundException" in entry["exception"]
    ((failed_id,),) = execute(db_url, "SELECT id FROM failed_jobs WHERE uuid = :u", u=entry["uuid"])
    assert execute(db_url, "SELECT count(*) FROM jobs") == [(0,)]
    assert laravel_app.runs() == []  # handle() never ran

    browser = browser
    base = serve(create_app(db_url, token=TOKEN))
    sign_in(browser, base)
    wait = WebDriverWait(browser, 20)
    browser.get(base + "/failed/laravel")
    (row,) = browser.find_elements(By.CSS_SELECTOR, f'tr[data-failed="{failed_id}"]')
    assert SYNC_CUSTOMERS in row.text and "ModelNotFoundException" in row.text, row.text
    row.find_element(By.CSS_SELECTOR, f'a[href$="/failed/laravel/{failed_id}"]').click()
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "pre.trace"))
    assert entry["uuid"] in browser.find_element(By.TAG_NAME, "main").text
    assert "ModelNotFoundException" in browser.find_element(By.CSS_SELECTOR, "pre.trace").text
    browser.find_element(By.CSS_SELECTOR, 'a[href*="/actions/retry?"]').click()
    confirm = wait.until(
        lambda b: b.find_elements(
            By.CSS_SELECTOR, 'form[method="post"] button[data-confirm="retry"]'
        )
    )
    assert execute(db_url, "SELECT count(*) FROM failed_jobs") == [(1,)]  # asked, not done
    confirm[0].click()
    notice = wait.until(lambda b: b.find_elements(By.CLASS_NAME, "notice"))
    assert "retried 1 failed job(s)" in notice[0].text, notice[0].text
    # Back on the failed jobs' list, which no longer has it.
    assert browser.current_url.startswith(base + "/failed/laravel")
    assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-failed="{failed_id}"]') == []
    assert browser.find_elements(By.CSS_SELECTOR, f'a[href$="/failed/laravel/{failed_id}"]') == []

    # Back on its queue, as `queue:retry` puts it: the same job, attempts reset.
    assert execute(db_url, "SELECT count(*) FROM failed_jobs") == [(0,)]
    ((queue, attempts, payload),) = execute(db_url, "SELECT queue, attempts, payload FROM jobs")
    assert (queue, attempts) == ("default", 0) and entry["uuid"] in payload
    browser.get(base + "/")
    mark_document(browser)
    shown = overview_row(browser, "laravel", "default")
    assert shown is not None and (shown["ready"], shown["failed"]) == ("1", "0"), shown

    # The owner's row is there now: Laravel's worker runs the retried job, and it succeeds.
    execute(db_url, "INSERT INTO users (id, name) VALUES (7, 'Ada')")
    ran = laravel_app.work(once=True)
    assert statuses(ran.stdout) == [
        ("Processing", SYNC_CUSTOMERS),
        ("Processed", SYNC_CUSTOMERS),
    ], ran.stdout + ran.stderr
    (run,) = laravel_app.runs()
    assert run["class"] == SYNC_CUSTOMERS
    # (the namesakes' relation has no order: row 7 is a new row now)
    assert (run["customers"], sorted(run["namesakes"])) == (["Ada", "Grace"], [7, 9]), run
    assert execute(db_url, "SELECT count(*) FROM jobs") == [(0,)]
    assert laravel_app.failed() == []
    # The overview, refreshing itself, shows the queue done with.
    wait_until(
        lambda: is_empty(overview_row(browser, "laravel", "default")),
        15,
        what="the overview showing the default queue empty",
    )
    assert same_document(browser)
    assert console_errors(browser) == []
