"""The dashboard's pages (Starlette's TestClient over the real app) on every engine: both
table layouts' queues side by side, a queue's next and held jobs, everything a producer
wrote rendered as text, unknown names a 404 page, a database that is down a banner."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
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
    mail = client.get("/queue", params={"layout": "laravel", "name": "mail"}).text
    assert "App\\Jobs\\SendInvoice" in mail and "invoice" in mail
    assert "These tables record no holder." in mail
    billing = client.get("/queue", params={"layout": "askr", "name": "billing"}).text
    assert "billing.charge" in billing and "42" in billing


def test_held_jobs_show_their_holder(db_url: str, client: TestClient) -> None:
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("work", b"plain bytes"))
        store.holder = "celery@host-1"
        (held,) = store.claim("work", 1, 300).jobs
    finally:
        store.close()
    page = client.get("/queue", params={"layout": "askr", "name": "work"}).text
    assert f'data-job="{held.id}"' in page and "celery@host-1" in page
    overview = client.get("/").text.split('data-queue="work"')[1].split("</tr>")[0]
    assert "celery@host-1: 1" in overview  # the overview's "held by"


def laravel_queue_named(db_url: str, name: str, display: str = "App\\Jobs\\A") -> None:
    """A job (class ``display``) on a Laravel queue whose name is ``name`` (Laravel's column
    takes any text)."""
    table = open_table(db_url, "laravel")
    try:
        table.size("default")
        engine = sa.create_engine(table.store.url)  # type: ignore[attr-defined]
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (queue, payload, attempts, available_at, created_at)"
                    " VALUES (:q, :p, 0, 0, 0)"
                ),
                {"q": name, "p": json.dumps({"displayName": display, "data": {}})},
            )
        engine.dispose()
    finally:
        table.close()


@pytest.mark.parametrize("text", HOSTILE)
def test_what_a_producer_wrote_is_shown_as_text(db_url: str, client: TestClient, text: str) -> None:
    celery_task(db_url, "evil", text)
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("evil", text.encode() + b"\xff\xfe invalid utf-8"))
    finally:
        store.close()
    celery_task(db_url, "evil", "y" * (3 * 1024 * 1024))  # a 3 MB argument: cut
    laravel_queue_named(db_url, text[:200], display=text)
    overview = client.get("/").text
    rendered_text_only(overview)
    assert "&lt;script&gt;" in overview or "&#34;&gt;&lt;img" in overview or "{{ 7*7 }}" in overview
    queue_page = client.get("/queue", params={"layout": "askr", "name": "evil"})
    assert queue_page.status_code == 200
    rendered_text_only(queue_page.text)
    assert "yyy...yyy" in queue_page.text and len(queue_page.text) < 64 * 1024  # abbreviated


@pytest.mark.parametrize(
    "path",
    ["/queue?layout=askr&name=nosuchqueue", "/queue?layout=nosuchlayout&name=default",
     "/queue?layout=askr&name=bad%0Aname", "/queue?layout=askr&name=" + "q" * 300,
     "/queue", "/no/such/page", "/failed/askr/abc", "/failed/askr/99999999999999999999"],
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
        page = read_only.get("/queue", params={"layout": "askr", "name": "reports"}).text
        assert "purge" not in page.split("</h1>")[1]
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
    dashboard = create_app(db_url, token=TOKEN)
    host = Router(routes=[Mount("/ops/queues", app=dashboard)])
    with TestClient(host, follow_redirects=False) as client:
        page = client.get("/ops/queues/").text
        assert "/ops/queues/static/dashboard.css" in page
        assert 'href="http://testserver/ops/queues/queue?layout=laravel&amp;name=mail"' in page
        signed = client.post("/ops/queues/login", data={"token": TOKEN})
        assert "Path=/ops/queues" in signed.headers["set-cookie"]
        assert signed.headers["location"].endswith("/ops/queues/")
    dashboard.state.close()  # a mount's lifespan is the host's: the host closes it


def test_a_wsgi_host_mounts_it_through_a2wsgi(db_url: str) -> None:
    """Flask (or Django's wsgi.py): werkzeug's DispatcherMiddleware and a2wsgi's adapter.
    In a process of its own: a2wsgi runs the app's event loop in a thread, and CPython
    3.11.7's AST constructor keeps one recursion count for every thread (a parse there
    beside pytest's assertion rewriting here fails later with "AST constructor recursion
    depth mismatch")."""
    store = JobStore(db_url)
    try:
        store.enqueue(NewJob("flaskq", b"x"))
    finally:
        store.close()
    script = f"""
from a2wsgi import ASGIMiddleware
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from kombu_sqlqueue.dashboard import create_app

app = Flask("host")
dashboard = ASGIMiddleware(create_app({db_url!r}))
app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {{"/queues": dashboard}})
page = app.test_client().get("/queues/")
print(page.status_code)
print(page.get_data(as_text=True))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status, _, text = done.stdout.partition("\n")
    assert status == "200"
    assert 'data-queue="flaskq"' in text and "/queues/static/dashboard.css" in text


@pytest.mark.parametrize(
    "name", ["a?b", "a#b", "%41", "x/../../../actions/purge?layout=laravel&target=normal", "a b"]
)
def test_a_queue_s_link_leads_to_that_queue_whatever_its_name(
    db_url: str, client: TestClient, name: str
) -> None:
    laravel_queue_named(db_url, name)
    laravel_queue_named(db_url, "normal")
    overview = client.get("/").text
    links = re.findall(r'href="(http://testserver/queue\?[^"]*)"', overview)
    followed = {}
    for link in links:
        page = client.get(link.replace("&amp;", "&"))
        assert page.status_code == 200, link
        followed[link] = re.search(r"<h1>(.*?) <span", page.text).group(1)  # type: ignore[union-attr]
    import html

    assert sorted(html.unescape(title) for title in followed.values()) == sorted([name, "normal"])


def test_a_failed_job_s_link_is_its_own_whatever_uuids_producers_wrote(
    db_url: str, client: TestClient
) -> None:
    store = JobStore(db_url)
    try:
        ids = []
        for uuid in ("uuid-a", None):
            store.enqueue(NewJob("q", b"x", uuid=uuid))
            (held,) = store.claim("q", 1, 60).jobs
            store.dead_letter(held.receipt, "boom")
        dead = sorted(store.dead_letters(), key=lambda d: d.id)
        ids = [d.id for d in dead]
        # A producer's uuid that is another row's id.
        store.enqueue(NewJob("q", b"y", uuid=str(ids[1])))
        (held,) = store.claim("q", 1, 60).jobs
        store.dead_letter(held.receipt, "impostor")
    finally:
        store.close()
    page = client.get(f"/failed/askr/{ids[1]}").text
    assert f"Failed job {ids[1]}" in page and "impostor" not in page
    assert "boom" in client.get("/failed/askr/uuid-a").text


def test_a_failed_job_s_page_when_the_database_fails_is_a_banner(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    store = JobStore(url)
    store.ensure_ready()
    store.close()
    with TestClient(create_app(url)) as client:
        assert client.get("/failed/askr").status_code == 200
        (tmp_path / "q.db").unlink()
        for path in ("/failed/askr/1", "/failed/askr/1/raw"):
            response = client.get(path)
            assert response.status_code in (404, 503) and "Traceback" not in response.text


def test_odd_cookies_and_forms_are_refused_not_errors(db_url: str) -> None:
    store = JobStore(db_url)
    store.ensure_ready()
    store.close()
    with TestClient(create_app(db_url, token=TOKEN), follow_redirects=False) as client:
        odd = {"cookie": "ksq_session=a.é.ü".encode()}  # what a sibling site could set
        assert client.get("/", headers=odd).status_code == 200
        refused = client.post(
            "/actions/purge", data={"layout": "askr", "target": "q", "csrf": "é"}, headers=odd
        )
        assert refused.status_code == 403


def test_responses_say_they_are_not_to_be_framed_or_sniffed(client: TestClient) -> None:
    headers = client.get("/").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_a_host_name_it_was_not_given_gets_nothing(db_url: str) -> None:
    app = create_app(db_url, allowed_hosts=["127.0.0.1", "localhost"])
    with TestClient(app, base_url="http://rebind.attacker.example") as client:
        assert client.get("/").status_code == 400
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/").status_code == 200


def test_what_the_page_says_after_an_action_cannot_be_written_by_a_link(
    client: TestClient,
) -> None:
    page = client.get("/", params={"done": "Your session expired: visit evil.example"}).text
    assert "evil.example" not in page


def test_a_session_lasts_twelve_hours_and_sign_out_ends_it() -> None:
    from starlette.requests import Request

    from kombu_sqlqueue.dashboard.security import SESSION_COOKIE, Guard

    guard = Guard("t")

    def request(cookie: str) -> Request:
        header = f"{SESSION_COOKIE}={cookie}".encode()
        return Request({"type": "http", "headers": [(b"cookie", header)]})

    fresh = guard.new_session()
    assert guard.session_of(request(fresh)) == fresh
    old = guard.new_session(now=time.time() - 13 * 3600)
    assert guard.session_of(request(old)) is None
    assert guard.session_of(request(fresh.replace(".", "x", 1))) is None
    assert Guard("t").session_of(request(fresh)) is None  # another start's key
