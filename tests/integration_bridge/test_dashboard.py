"""The dashboard's pages (Starlette's TestClient over the real app) on every engine: both
table layouts' queues side by side, a queue's next and held jobs, everything a producer
wrote rendered as text, unknown names a 404 page, a database that is down a banner."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from kombu import Connection
from starlette.testclient import TestClient

from kombu_sqlqueue.dashboard import create_app
from kombu_sqlqueue.store import JobStore, NewJob
from laravel_bridge import LaravelQueue
from laravel_bridge.tables import open_table

HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '"><img src=x onerror="window.__pwned=1">',
    "{{ 7*7 }}",
]


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(db_url)) as c:
        yield c


def celery_task(db_url: str, queue: str, *args: object) -> None:
    """A Celery task message as Celery's producer stores it (through Kombu)."""
    with Connection(f"sqlqueue+{db_url}") as conn:
        conn.default_channel.basic_publish(
            conn.default_channel.prepare_message(
                json.dumps([list(args), {}, {}]),
                headers={"task": "billing.charge", "id": f"id-{queue}-{len(args)}"},
                content_type="application/json",
            ),
            exchange="",
            routing_key=queue,
        )


def rendered_text_only(page: str) -> None:
    """Nothing a producer wrote became markup: no script or img element, no handler."""
    assert "<script>window" not in page and "<img" not in page
    assert "onerror=" not in page.replace("onerror=&#34;", "").replace("onerror=&quot;", "")
    assert "49" not in re.findall(r"<code>([^<]*)</code>", page)  # no template ran


def test_both_layouts_queues_side_by_side(db_url: str, client: TestClient) -> None:
    celery_task(db_url, "billing", 42, "EUR")
    laravel = LaravelQueue(db_url, "laravel")
    try:
        laravel.dispatch("App\\Jobs\\SendInvoice", {"invoice": 7}, queue="mail")
        laravel.dispatch("App\\Jobs\\SendInvoice", {"invoice": 8}, queue="mail", delay=600)
    finally:
        laravel.close()
    page = client.get("/").text
    assert 'data-layout="askr"' in page and 'data-layout="laravel"' in page
    assert 'data-queue="billing"' in page and 'data-queue="mail"' in page
    assert "read-only" in page  # no token
    fragment = client.get("/fragments/overview")
    assert fragment.status_code == 200 and 'id="overview"' in fragment.text
    mail = client.get("/queues/laravel/mail").text
    assert "App\\Jobs\\SendInvoice" in mail and "invoice" in mail
    assert "These tables record no holder." in mail
    billing = client.get("/queues/askr/billing").text
    assert "billing.charge" in billing and "42" in billing


def test_held_jobs_show_their_holder(db_url: str, client: TestClient) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("work", b"plain bytes"))
        store.holder = "celery@host-1"
        (held,) = store.claim("work", 1, 300).jobs
    finally:
        store.close()
    page = client.get("/queues/askr/work").text
    assert f'data-job="{held.id}"' in page and "celery@host-1" in page


@pytest.mark.parametrize("text", HOSTILE)
def test_what_a_producer_wrote_is_shown_as_text(db_url: str, client: TestClient, text: str) -> None:
    celery_task(db_url, "evil", text)
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("evil", text.encode() + b"\xff\xfe invalid utf-8"))
    finally:
        store.close()
    celery_task(db_url, "evil", "y" * (3 * 1024 * 1024))  # a 3 MB argument: cut
    table = open_table(db_url, "laravel")  # Laravel's queue column takes any text
    try:
        table.size("default")  # its tables exist from first use on
        engine = sa.create_engine(table.store.url)  # type: ignore[attr-defined]
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (queue, payload, attempts, available_at, created_at)"
                    " VALUES (:q, :p, 0, 0, 0)"
                ),
                {"q": text[:200], "p": json.dumps({"displayName": text, "data": {}})},
            )
        engine.dispose()
    finally:
        table.close()
    overview = client.get("/").text
    rendered_text_only(overview)
    assert "&lt;script&gt;" in overview or "&#34;&gt;&lt;img" in overview or "{{ 7*7 }}" in overview
    queue_page = client.get("/queues/askr/evil")
    assert queue_page.status_code == 200
    rendered_text_only(queue_page.text)
    assert "yyy...yyy" in queue_page.text and len(queue_page.text) < 64 * 1024  # abbreviated


@pytest.mark.parametrize(
    "path",
    ["/queues/askr/nosuchqueue", "/queues/nosuchlayout/default", "/queues/askr/bad%0Aname",
     "/queues/askr/" + "q" * 300, "/no/such/page"],
)  # fmt: skip
def test_unknown_names_are_a_not_found_page(db_url: str, client: TestClient, path: str) -> None:
    store = JobStore(db_url)
    store.ensure_ready()  # the tables exist
    store.close()
    response = client.get(path)
    assert response.status_code == 404
    assert "Not found" in response.text and "Traceback" not in response.text


def test_a_database_that_cannot_be_read_is_a_banner(tmp_path: Path) -> None:
    with TestClient(create_app(f"sqlite:///{tmp_path / 'gone.db'}")) as client:
        response = client.get("/")
    assert response.status_code == 200
    assert 'role="alert"' in response.text and "does not exist" in response.text


def test_failed_jobs_are_listed_and_shown_whole(db_url: str, client: TestClient) -> None:
    """A dead letter of each layout: listed (filtered by queue), its page with the whole
    exception and the stored payload as text, the bytes themselves as a download."""
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("billing", b'{"hostile": "<script>window.__pwned=1</script>"}\xff'))
        (held,) = store.claim("billing", 1, 60).jobs
        trace = "RuntimeError: card declined <b>now</b>\n" + "  File x, line 1\n" * 50
        assert store.dead_letter(held.receipt, trace)
        (dead,) = store.dead_letters()
    finally:
        store.close()
    listed = client.get("/failed/askr").text
    assert f'data-failed="{dead.id}"' in listed and "card declined &lt;b&gt;now" in listed
    assert 'data-failed="' not in client.get("/failed/askr?queue=other").text
    page = client.get(f"/failed/askr/{dead.id}")
    assert page.status_code == 200
    rendered_text_only(page.text)
    assert page.text.count("File x, line 1") == 50 and "&lt;script&gt;" in page.text
    raw = client.get(f"/failed/askr/{dead.id}/raw")
    assert raw.headers["content-type"] == "application/octet-stream"
    assert raw.headers["content-disposition"].startswith("attachment")
    assert raw.content.endswith(b"\xff") and b"<script>" in raw.content
    assert client.get("/failed/askr/999999").status_code == 404
    assert client.get("/failed/nosuchlayout").status_code == 404

    table = open_table(db_url, "laravel")
    try:
        laravel = LaravelQueue(db_url, "laravel", table=table)
        laravel.dispatch("App\\Jobs\\SendInvoice", {"invoice": 7}, queue="mail")
        job = table.pop("mail", 90)
        assert job is not None
        assert table.fail(job, "database", "uuid-7", "Exception: SMTP down")
    finally:
        table.close()
    laravel_list = client.get("/failed/laravel").text
    assert "Exception: SMTP down" in laravel_list and "App\\Jobs\\SendInvoice" in laravel_list


TOKEN = "s3cret-token"


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]*)"', page)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


def test_actions_need_the_token_a_session_and_the_page_s_form(db_url: str) -> None:
    """Purge, pause and resume a queue, retry and forget a failed job — each asked first
    (GET), done by a POST that carries the session (signed in with the token) and the
    form's CSRF value, and refused otherwise: read-only without a token, a wrong token,
    no session, no or a foreign CSRF value, another site's request."""
    store = JobStore(db_url)
    try:
        store.enqueue_many([NewJob("reports", b"r%d" % n) for n in range(3)])
        store.enqueue(NewJob("broken", b"b"))
        (held,) = store.claim("broken", 1, 60).jobs
        assert store.dead_letter(held.receipt, "ValueError: nope")
        (dead,) = store.dead_letters()
    finally:
        store.close()

    with TestClient(create_app(db_url)) as read_only:
        assert "purge" not in read_only.get("/queues/askr/reports").text.split("</h1>")[1]
        refused = read_only.post("/actions/purge", data={"layout": "askr", "target": "reports"})
        assert refused.status_code == 403 and "read-only" in refused.text

    with TestClient(create_app(db_url, token=TOKEN), follow_redirects=False) as client:
        ask = client.get("/actions/purge", params={"layout": "askr", "target": "reports"})
        assert ask.status_code == 200 and "Sign in" in ask.text  # not signed in: no form
        unsigned = client.post("/actions/purge", data={"layout": "askr", "target": "reports"})
        assert unsigned.status_code == 403 and "sign in" in unsigned.text
        assert client.post("/login", data={"token": "wrong"}).status_code == 403
        signed = client.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303 and "ksq_session" in signed.headers["set-cookie"]
        assert "HttpOnly" in signed.headers["set-cookie"]
        assert "samesite=strict" in signed.headers["set-cookie"].lower()

        ask = client.get("/actions/purge", params={"layout": "askr", "target": "reports"})
        csrf = csrf_of(ask.text)
        form = {"layout": "askr", "target": "reports"}
        assert client.post("/actions/purge", data=form).status_code == 403  # no CSRF value
        forged = client.post("/actions/purge", data={**form, "csrf": "0" * 64})
        assert forged.status_code == 403 and "CSRF" in forged.text
        cross = client.post(
            "/actions/purge",
            data={**form, "csrf": csrf},
            headers={"origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        done = client.post("/actions/purge", data={**form, "csrf": csrf})
        assert done.status_code == 303 and done.headers["location"].startswith(
            "http://testserver/?"
        )
        assert "purged 3 job(s)" in client.get(done.headers["location"]).text

        for name in ("pause", "resume"):
            ok = client.post("/actions/" + name, data={**form, "target": "broken", "csrf": csrf})
            assert ok.status_code == 303, ok.text
        retried = client.post(
            "/actions/retry", data={"layout": "askr", "target": str(dead.id), "csrf": csrf}
        )
        assert (
            retried.status_code == 303
            and "retried 1" in client.get(retried.headers["location"]).text
        )
        assert (
            client.post(
                "/actions/forget", data={"layout": "askr", "target": str(dead.id), "csrf": csrf}
            ).status_code
            == 404
        )  # retried: no longer a failed job
        assert client.get("/actions/nosuch", params=form).status_code == 404

    check = JobStore(db_url)
    try:
        assert check.size("reports") == 0 and check.size("broken") == 1
        assert check.dead_letters() == [] and check.controls() == []
    finally:
        check.close()


def test_mounted_under_a_prefix_its_links_and_cookie_stay_under_it(db_url: str) -> None:
    """ASGI (a FastAPI or Starlette host's mount): every link and the session cookie's path
    are under the mount's prefix."""
    from starlette.routing import Mount, Router

    laravel = LaravelQueue(db_url, "laravel")
    try:
        laravel.dispatch("App\\Jobs\\A", {}, queue="mail")
    finally:
        laravel.close()
    host = Router(routes=[Mount("/ops/queues", app=create_app(db_url, token=TOKEN))])
    with TestClient(host, follow_redirects=False) as client:
        page = client.get("/ops/queues/").text
        assert "/ops/queues/static/dashboard.css" in page
        assert 'href="http://testserver/ops/queues/queues/laravel/mail"' in page
        signed = client.post("/ops/queues/login", data={"token": TOKEN})
        assert "Path=/ops/queues" in signed.headers["set-cookie"]
        assert signed.headers["location"].endswith("/ops/queues/")


def test_a_wsgi_host_mounts_it_through_a2wsgi(db_url: str) -> None:
    """Flask (or Django's wsgi.py): werkzeug's DispatcherMiddleware and a2wsgi's adapter."""
    from a2wsgi import ASGIMiddleware
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("flaskq", b"x"))
    finally:
        store.close()
    flask_app = Flask("host")
    flask_app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
        flask_app.wsgi_app, {"/queues": ASGIMiddleware(create_app(db_url))}
    )
    page = flask_app.test_client().get("/queues/")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert 'data-queue="flaskq"' in text and "/queues/static/dashboard.css" in text
