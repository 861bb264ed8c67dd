"""The dashboard in a real browser (headless Chromium): what producers stored renders
inertly — no script runs, no console error —, the overview refreshes itself, and an
operator signs in and purges a queue through the page's own forms."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from browser_support import console_errors
from kombu import Connection
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from kombu_sqlqueue.dashboard import create_app
from kombu_sqlqueue.store import JobStore, NewJob
from laravel_bridge import LaravelQueue
from laravel_bridge.tables import open_table

pytestmark = pytest.mark.timeout(120)

HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '"><img src=x onerror="window.__pwned=1">',
    "<svg onload=window.__pwned=1>",
    "javascript:window.__pwned=1",
]


def stored_hostile(db_url: str) -> None:
    """Every hostile text as a Celery task's argument, a raw payload, and a Laravel queue's
    name and job class."""
    with Connection(f"sqlqueue+{db_url}") as conn:
        for n, text in enumerate(HOSTILE):
            conn.default_channel.basic_publish(
                conn.default_channel.prepare_message(
                    json.dumps([[text], {"k": text}, {}]),
                    headers={"task": text, "id": f"id-{n}"},
                    content_type="application/json",
                ),
                exchange="",
                routing_key="evil",
            )
    store = JobStore(db_url)
    try:
        store.enqueue_many([NewJob("evil", t.encode() + b"\xff") for t in HOSTILE])
        # Failed ones too: the failed list and a failed job's page show the exception.
        store.enqueue_many([NewJob("evil-failed", t.encode()) for t in HOSTILE])
        for job, text in zip(
            store.claim("evil-failed", len(HOSTILE), 60).jobs, HOSTILE, strict=True
        ):
            assert store.dead_letter(job.receipt, f"Traceback (most recent call last):\n{text}")
    finally:
        store.close()
    table = open_table(db_url, "laravel")
    try:
        table.size("default")
        engine = sa.create_engine(table.store.url)  # type: ignore[attr-defined]
        with engine.begin() as conn:
            for text in HOSTILE:
                conn.execute(
                    sa.text(
                        "INSERT INTO jobs (queue, payload, attempts, available_at, created_at)"
                        " VALUES (:q, :p, 0, 0, 0)"
                    ),
                    {
                        "q": text,
                        "p": json.dumps({"displayName": text, "data": {"commandName": text}}),
                    },
                )
        engine.dispose()
    finally:
        table.close()


def test_hostile_values_render_inertly(
    browser: Any, serve: Callable[..., str], db_file: str
) -> None:
    stored_hostile(db_file)
    base = serve(create_app(db_file))
    console_errors(browser)
    browser.get(base + "/")
    assert browser.find_element(By.CSS_SELECTOR, 'section[data-layout="askr"]')
    laravel_rows = browser.find_elements(By.CSS_SELECTOR, 'section[data-layout="laravel"] tbody tr')
    assert {r.get_attribute("data-queue") for r in laravel_rows} >= set(HOSTILE)
    time.sleep(2.5)  # a refresh of the overview (htmx, every 2 s) has come and gone
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    # Every page a link leads to, and the pages their links lead to (a queue's jobs,
    # a failed job): none runs what a producer wrote.
    to_visit = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "tbody a")]
    seen: set[str] = set()
    depth = {link: 1 for link in to_visit}
    while to_visit:
        link = to_visit.pop()
        if link in seen:
            continue
        seen.add(link)
        assert link.startswith(base + "/"), link  # no javascript: link
        browser.get(link)
        assert browser.execute_script("return typeof window.__pwned") == "undefined", link
        if depth[link] < 2:
            for a in browser.find_elements(By.CSS_SELECTOR, "tbody a"):
                found = a.get_attribute("href")
                depth.setdefault(found, 2)
                to_visit.append(found)
    assert any("/job?" in link for link in seen) and any("/failed/" in link for link in seen)
    assert console_errors(browser) == []


def ready_of(browser: Any, queue: str) -> str:
    """The overview's ready count of ``queue``, read again if a refresh replaced the row
    as it was read."""
    for _ in range(20):
        try:
            cell = browser.find_element(
                By.CSS_SELECTOR, f'tr[data-queue="{queue}"] td:nth-child(2)'
            )
            return str(cell.text)
        except (StaleElementReferenceException, NoSuchElementException):
            time.sleep(0.1)
    raise AssertionError(f"no row of queue {queue!r}")


def test_the_overview_refreshes_itself(
    browser: Any, serve: Callable[..., str], db_file: str
) -> None:
    laravel = LaravelQueue(db_file, "laravel")
    try:
        laravel.dispatch("App\\Jobs\\A", {}, queue="mail")
        base = serve(create_app(db_file))
        browser.get(base + "/")
        assert ready_of(browser, "mail") == "1"
        laravel.dispatch("App\\Jobs\\A", {}, queue="mail")
    finally:
        laravel.close()
    deadline = time.monotonic() + 10
    while ready_of(browser, "mail") != "2" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ready_of(browser, "mail") == "2"  # without a reload
    assert console_errors(browser) == []


def test_an_operator_signs_in_and_purges_a_queue(
    browser: Any, serve: Callable[..., str], db_file: str
) -> None:
    store = JobStore(db_file)
    try:
        store.enqueue_many([NewJob("reports", b"r%d" % n) for n in range(3)])
    finally:
        store.close()
    base = serve(create_app(db_file, token="t0ken"))
    browser.delete_all_cookies()
    browser.get(base + "/login")
    browser.find_element(By.NAME, "token").send_keys("t0ken")
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "form.signout"))  # signed in
    browser.get(base + "/queue?layout=askr&name=reports")
    browser.find_element(By.LINK_TEXT, "purge").click()
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, 'button[data-confirm="purge"]'))
    browser.find_element(By.CSS_SELECTOR, 'button[data-confirm="purge"]').click()
    notice = wait.until(lambda b: b.find_elements(By.CLASS_NAME, "notice"))
    assert "purged 3 job(s) of queue 'reports'" in notice[0].text
    check = JobStore(db_file)
    try:
        assert check.size("reports") == 0
    finally:
        check.close()
    assert console_errors(browser) == []


def test_plots_of_depth_and_throughput_draw_and_update(
    browser: Any, serve: Callable[..., str], db_file: str
) -> None:
    """uPlot draws the overview's two plots per layout (depth, jobs per second) and a
    queue's depth, under the page's Content-Security-Policy (no console error), and they
    take each new sample without a reload."""
    store = JobStore(db_file)
    try:
        store.enqueue_many([NewJob("plotted", b"%d" % n) for n in range(5)])
    finally:
        store.close()
    base = serve(create_app(db_file))
    console_errors(browser)
    browser.get(base + "/")
    wait = WebDriverWait(browser, 20)
    box = 'section.plots[data-layout="askr"] [data-series]'
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, box + " .uplot canvas")) == 2)
    titles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, box + " .u-title")]
    assert titles == ["jobs waiting and held", "jobs per second"]
    # The sampler samples every 5 s: a second sample reaches the plots by itself.
    wait.until(
        lambda b: int(b.find_element(By.CSS_SELECTOR, box).get_attribute("data-samples") or 0) >= 2
    )
    browser.get(base + "/queue?layout=askr&name=plotted")
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "[data-series] .uplot canvas")) == 1)
    assert console_errors(browser) == []
