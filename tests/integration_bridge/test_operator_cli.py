"""``kombu-sqlqueue`` as an operator runs it, on every engine and both table layouts:
stats, peek, failed list/show/retry/forget/flush, purge, the metrics exporter scraped over
HTTP on 127.0.0.1; and bad input as one clear line. Commands run through the console
script's entry point in this process (a subprocess each cost a second); what only a
process shows — the exporter serving, ``--watch``, a missing driver in the environment —
runs as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import free_port
from support import kombu_sqlqueue_cli

from kombu_sqlqueue import __version__
from kombu_sqlqueue.store import Rate
from laravel_bridge import LaravelQueue, Payload
from laravel_bridge.tables import JobTable, PushJob

CLI = [sys.executable, "-m", "kombu_sqlqueue"]


def cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Any:
    if env is None:
        return kombu_sqlqueue_cli(*args, stdin=stdin)
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, input=stdin, env=env, check=False
    )


def target(db_url: str, layout: str) -> list[str]:
    """The URL as a user gives it (a broker URL for contract v1's tables) and the layout."""
    if layout == "askr":
        return [f"sqlqueue+{db_url}", "--layout", "askr"]
    return [db_url, "--layout", "laravel"]


def stop(process: subprocess.Popen[str]) -> None:
    """End a CLI process this test started, its pipes closed."""
    process.terminate()
    process.wait(timeout=10)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def fail_next(table: JobTable, reason: str) -> str:
    job = table.pop("default", 90)
    assert job is not None
    uuid = str(Payload.parse(job.payload).uuid)
    assert table.fail(job, "database", uuid, reason)
    return uuid


def test_an_operator_sees_and_steers_a_queue(
    db_url: str, layout: str, table: JobTable, queue: LaravelQueue
) -> None:
    url, *lay = target(db_url, layout)
    for n in range(4):
        queue.dispatch("App\\Jobs\\ResizeImage", {"path": f"/img/{n}.png", "width": 640})
    queue.dispatch("App\\Jobs\\ResizeImage", {"path": "/img/later.png"}, delay=300)
    failed_uuid = fail_next(table, "RuntimeException: disk full\n#0 trace")

    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    assert row == {
        "queue": "default", "total": 4, "ready": 3, "reserved": 0, "delayed": 1,
        "oldest_seconds": row["oldest_seconds"], "dead_letters": 1, "attempts": {"0": 4},
        "holders": {}, "paused": False, "resume_at": None, "concurrency": None, "rate": None,
        "key_concurrency": None, "keys_at_limit": 0,
        "waiting_on_limit": 0,
    }  # fmt: skip
    text = ok(cli("stats", url, *lay))
    assert text.splitlines()[0].split()[:4] == ["queue", "total", "ready", "reserved"]

    peeked = json.loads(ok(cli("peek", url, "default", "-n", "2", *lay, "--json")))
    assert [p["state"] for p in peeked] == ["ready", "ready"]
    assert {p["kind"] for p in peeked} == {"laravel"}
    assert peeked[0]["name"] == "App\\Jobs\\ResizeImage" and "/img/1.png" in peeked[0]["detail"]
    assert "App\\Jobs\\ResizeImage" in ok(cli("peek", url, "default", *lay))

    (listed,) = json.loads(ok(cli("failed", "list", url, *lay, "--json")))
    assert listed["uuid"] == failed_uuid and listed["exception"] == "RuntimeException: disk full"
    assert failed_uuid in ok(cli("failed", "list", url, *lay))
    shown = ok(cli("failed", "show", url, failed_uuid, *lay))
    assert "#0 trace" in shown and "/img/0.png" in shown and "payload:" in shown

    assert "pushed back onto queue 'default'" in ok(cli("failed", "retry", url, failed_uuid, *lay))
    assert ok(cli("failed", "list", url, *lay)).strip() == "no failed jobs"
    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    assert (row["total"], row["dead_letters"]) == (5, 0)

    fail_next(table, "again")
    fail_next(table, "and again")
    assert ok(cli("failed", "flush", url, "--older-than", "7d", *lay)).strip() == (
        "deleted 0 failed job(s)"
    )
    assert ok(cli("failed", "retry", url, "--all", "--queue", "default", *lay)).strip() == (
        "retried 2 failed job(s) of queue 'default'"
    )
    fail_next(table, "once more")
    (listed,) = json.loads(ok(cli("failed", "list", url, *lay, "--json")))
    assert ok(cli("failed", "forget", url, str(listed["id"]), *lay)).strip() == (
        "forgot 1 failed job(s)"
    )

    held = table.pop("default", 90)
    assert held is not None
    refused = cli("purge", url, "default", *lay, stdin="")
    assert refused.returncode == 1
    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    assert (row["total"], row["reserved"]) == (4, 1)
    assert ok(cli("purge", url, "default", "--force", *lay)).strip() == (
        "purged 3 job(s) from queue 'default'"
    )
    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    assert (row["total"], row["reserved"]) == (1, 1)  # the held job stays its holder's


def test_peek_names_celery_tasks_and_their_arguments(broker_url: str) -> None:
    from celery import Celery

    app = Celery("ops", broker=broker_url, set_as_current=False)
    app.send_task("billing.charge", args=(42,), kwargs={"currency": "EUR"}, queue="celery")
    app.send_task("billing.later", queue="celery", countdown=600)
    app.close()
    peeked = json.loads(ok(cli("peek", broker_url, "celery", "--json")))
    assert [(p["kind"], p["name"], p["state"]) for p in peeked] == [
        ("celery", "billing.charge", "ready"),
        ("celery", "billing.later", "delayed"),
    ]
    assert peeked[0]["detail"] == "args=[42] kwargs={'currency': 'EUR'}"


@pytest.fixture
def exporter(db_url: str, layout: str, table: JobTable) -> Iterator[str]:
    """``kombu-sqlqueue metrics`` on a free port of 127.0.0.1; its /metrics URL."""
    table.size("default")  # the tables exist (the exporter creates nothing)
    port = free_port()
    url, *lay = target(db_url, layout)
    process = subprocess.Popen(
        [*CLI, "metrics", url, *lay, "--port", str(port), "--addr", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    address = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                urllib.request.urlopen(address, timeout=5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the exporter did not start: {process.stderr.read()}")  # type: ignore[union-attr]
                time.sleep(0.1)
        yield address
    finally:
        stop(process)


def scrape(address: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(address, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, sample.labels.get("queue", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("askr_")
    }


def test_the_exporter_serves_the_queues_figures(
    exporter: str, table: JobTable, queue: LaravelQueue
) -> None:
    assert scrape(exporter)[("askr_up", "")] == 1.0
    for n in range(3):
        queue.dispatch("App\\Jobs\\A", {"n": n})
    queue.dispatch("App\\Jobs\\A", {}, queue="mail", delay=600)
    fail_next(table, "boom")
    assert table.pop("default", 90) is not None
    found = scrape(exporter)
    assert found[("askr_up", "")] == 1.0
    expected = {
        ("askr_queue_total", "default"): 2,
        ("askr_queue_ready", "default"): 1,
        ("askr_queue_reserved", "default"): 1,
        ("askr_queue_delayed", "default"): 0,
        ("askr_queue_dead_letters", "default"): 1,
        ("askr_queue_total", "mail"): 1,
        ("askr_queue_delayed", "mail"): 1,
        ("askr_queue_ready", "mail"): 0,
        ("askr_queue_oldest_seconds", "mail"): 0,
    }
    assert {key: found[key] for key in expected} == expected
    assert ("askr_scrape_duration_seconds", "") in found
    assert found[("askr_queue_paused", "default")] == 0
    # The tables' ids issued, as counters: one more job, one more enqueued.
    assert found[("askr_jobs_failed_total", "")] == 1
    enqueued = found[("askr_jobs_enqueued_total", "")]
    assert enqueued >= 4
    queue.dispatch("App\\Jobs\\A", {}, queue="mail")
    assert scrape(exporter)[("askr_jobs_enqueued_total", "")] == enqueued + 1
    if table.layout == "askr":  # flow control is contract v1's (Laravel's: test_laravel_pause)
        store = table.store  # type: ignore[attr-defined]
        store.pause("default")
        store.limit("default", 1)
        store.rate_limit("mail", Rate(30, 60.0))
        found = scrape(exporter)
        assert found[("askr_queue_rate_limit_per_second", "mail")] == 0.5
        assert ("askr_queue_rate_limit_per_second", "default") not in found
        assert found[("askr_queue_paused", "default")] == 1
        assert found[("askr_queue_paused", "mail")] == 0
        assert found[("askr_queue_concurrency_limit", "default")] == 1
        assert ("askr_queue_concurrency_limit", "mail") not in found
        # one held, one ready: the limit of 1 holds the ready one back
        assert found[("askr_queue_waiting_on_limit", "default")] == 1


def test_stats_watch_refreshes_until_interrupted(db_url: str, layout: str, table: JobTable) -> None:
    table.size("default")
    url, *lay = target(db_url, layout)
    process = subprocess.Popen(
        [*CLI, "stats", url, *lay, "--watch", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        headers = 0
        for line in process.stdout:
            headers += "Ctrl-C to stop" in line
            if headers == 3:
                break
        assert headers == 3, process.stderr.read()  # type: ignore[union-attr]
    finally:
        stop(process)


def test_create_tables_says_what_it_made(db_url: str, layout: str) -> None:
    url, *lay = target(db_url, layout)
    said = ok(cli("create-tables", url, *lay)).strip()
    if layout == "askr":
        assert said.endswith("(durable queue contract v1)")
    else:
        assert said == "tables ready: jobs, failed_jobs (Laravel's database queue)"
    assert ok(cli("create-tables", url, *lay)).strip() == said  # idempotent
    assert ok(cli("stats", url, *lay)).startswith("no queues")


# -- engine-independent: no database is reached ---------------------------------------------


@pytest.mark.parametrize(
    ("url", "layout", "expected"),
    [
        ("sqlqueue+postgresql://u@127.0.0.1/app", "askr", ["CREATE TABLE askr_jobs", "BYTEA"]),
        ("mysql://u@127.0.0.1/app", "laravel", ["CREATE TABLE jobs", "TINYINT UNSIGNED"]),
        ("sqlqueue+sqlite:///nowhere/app.db", "askr", ["CREATE INDEX askr_jobs_claim"]),
    ],
)
def test_create_tables_sql_prints_the_ddl_without_connecting(
    url: str, layout: str, expected: list[str]
) -> None:
    printed = ok(cli("create-tables", url, "--layout", layout, "--sql"))
    assert all(part in printed for part in expected), printed
    assert not Path("nowhere").exists()


def test_version() -> None:
    assert ok(cli("--version")).strip() == (
        f"kombu-sqlqueue {__version__} (durable queue contract v1)"
    )


@pytest.fixture
def sqlite_queue(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    ok(cli("create-tables", url))
    return url


def no_driver_env(tmp_path: Path) -> dict[str, str]:
    """An environment where ``import psycopg`` fails, as without the [postgresql] extra."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psycopg.py").write_text("raise ImportError('No module named psycopg')\n")
    return {**os.environ, "PYTHONPATH": str(shadow)}


#: Runs the CLI in this process and prints its peak memory (KiB) on stderr's last line:
#: Linux's VmHWM, this program's own (getrusage's ru_maxrss would count the forked test
#: process's pages from before the exec).
PEAK_MEMORY = """
import re, sys
from pathlib import Path
from kombu_sqlqueue.ops.cli import run
sys.argv = ["kombu-sqlqueue", *sys.argv[1:]]
try:
    run()
except SystemExit as exc:
    code = exc.code
print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1], file=sys.stderr)
sys.exit(code)
"""


def test_retry_all_reads_ids_then_batches_never_every_payload_at_once(tmp_path: Path) -> None:
    """``failed retry --all`` over dead letters whose payloads add up to 192 MiB peaks far
    below that (it used to read every row, payloads included, into memory first)."""
    from kombu_sqlqueue.store import JobStore, NewJob

    url = f"sqlite:///{tmp_path / 'q.db'}"
    store = JobStore(url)
    big = 4 << 20
    count = 48
    for n in range(count):
        store.enqueue(NewJob("bulk", bytes([n]) * big, max_attempts=3))
    for job in store.claim("bulk", count, 60).jobs:
        assert store.dead_letter(job.receipt, "boom")
    store.close()

    done = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY, "failed", "retry", f"sqlqueue+{url}", "--all"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"retried {count} failed job(s)\n"
    peak = int(done.stderr.strip().splitlines()[-1]) * 1024
    assert peak < count * big, f"peak {peak >> 20} MiB for {count * big >> 20} MiB of payloads"
    store = JobStore(url)
    assert store.backlog("bulk").total == count and store.dead_letters("bulk") == []
    store.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stats", "sqlqueue+sqlite:///{tmp}/missing.db"), "does not exist (nothing was created)"),
        (("stats", "sqlqueue://"), "names no database"),
        (("stats", "sqlqueue+oracle://x/y"), "not supported"),
        (("failed", "list", "not a url"), "cannot parse database URL"),
        # Almost a URL: the one meant, spelled out.
        (
            ("stats", "{tmp}/q.db"),
            "error: cannot parse database URL '{tmp}/q.db': Could not parse SQLAlchemy URL from "
            "given URL string; did you mean sqlqueue+sqlite:///{tmp}/q.db?",
        ),
        (("stats", "q.db"), "; did you mean sqlqueue+sqlite:///q.db?"),
        (
            ("stats", "sqlqueue:///q.db"),
            "error: 'sqlqueue:///q.db' names no database: write sqlqueue+<database-url>, e.g. "
            "sqlqueue+sqlite:///queue.db, sqlqueue+postgresql://user@host/db or "
            "sqlqueue+mysql://user@host/db; did you mean sqlqueue+sqlite:///q.db?",
        ),
        (
            ("stats", "sqlqueue+sqlite://tmp/q.db"),
            "error: an SQLite URL names no host: 'sqlite://tmp/q.db' has 'tmp' where a third "
            "slash belongs; did you mean sqlqueue+sqlite:////tmp/q.db (absolute) or "
            "sqlqueue+sqlite:///tmp/q.db (relative to the working directory)?",
        ),
        (("stats", "sqlqueue+postgresql://u@127.0.0.1:1/db"), "kombu-sqlqueue[postgresql]"),
        (("peek", "{queue}", "nowhere"), "queue 'nowhere' holds no job"),
        (("purge", "{queue}", "nowhere", "--force"), "queue 'nowhere' holds no job"),
        (("stats", "{queue}", "bad\tname"), "non-printable"),
        (("failed", "show", "{queue}", "12345"), "no failed job in askr_failed_jobs"),
        (("failed", "retry", "{queue}", "abc"), "no failed job in askr_failed_jobs"),
        (("stats", "{queue}", "--layout", "laravel"), "table jobs does not exist"),
    ],
)
def test_bad_input_is_one_clear_line(
    args: tuple[str, ...], message: str, tmp_path: Path, sqlite_queue: str
) -> None:
    args = tuple(a.format(tmp=tmp_path, queue=sqlite_queue) for a in args)
    message = message.format(tmp=tmp_path)
    done = cli(*args, env=no_driver_env(tmp_path))
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("failed", "retry", "{queue}"), "give failed job IDs, or --all"),
        (("failed", "retry", "{queue}", "1", "--all"), "give failed job IDs, or --all"),
        (("failed", "flush", "{queue}", "--older-than", "7x"), "is not a duration"),
        (
            ("stats", "{queue}", "--layout", "redis"),
            "no installed package provides the table layout 'redis': installed layouts are "
            "askr, laravel",
        ),
    ],
)
def test_usage_errors_name_the_option(
    args: tuple[str, ...], message: str, sqlite_queue: str
) -> None:
    done = cli(*(a.format(queue=sqlite_queue) for a in args))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_rows_nobody_can_read_are_shown_as_such(db_url: str, layout: str, table: JobTable) -> None:
    """peek and failed list/show print what they cannot read, with the reason; never raise."""
    url, *lay = target(db_url, layout)
    for junk in ("not json at all", '{"job": 1, "displayName": "\\ud800"}', "[1, 2]"):
        table.push(PushJob("default", junk))
    peeked = json.loads(ok(cli("peek", url, "default", *lay, "--json")))
    assert [p["kind"] for p in peeked] == ["unreadable"] * 3
    assert "not JSON" in peeked[0]["detail"]
    assert "unreadable" in ok(cli("peek", url, "default", *lay))
    job = table.pop("default", 90)
    assert job is not None
    assert table.fail(job, "database", "junk-1", "MalformedJob: payload is not JSON")
    (listed,) = json.loads(ok(cli("failed", "list", url, *lay, "--json")))
    assert listed["kind"] == "unreadable" and "MalformedJob" in ok(cli("failed", "list", url, *lay))
    shown = ok(cli("failed", "show", url, str(listed["id"]), *lay))
    assert "not json at all" in shown and "unreadable" in shown


def test_holds_are_shown_by_holder_and_released_by_name(
    db_url: str, layout: str, table: JobTable, queue: LaravelQueue
) -> None:
    url, *lay = target(db_url, layout)
    for n in range(3):
        queue.dispatch("App\\Jobs\\A", {"n": n})
    table.sign("billing@host-1", recover=False)
    held = table.pop("default", 300)
    assert held is not None
    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    if layout == "laravel":  # Laravel's jobs table has no column for a holder
        assert (row["reserved"], row["holders"]) == (1, {})
        refused = cli("peek", url, "default", "--held", *lay)
        assert refused.returncode == 2 and "records no holder" in refused.stderr
        return
    assert (row["reserved"], row["holders"]) == (1, {"billing@host-1": 1})
    assert "billing@host-1:1" in ok(cli("stats", url, *lay))
    (shown,) = json.loads(ok(cli("peek", url, "default", "--held", "--json")))
    assert (shown["id"], shown["holder"], shown["name"]) == (
        held.id,
        "billing@host-1",
        "App\\Jobs\\A",
    )
    # reserved_until is a whole second rounded up (contract v1), now one rounded down
    assert 0 < shown["lapses_in"] <= 301 and shown["instance"].endswith(f":{os.getpid()}")

    unforced = cli("release", url, "--holder", "billing@host-1", "--queue", "default")
    assert unforced.returncode == 2 and "--force" in unforced.stderr
    released = ok(
        cli("release", url, "--holder", "billing@host-1", "--queue", "default", "--force")
    )
    assert released.strip() == "released 1 job(s) of queue 'default' held by billing@host-1"
    (row,) = json.loads(ok(cli("stats", url, *lay, "--json")))
    assert (row["ready"], row["reserved"], row["holders"]) == (3, 0, {})
    table.sign("billing@host-2", recover=False)
    again = table.pop("default", 300)
    assert again is not None and again.id == held.id and again.attempts == 2
    assert not table.delete(held)  # the released holder's late ack changes nothing
    assert table.delete(again)


def test_an_operator_pauses_and_resumes_a_queue(db_url: str) -> None:
    """``pause`` / ``resume`` on contract v1's tables: shown in ``stats``; a worker's
    claim gets nothing while paused and everything after; bad input is exit 2 and changes
    nothing."""
    from kombu_sqlqueue.store import JobStore, NewJob

    url = f"sqlqueue+{db_url}"
    store = JobStore(db_url)
    try:
        store.ensure_ready()
        store.enqueue_many([NewJob("emails", b"%d" % n) for n in range(3)])
        said = ok(cli("pause", url, "emails"))
        assert said.strip() == "paused queue 'emails' until resumed"
        (row,) = json.loads(ok(cli("stats", url, "--json")))
        assert (row["queue"], row["ready"], row["paused"], row["resume_at"]) == (
            "emails", 3, True, None
        )  # fmt: skip
        assert ok(cli("stats", url)).splitlines()[0].split()[-1] == "controls"
        assert store.claim("emails", 3, 60).jobs == []

        timed = ok(cli("pause", url, "later", "--for", "10m"))
        assert timed.startswith("paused queue 'later' until 20") and timed.strip().endswith("UTC")
        rows = {r["queue"]: r for r in json.loads(ok(cli("stats", url, "--json")))}
        assert rows["later"]["total"] == 0 and rows["later"]["resume_at"] - time.time() >= 590

        for bad in (["--for", "0"], ["--for", "soon"], ["--for", "-5m"]):
            refused = cli("pause", url, "other", *bad)
            assert refused.returncode == 2, refused.stderr
            assert "error" in refused.stderr.lower() and "Traceback" not in refused.stderr
        for stray in (["--cache-prefix", "laravel_cache"], ["--jobs-table", "jobs"]):
            refused = cli("pause", url, "other", *stray)  # a forgotten --layout laravel
            assert refused.returncode == 2 and "did you mean --layout laravel" in refused.stderr
        refused = cli("pause", url, "bad\nname")
        assert refused.returncode == 2 and "error: " in refused.stderr
        assert {c.queue for c in store.controls()} == {"emails", "later"}

        said = ok(cli("limit", url, "emails", "--concurrency", "2"))
        assert said.strip() == "queue 'emails': at most 2 job(s) held at once"
        for bad in (
            ["--concurrency", "0"], ["--concurrency", "-1"], ["--concurrency", "x"], [],
            ["--rate", "0/s"], ["--rate", "10/fortnight"], ["--rate", "10/s", "--burst", "0"],
            ["--burst", "3"], ["--clear", "--rate", "1/s"],
        ):  # fmt: skip
            refused = cli("limit", url, "emails", *bad)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert ok(cli("resume", url, "emails")).strip() == "resumed queue 'emails'"
        assert ok(cli("resume", url, "emails")).strip() == "queue 'emails' was not paused"
        rows = {r["queue"]: r for r in json.loads(ok(cli("stats", url, "--json")))}
        assert rows["emails"]["concurrency"] == 2 and rows["emails"]["waiting_on_limit"] == 1
        assert "concurrency 2, 1 waiting on a limit" in ok(cli("stats", url))
        assert len(store.claim("emails", 3, 60).jobs) == 2

        said = ok(cli("limit", url, "emails", "--rate", "1/h", "--concurrency", "off"))
        assert said.strip() == "queue 'emails': at most 1/h handed out, no concurrency limit"
        rows = {r["queue"]: r for r in json.loads(ok(cli("stats", url, "--json")))}
        assert (rows["emails"]["concurrency"], rows["emails"]["rate"]) == (None, "1/h")
        assert len(store.claim("emails", 3, 60).jobs) == 1  # one an hour
        store.enqueue(NewJob("emails", b"more"))
        assert store.claim("emails", 3, 60).jobs == []
        assert "rate 1/h, 1 waiting on a limit" in ok(cli("stats", url))
        said = ok(cli("limit", url, "emails", "--rate", "120/m", "--burst", "5"))
        assert said.strip() == "queue 'emails': at most 120/m (burst 5) handed out"
        said = ok(cli("limit", url, "emails", "--per-key", "1", "--rate", "off"))
        assert said.strip() == (
            "queue 'emails': at most 1 job(s) of one concurrency key held at once, no rate limit"
        )
        rows = {r["queue"]: r for r in json.loads(ok(cli("stats", url, "--json")))}
        assert (rows["emails"]["key_concurrency"], rows["emails"]["rate"]) == (1, None)
        assert "1 per key" in ok(cli("stats", url))
        store.enqueue_many([NewJob("sync", b"a", concurrency_key="acct-1") for _ in range(3)])
        store.enqueue(NewJob("sync", b"b", concurrency_key="acct-2"))
        ok(cli("limit", url, "sync", "--per-key", "1"))
        # (a store learns of a control it did not set within a second: CONTROLS_RECHECK)
        deadline = time.monotonic() + 5
        while not (taken := store.claim("sync", 1, 60).jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(taken) == 1  # acct-1's first
        rows = {r["queue"]: r for r in json.loads(ok(cli("stats", url, "--json")))}
        assert (rows["sync"]["waiting_on_limit"], rows["sync"]["keys_at_limit"]) == (2, 1)
        assert "1 per key, 2 waiting on a limit, 1 key(s) at theirs" in ok(cli("stats", url))
        unknown = cli("limit", url, "sycn", "--per-key", "1")  # a typo: nothing has used it
        assert unknown.returncode == 2 and "queues there: " in unknown.stderr, unknown.stderr
        assert "sync" in unknown.stderr
        for bad in (["--per-key", "0"], ["--per-key", "many"]):
            refused = cli("limit", url, "emails", *bad)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        said = ok(cli("limit", url, "emails", "--clear"))
        assert said.strip() == (
            "queue 'emails': no concurrency limit, no rate limit, no per-key limit"
        )
        assert len(store.claim("emails", 3, 60).jobs) == 1
        assert {c.queue for c in store.controls()} == {"later", "sync"}
    finally:
        store.close()


def test_the_dashboard_command_serves_the_pages(db_url: str, queue: LaravelQueue) -> None:
    """``kombu-sqlqueue dashboard`` as an operator runs it: a server on 127.0.0.1 whose
    page lists the queues, read-only without a token."""
    queue.dispatch("App\\Jobs\\A", {"n": 1}, queue="reports")
    port = free_port()
    process = subprocess.Popen(
        [*CLI, "dashboard", db_url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "KOMBU_SQLQUEUE_DASHBOARD_TOKEN"},
    )
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    text = page.read().decode()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the dashboard did not start: {process.stderr.read()}")  # type: ignore[union-attr]
                time.sleep(0.1)
        assert 'data-queue="reports"' in text and "read-only" in text
    finally:
        stop(process)
