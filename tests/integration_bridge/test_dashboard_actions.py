"""The dashboard's operator verbs beyond one queue or one failed job, on every engine: a
job's own page, failed jobs paged by keyset, retry and forget of a selection, retry-all
and flush (of a queue or of all), releasing a holder's jobs, and a queue's limits — each
the admin verb the CLI runs, each asked first and done by a signed-in POST."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from kombu_sqlqueue.dashboard import create_app
from kombu_sqlqueue.dashboard.app import PAGE_JOBS
from kombu_sqlqueue.ops.connect import open_admin
from kombu_sqlqueue.store import JobStore, NewJob
from laravel_bridge import LaravelQueue
from laravel_bridge.tables import open_table

TOKEN = "s3cret-token"


@pytest.fixture
def signed_in(db_url: str) -> Iterator[TestClient]:
    """A client signed in with the token (redirects not followed: each is asserted)."""
    with TestClient(create_app(db_url, token=TOKEN), follow_redirects=False) as client:
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        yield client


def act(client: TestClient, action: str, **form: str | list[str]) -> str:
    """Ask (GET), then do (POST with the confirmation form's CSRF value): what the page
    said after it."""
    ask = client.get(f"/actions/{action}", params=form)
    assert ask.status_code == 200, ask.text
    found = re.search(r'name="csrf" value="([0-9a-f]*)"', ask.text)
    assert found is not None, ask.text
    # The confirmation form carries everything on: post what it holds.
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', ask.text))
    done = client.post(f"/actions/{action}", data=fields)
    assert done.status_code == 303, done.text
    return html.unescape(client.get(done.headers["location"]).text)


def dead_letters(db_url: str, queue: str, n: int) -> list[int]:
    """``n`` failed jobs of ``queue`` (contract v1's table), their ids oldest first."""
    store = JobStore(db_url)
    try:
        store.enqueue_many([NewJob(queue, b"job %d" % i) for i in range(n)])
        for job in store.claim(queue, n, 60).jobs:
            assert store.dead_letter(job.receipt, f"ValueError: {job.payload!r}")
        return sorted(d.id for d in store.dead_letters() if d.queue == queue)
    finally:
        store.close()


def listed(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-failed="(\d+)"', page)]


def test_a_job_s_page_shows_it_decoded_and_its_bytes(db_url: str, signed_in: TestClient) -> None:
    store = JobStore(db_url)
    try:
        (job_id,) = store.enqueue_many([NewJob("q", b'{"a": "<script>x()</script>"}\xfe')])
        store.enqueue(NewJob("q", b"second"))
    finally:
        store.close()
    queue = signed_in.get("/queue", params={"layout": "askr", "name": "q"}).text
    assert f"id={job_id}" in queue  # its id links to its page
    page = signed_in.get("/job", params={"layout": "askr", "name": "q", "id": str(job_id)})
    assert page.status_code == 200 and "ready" in page.text
    assert "&lt;script&gt;x()" in page.text and "<script>x()" not in page.text
    raw = signed_in.get("/job/raw", params={"layout": "askr", "name": "q", "id": str(job_id)})
    assert raw.content == b'{"a": "<script>x()</script>"}\xfe'
    assert raw.headers["content-disposition"].startswith("attachment")
    for params in (
        {"layout": "askr", "name": "other", "id": str(job_id)},  # another queue's id
        {"layout": "askr", "name": "q", "id": "999999"},
        {"layout": "askr", "name": "q", "id": "1 OR 1=1"},
        {"layout": "askr", "name": "q", "id": "²"},
        {"layout": "askr", "name": "q", "id": "9" * 30},
        {"layout": "nosuch", "name": "q", "id": "1"},
        {"layout": "askr", "name": "", "id": "1"},
    ):
        assert signed_in.get("/job", params=params).status_code == 404, params

    laravel = LaravelQueue(db_url, "laravel")
    try:
        laravel.dispatch("App\\Jobs\\SendInvoice", {"invoice": 7}, queue="mail")
    finally:
        laravel.close()
    mail = signed_in.get("/queue", params={"layout": "laravel", "name": "mail"}).text
    (laravel_id,) = re.findall(r'data-job="(\d+)"', mail)
    page = signed_in.get("/job", params={"layout": "laravel", "name": "mail", "id": laravel_id})
    assert page.status_code == 200 and "App\\Jobs\\SendInvoice" in page.text
    assert "<td>ready" in page.text
    # Reserved by a worker (Laravel's pop): held until its retry_after runs out.
    table = open_table(db_url, "laravel")
    try:
        popped = table.pop("mail", 90)
        assert popped is not None and str(popped.id) == laravel_id
    finally:
        table.close()
    page = signed_in.get("/job", params={"layout": "laravel", "name": "mail", "id": laravel_id})
    assert "<td>held until" in page.text and "ready" not in page.text


def test_failed_jobs_are_paged_by_keyset(db_url: str, signed_in: TestClient) -> None:
    ids = dead_letters(db_url, "paged", PAGE_JOBS + 7)
    dead_letters(db_url, "other", 2)
    first = signed_in.get("/failed/askr", params={"queue": "paged"}).text
    assert listed(first) == sorted(ids, reverse=True)[:PAGE_JOBS]
    older = re.search(r'class="older" href="([^"]+)"', first)
    assert older is not None
    query = parse_qs(urlsplit(older.group(1).replace("&amp;", "&")).query)
    assert query == {"queue": ["paged"], "before": [str(listed(first)[-1])]}
    second = signed_in.get("/failed/askr", params={"queue": "paged", "before": query["before"][0]})
    assert listed(second.text) == sorted(ids, reverse=True)[PAGE_JOBS:]
    assert 'class="older"' not in second.text
    assert signed_in.get("/failed/askr", params={"before": "x"}).status_code == 404
    # Exactly a page below: no link to an empty page.
    exactly = signed_in.get(
        "/failed/askr", params={"queue": "paged", "before": str(sorted(ids)[PAGE_JOBS])}
    ).text
    assert listed(exactly) == sorted(ids, reverse=True)[7:][:PAGE_JOBS]
    assert len(listed(exactly)) == PAGE_JOBS and 'class="older"' not in exactly


def test_retry_and_forget_a_selection_retry_all_and_flush(
    db_url: str, signed_in: TestClient
) -> None:
    a = dead_letters(db_url, "a", 4)
    assert len(dead_letters(db_url, "b", 3)) == 3
    page = signed_in.get("/failed/askr").text
    assert page.count('type="checkbox" name="target"') == 7
    said = act(signed_in, "retry", layout="askr", target=[str(a[0]), str(a[1])])
    assert "retried 2 failed job(s)" in said
    said = act(signed_in, "forget", layout="askr", target=[str(a[2])])
    assert "forgot 1 failed job(s)" in said
    said = act(signed_in, "retry_all", layout="askr", target="queue:b")
    assert "retried 3 failed job(s) of queue 'b'" in said
    store = JobStore(db_url)
    try:
        assert store.size("a") == 2 and store.size("b") == 3
        assert [d.id for d in store.dead_letters()] == [a[3]]
    finally:
        store.close()
    assert "flushed 1 failed job(s) of every queue" in act(
        signed_in, "flush", layout="askr", target="all"
    )
    assert listed(signed_in.get("/failed/askr").text) == []
    # Nothing of that name: a 404, nothing done.
    assert (
        signed_in.get("/actions/flush", params={"layout": "askr", "target": "x"}).status_code == 404
    )
    ask = signed_in.get("/actions/retry", params={"layout": "askr", "target": "999999"})
    assert ask.status_code == 200  # asked; doing it finds nothing
    csrf = re.findall(r'name="csrf" value="([0-9a-f]*)"', ask.text)[0]
    done = signed_in.post(
        "/actions/retry", data={"layout": "askr", "target": "999999", "csrf": csrf}
    )
    assert done.status_code == 404


def test_retry_on_laravel_s_tables_follows_queue_retry(db_url: str, signed_in: TestClient) -> None:
    table = open_table(db_url, "laravel")
    try:
        laravel = LaravelQueue(db_url, "laravel", table=table)
        laravel.dispatch("App\\Jobs\\SendInvoice", {"invoice": 7}, queue="mail")
        job = table.pop("mail", 90)
        assert job is not None
        assert table.fail(job, "database", "uuid-7", "Exception: SMTP down")
    finally:
        table.close()
    assert "retried 1 failed job(s) of queue 'mail'" in act(
        signed_in, "retry_all", layout="laravel", target="queue:mail"
    )
    admin = open_admin(db_url, "laravel")
    try:
        (back,) = admin.peek("mail", 5)
        assert back.attempts == 0 and admin.failed() == []
    finally:
        admin.close()


def test_release_a_holder_s_jobs(db_url: str, signed_in: TestClient) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue_many([NewJob("work", b"%d" % n) for n in range(3)])
        store.holder = "celery@dead-host"
        assert len(store.claim("work", 2, 300).jobs) == 2
    finally:
        store.close()
    page = signed_in.get("/queue", params={"layout": "askr", "name": "work"}).text
    assert "target=celery%40dead-host&amp;queue=work" in page
    said = act(signed_in, "release", layout="askr", target="celery@dead-host", queue="work")
    assert "released 2 job(s) held by 'celery@dead-host'" in said
    store = JobStore(db_url)
    try:
        assert len(store.claim("work", 3, 60).jobs) == 3
    finally:
        store.close()


def limits_of(db_url: str, queue: str) -> tuple[int | None, str | None, int | None]:
    """``queue``'s concurrency, rate (as text) and per-key limits, as stats reads them."""
    admin = open_admin(db_url, "askr")
    try:
        (row,) = [r for r in admin.stats() if r.queue == queue]
        rate = None if row.rate is None else str(row.rate)
        return row.concurrency, rate, row.key_concurrency
    finally:
        admin.close()


def test_limits_are_set_and_cleared_and_a_bad_one_changes_nothing(
    db_url: str, signed_in: TestClient
) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("api", b"x"))
    finally:
        store.close()
    said = act(
        signed_in, "limits", layout="askr", target="api", concurrency="2", rate="10/s", per_key="1"
    )
    assert "held at once 2, rate 10/s, per key 1" in said
    assert limits_of(db_url, "api") == (2, "10/s", 1)
    page = signed_in.get("/queue", params={"layout": "askr", "name": "api"}).text
    assert 'name="concurrency" size="6" value="2"' in page  # the form shows what is set

    # A burst is its own field: the form shows the rate as it parses it and keeps the burst.
    said = act(signed_in, "limits", layout="askr", target="api", rate="10/s", burst="5")
    assert "rate 10/s (burst 5)" in said
    assert limits_of(db_url, "api") == (None, "10/s (burst 5)", None)
    page = signed_in.get("/queue", params={"layout": "askr", "name": "api"}).text
    assert 'name="rate" size="8" value="10/s"' in page and 'name="burst" size="4" value="5"' in page
    said = act(
        signed_in, "limits", layout="askr", target="api", concurrency="2", rate="10/s", per_key="1"
    )
    assert limits_of(db_url, "api") == (2, "10/s", 1)

    for bad in (
        {"concurrency": "0"},
        {"concurrency": "two"},
        {"rate": "fast"},
        {"per_key": "0"},
        {"rate": "10/s", "burst": "0"},
        {"rate": "10/s", "burst": "many"},
    ):
        form = {"concurrency": "3", "rate": "", "per_key": "", **bad}
        ask = signed_in.get("/actions/limits", params={"layout": "askr", "target": "api", **form})
        csrf = re.findall(r'name="csrf" value="([0-9a-f]*)"', ask.text)[0]
        done = signed_in.post(
            "/actions/limits", data={"layout": "askr", "target": "api", "csrf": csrf, **form}
        )
        assert done.status_code == 400 and "Not done" in done.text, bad
    assert limits_of(db_url, "api") == (2, "10/s", 1)

    said = act(
        signed_in, "limits", layout="askr", target="api", concurrency="", rate="", per_key=""
    )
    assert "no held at once limit, no rate limit, no per key limit" in said
    assert limits_of(db_url, "api") == (None, None, None)


def test_the_plots_count_jobs_that_came_and_went_between_samples(db_url: str) -> None:
    """Throughput from the ids each table handed out: jobs enqueued and done between two
    samples count though the table is empty at both (MAX(id) would forget them), on both
    layouts; a queue's depth plot is that queue's."""
    app = create_app(db_url)
    with TestClient(app) as client:
        store = JobStore(db_url)
        laravel = LaravelQueue(db_url, "laravel")
        try:
            store.enqueue(NewJob("seen", b"0"))
            laravel.dispatch("App\\Jobs\\A", {}, queue="mail")
            app.state.sampler.sample_now()
            store.enqueue_many([NewJob("q", b"%d" % n) for n in range(6)])
            jobs = store.claim("q", 6, 60).jobs
            for job in jobs[:5]:
                assert store.ack(job.receipt)
            assert store.dead_letter(jobs[5].receipt, "ValueError")
            store.enqueue_many([NewJob("seen", b"1"), NewJob("seen", b"2")])
            laravel.dispatch("App\\Jobs\\A", {}, queue="mail")
            app.state.sampler.sample_now()
        finally:
            store.close()
            laravel.close()
        # The figures as the two samples left them (asking /series starts the sampling
        # thread, whose samples would come after these).
        sampler = app.state.sampler
        whole = sampler.series("askr")
        assert whole["ready"] == [1, 3]
        seconds = whole["t"][-1] - whole["t"][-2]
        enqueued, done, failed = (whole[k][-1] * seconds for k in ("enqueued", "done", "failed"))
        assert (round(enqueued), round(done), round(failed)) == (8, 5, 1)
        mail = sampler.series("laravel")
        assert mail["ready"] == [1, 2] and round(mail["enqueued"][-1] * seconds) == 1
        one = sampler.series("askr", "q")
        assert one["ready"] == [0, 0] and one["enqueued"] == [None, None]
        served = client.get("/series", params={"layout": "askr", "name": "q"}).json()
        assert served["t"][:2] == one["t"] and served["every"] == 5.0
        assert client.get("/series", params={"layout": "nosuch"}).status_code == 404


def test_wrong_tokens_are_throttled_per_client(db_url: str) -> None:
    """Ten wrong tokens a minute from one address; then even the right one waits (429)."""
    from kombu_sqlqueue.dashboard.security import SIGN_IN_FAILURES

    with TestClient(create_app(db_url, token=TOKEN), follow_redirects=False) as client:
        for _ in range(SIGN_IN_FAILURES):
            assert client.post("/login", data={"token": "guess"}).status_code == 403
        refused = client.post("/login", data={"token": TOKEN})
        assert refused.status_code == 429 and "Too many wrong tokens" in refused.text
        assert "ksq_session" not in refused.headers.get("set-cookie", "")


def test_failed_jobs_are_searched_by_name_or_exception(db_url: str, signed_in: TestClient) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue_many([NewJob("s", b"%d" % n) for n in range(PAGE_JOBS + 20)])
        for n, job in enumerate(store.claim("s", PAGE_JOBS + 20, 60).jobs):
            reason = "CardDeclined: no" if n % 2 else "Timeout: slow"
            assert store.dead_letter(
                job.receipt, f"Traceback (most recent call last):\n  x\n{reason}"
            )
    finally:
        store.close()
    first = signed_in.get("/failed/askr", params={"search": "carddeclined"}).text
    assert len(listed(first)) == (PAGE_JOBS + 20) // 2 and 'class="older"' not in first
    assert "Timeout" not in first and "CardDeclined: no" in first
    both = signed_in.get("/failed/askr", params={"search": "ceback"}).text  # the exception's text
    assert len(listed(both)) == PAGE_JOBS and 'class="older"' in both and "search=ceback" in both
    assert listed(signed_in.get("/failed/askr", params={"search": "nothing-like-it"}).text) == []


def queue_pages(client: TestClient, layout: str, queue: str) -> list[list[int]]:
    """Every page of a queue's next jobs, following "more →" links (keyset)."""
    pages, params = [], {"layout": layout, "name": queue}
    while True:
        page = client.get("/queue", params=params)
        assert page.status_code == 200, page.text
        next_part = page.text.split("<h2>Held</h2>")[0]
        pages.append([int(i) for i in re.findall(r'data-job="(\d+)"', next_part)])
        more = re.search(r'class="older" href="([^"]+)"', next_part)
        if more is None:
            return pages
        query = parse_qs(urlsplit(more.group(1).replace("&amp;", "&")).query)
        assert set(query) == {"layout", "name", "after"}
        params = {**params, "after": query["after"][0]}
        assert len(pages) < 10, "paging does not end"


def test_a_queue_s_next_jobs_are_paged_by_keyset_in_claim_order(
    db_url: str, signed_in: TestClient
) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue_many(
            [NewJob("big", b"p%d" % i, priority=i % 3) for i in range(PAGE_JOBS + 20)]
            + [NewJob("big", b"d%d" % i, delay=60 + i % 7) for i in range(PAGE_JOBS + 3)]
        )
        store.claim("big", 5, 60)  # held ones are not "next"
    finally:
        store.close()
    admin = open_admin(db_url, "askr")
    try:
        whole = [job.id for job in admin.peek("big", 1000)]
    finally:
        admin.close()
    pages = queue_pages(signed_in, "askr", "big")
    assert [len(p) for p in pages] == [PAGE_JOBS, PAGE_JOBS, 18]  # 65 ready + 53 delayed
    assert [i for p in pages for i in p] == whole  # claim order, nothing twice or missed

    laravel = LaravelQueue(db_url, "laravel")
    try:
        for n in range(PAGE_JOBS + 4):
            laravel.dispatch("App\\Jobs\\A", {"n": n}, queue="lara", delay=0 if n % 2 else 30 + n)
    finally:
        laravel.close()
    admin = open_admin(db_url, "laravel")
    try:
        whole = [job.id for job in admin.peek("lara", 1000)]
    finally:
        admin.close()
    pages = queue_pages(signed_in, "laravel", "lara")
    assert [len(p) for p in pages] == [PAGE_JOBS, 4]
    assert [i for p in pages for i in p] == whole
    for bad in ("x", "r.1.2", "d.1.2.3", "r.a.b.c", "d.1." + "9" * 30, "r.1.2.3.4"):
        page = signed_in.get("/queue", params={"layout": "askr", "name": "big", "after": bad})
        assert page.status_code == 404, bad
