"""Issue 11, the Laravel half: no stored row can stop ``laravel-bridge work``.

Every row the worker cannot turn into a job is settled once into the failed table, with
its reason and its payload exactly as stored, and the good job behind it runs — on every
engine, on both layouts, in process and through the real CLI. Rows go in by raw SQL
(Laravel's ``jobs``) or the store's ``enqueue`` (contract v1's BLOB column), as any
other writer could leave them.
"""

from __future__ import annotations

import json
import logging
import subprocess
import textwrap
import time
import uuid as uuid_module
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from bridge_support import bridge_cli, failed_rows, handlers_module_env, insert_raw, raw_engine
from laravel_support import APP_KEY

from laravel_bridge import (
    Encrypter,
    HandlerRegistry,
    Job,
    JobCommand,
    LaravelQueue,
    Worker,
    WorkerOptions,
)
from laravel_bridge.payload import CALL_QUEUED_HANDLER, MAX_COMMAND_DEPTH, MAX_DELAY_SECONDS
from laravel_bridge.tables import JobTable, ReservedJob, open_table

# The worker installs its own SIGALRM handler (job timeouts), which silences pytest-timeout's
# signal method: these tests are timed from a thread.
pytestmark = pytest.mark.timeout(120, method="thread")

GOOD = "App\\Jobs\\Good"
BAD = "App\\Jobs\\Bad"


def command_payload(command: str, uuid: str, **keys: Any) -> str:
    """A CallQueuedHandler payload with ``command`` as data.command."""
    data = {
        "uuid": uuid,
        "displayName": BAD,
        "job": CALL_QUEUED_HANDLER,
        "maxTries": None,
        "data": {"commandName": BAD, "command": command},
    }
    data.update(keys)
    return json.dumps(data)


def good_command() -> str:
    return JobCommand.build(BAD, {"n": 1}).dumps().decode()


def deep_command(depth: int) -> str:
    inner = "a:1:{i:0;" * depth + "N;" + "}" * depth
    return f'O:{len(BAD)}:"{BAD}":1:{{s:1:"a";{inner}}}'


def wrong(uuid: str, **keys: Any) -> str:
    return command_payload(good_command(), uuid, **keys)


@dataclass(frozen=True)
class BadRow:
    label: str
    raw: bytes
    reason: str
    #: The uuid failed_jobs must keep (None: a fresh one is made).
    uuid: str | None = None
    #: Stored as a BLOB (SQLite's TEXT column takes one; askr_jobs.payload is one).
    blob: bool = False

    @property
    def utf8(self) -> bool:
        try:
            self.raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def fits(self, engine: str, layout: str) -> bool:
        """Only SQLite's TEXT column can hold a BLOB or text that is not UTF-8."""
        return layout == "askr" or engine == "sqlite" or (self.utf8 and not self.blob)


def _rows() -> list[BadRow]:
    deep_json = '{"uuid":"deep-json","job":"X@handle","data":' + "[" * 1000 + "]" * 1000 + "}"
    other_key = Encrypter(b"another app key, 32 bytes long!!").encrypt(good_command())
    rows = [
        BadRow(
            "deep PHP nesting",
            command_payload(deep_command(600), "deep-php").encode(),
            f"deeper than {MAX_COMMAND_DEPTH} levels (MAX_COMMAND_DEPTH)",
            "deep-php",
        ),
        BadRow("deep JSON", deep_json.encode(), "payload JSON nests deeper than 200"),
        BadRow(
            "invalid UTF-8",
            b'{"uuid":"bad-utf8","job":"X@handle","data":"\xff\xfe"}',
            "payload is not valid UTF-8",
        ),
        BadRow("BLOB not JSON", b"not JSON at all {", "payload is not JSON", blob=True),
        BadRow(
            "BLOB of a bad job",
            wrong("blob-bad", maxTries="3").encode(),
            "payload maxTries is '3', not an integer",
            "blob-bad",
            blob=True,
        ),
        BadRow(
            "garbage command",
            command_payload("xyz", "garbage").encode(),
            "data.command is neither PHP serialize() data nor a Laravel-encrypted string",
            "garbage",
        ),
        BadRow(
            "random bytes command",
            command_payload("\x8d\x01\u00e9\ufffd", "random").encode(),
            "neither PHP serialize() data nor a Laravel-encrypted string",
            "random",
        ),
        BadRow(
            "encrypted with another key",
            command_payload(other_key, "enc-other").encode(),
            "the MAC is invalid",
            "enc-other",
        ),
        BadRow("empty", b"", "payload is empty"),
        BadRow("JSON scalar", b"42", "payload is JSON number, not an object"),
        BadRow("JSON string", b'"a job"', "payload is JSON string, not an object"),
        BadRow("no job", b'{"uuid":"no-job","data":{}}', "payload has no 'job'"),
        BadRow("no uuid", b'{"job":"X@handle","data":{}}', "payload has no 'uuid'"),
        BadRow(
            "NUL in uuid",
            b'{"uuid":"a\\u0000b","job":"X@handle","data":{}}',
            "holds characters a uuid column cannot store",
        ),
        BadRow(
            "uuid is a list",
            b'{"uuid":["x"],"job":"X@handle","data":{}}',
            "payload has no 'uuid'",
        ),
        BadRow(
            "command not a string",
            command_payload("", "cmd-int").replace('"command": ""', '"command": 5').encode(),
            "payload has no data.command string",
            "cmd-int",
        ),
        BadRow(
            "command is a PHP list",
            command_payload("a:0:{}", "cmd-list").encode(),
            "the command is a list, not a PHP object",
            "cmd-list",
        ),
        BadRow(
            "truncated command",
            command_payload(good_command()[:-3], "cut").encode(),
            "the command is not PHP-serialized data",
            "cut",
        ),
        BadRow(
            "timeout float", wrong("t-float", timeout=1.5).encode(), "timeout is 1.5", "t-float"
        ),
        BadRow(
            "retryUntil NaN",
            wrong("nan", retryUntil=float("nan")).encode(),
            "retryUntil is nan",
            "nan",
        ),
        BadRow(
            "maxExceptions list",
            wrong("mx-list", maxExceptions=[1]).encode(),
            "maxExceptions is [1]",
            "mx-list",
        ),
        BadRow(
            "maxTries huge float",
            wrong("mt-inf").replace('"maxTries": null', '"maxTries": 1e400').encode(),
            "maxTries is inf",
            "mt-inf",
        ),
        BadRow(
            "backoff infinite",
            wrong("bo-inf", backoff="1,inf").encode(),
            "bad backoff '1,inf'",
            "bo-inf",
        ),
        BadRow(
            "backoff list",
            wrong("bo-list", backoff=[1, 2]).encode(),
            "not a string",
            "bo-list",
        ),
        BadRow(
            "ModelIdentifier relations int",
            wrong(
                "model",
                data={
                    "commandName": BAD,
                    "command": f'O:{len(BAD)}:"{BAD}":1:{{s:1:"m";O:45:"Illuminate\\Contracts'
                    '\\Database\\ModelIdentifier":2:{s:5:"class";s:1:"U";s:9:"relations";i:7;}}',
                },
            ).encode(),
            "relations are a int",
            "model",
        ),
        BadRow(
            "date of the wrong shape",
            wrong(
                "date",
                data={
                    "commandName": BAD,
                    "command": f'O:{len(BAD)}:"{BAD}":1:{{s:1:"d";O:13:"Carbon\\Carbon":3:{{'
                    's:4:"date";a:0:{}s:13:"timezone_type";d:INF;s:8:"timezone";s:3:"UTC";}}',
                },
            ).encode(),
            "bad serialized date",
            "date",
        ),
        BadRow(
            "too large",
            json.dumps({"uuid": "big", "job": "X@handle", "data": "x" * 20_000}).encode(),
            "payload is larger than the 16000 bytes",
        ),
    ]
    return rows


BAD_ROWS = _rows()
MAX_PAYLOAD = 16_000  # small, so "too large" needs no 16 MiB row


def good_registry(ran: list[str]) -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register(GOOD, lambda job: ran.append(job.uuid))
    registry.register(BAD, lambda job: ran.append(f"BAD {job.uuid}"))
    registry.register("X", lambda job: ran.append(f"X {job.uuid}"))
    return registry


def test_every_bad_row_is_failed_once_as_stored_and_the_good_job_runs(
    table: JobTable, engine_name: str, queue: LaravelQueue
) -> None:
    rows = [r for r in BAD_ROWS if r.fits(engine_name, table.layout)]
    for row in rows:
        insert_raw(table, "default", row.raw, blob=row.blob)
    good = queue.dispatch(GOOD, {"n": 1})
    ran: list[str] = []
    options = WorkerOptions(stop_when_empty=True, sleep=0, max_payload=MAX_PAYLOAD)
    Worker(table, options, handlers=good_registry(ran), app_key=APP_KEY).run()  # never raises

    assert ran == [good.uuid]
    assert table.size("default") == 0
    failed = failed_rows(table)
    assert len(failed) == len(rows)
    by_payload = {f["payload"]: f for f in failed}
    problems = []
    for row in rows:
        found = by_payload.get(row.raw)
        if found is None:
            problems.append(f"{row.label}: no failed row holds the stored bytes")
            continue
        if row.reason not in found["exception"] or not found["exception"].startswith(
            "laravel_bridge.worker.MalformedJob: "
        ):
            problems.append(f"{row.label}: reason {found['exception'][:200]!r}")
        if table.layout == "laravel":
            if row.uuid is not None and found["uuid"] != row.uuid:
                problems.append(f"{row.label}: uuid {found['uuid']!r}, not {row.uuid!r}")
            if row.uuid is None:
                uuid_module.UUID(found["uuid"])  # a fresh one
            stored_as = "blob" if row.blob or not row.utf8 else "text"
            if engine_name == "sqlite" and found["kind"] != stored_as:
                problems.append(f"{row.label}: stored as {found['kind']}, not {stored_as}")
    assert not problems, "\n".join(problems)


# Laravel's layout only (askr_jobs.payload is a BLOB: bytes are what it holds), on the servers.
@pytest.mark.parametrize("layout", ["laravel"])
@pytest.mark.parametrize("engine_name", ["postgresql", "mysql"])
def test_postgresql_and_mariadb_refuse_invalid_utf8_in_the_payload_column(
    table: JobTable,
) -> None:
    """Why only SQLite needs the byte read: the servers refuse such text at INSERT."""
    engine = raw_engine(table)
    if engine.dialect.name == "postgresql":
        value = "convert_from(:payload, 'UTF8')"
    else:
        value = "CAST(:payload AS CHAR CHARACTER SET utf8mb4)"
    statement = sa.text(
        "INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, created_at) "
        f"VALUES ('default', {value}, 0, NULL, 0, 0)"
    )
    try:
        with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
            conn.execute(statement, {"payload": b'{"uuid":"x\xff\xfe"}'})
    finally:
        engine.dispose()
    assert table.size("default") == 0


def test_odd_but_valid_numbers_run_and_clamp_instead_of_failing(
    table: JobTable, queue: LaravelQueue
) -> None:
    """A huge timeout or backoff is a job, not a malformed row: the timer and the release
    delay are clamped (a year at most: available_at is a 32-bit column)."""
    calls: list[int] = []

    def flaky(job: Job) -> None:
        calls.append(job.attempts)
        raise RuntimeError("once more")

    registry = HandlerRegistry()
    registry.register(BAD, flaky)
    insert_raw(table, "default", wrong("odd", timeout=10**30, backoff="1e300", maxTries=3).encode())
    Worker(table, WorkerOptions(stop_when_empty=True, sleep=0), handlers=registry).run()
    assert calls == [1]
    store: Any = table.store  # type: ignore[attr-defined]
    assert table.size("default") == 1 and failed_rows(table) == []
    later = store.clock() + MAX_DELAY_SECONDS + 5
    store.clock = lambda: later
    again = table.pop("default", 90)
    assert again is not None and again.attempts == 2


@pytest.mark.timeout(60, method="thread")  # the worker owns SIGALRM
def test_unknown_jobs_with_unknown_delay_0_do_not_loop(
    table: JobTable, queue: LaravelQueue, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    registry = HandlerRegistry()
    registry.register(GOOD, lambda job: ran.append(job.uuid))
    unknown = queue.dispatch("App\\Jobs\\PhpOnly", {})
    good = queue.dispatch(GOOD, {})
    options = WorkerOptions(stop_when_empty=True, sleep=0, unknown_delay=0, claim="all")
    with caplog.at_level(logging.INFO, logger="laravel_bridge.worker"):
        Worker(table, options, handlers=registry).run()
    assert ran == [good.uuid]
    releases = [r for r in caplog.records if "no handler for" in r.getMessage()]
    assert 1 <= len(releases) <= 2
    assert table.size("default") == 1  # the unknown job waits for a worker that knows it
    deadline = time.monotonic() + 5  # the least delay of an unknown release: 1 s, rounded up
    while (left := table.pop("default", 90)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left is not None and left.attempts == 1  # its attempts were refunded
    assert json.loads(left.payload)["uuid"] == unknown.uuid


@pytest.mark.timeout(60, method="thread")  # the worker owns SIGALRM
def test_an_unknown_job_met_again_counts_as_an_empty_sweep(
    table: JobTable, queue: LaravelQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """The good job outlasts the unknown job's delay: the worker meets the unknown job again,
    hands it back, and --stop-when-empty still returns."""
    registry = HandlerRegistry()
    registry.register(GOOD, lambda job: time.sleep(2.1))  # 1 s, rounded up to the second
    queue.dispatch("App\\Jobs\\PhpOnly", {})
    queue.dispatch(GOOD, {})
    options = WorkerOptions(stop_when_empty=True, sleep=0, unknown_delay=0, claim="all")
    with caplog.at_level(logging.INFO, logger="laravel_bridge.worker"):
        Worker(table, options, handlers=registry).run()
    messages = [r.getMessage() for r in caplog.records if "no handler for" in r.getMessage()]
    assert len(messages) == 2 and "met again" in messages[1]
    assert table.size("default") == 1


@pytest.mark.timeout(60, method="thread")  # the worker owns SIGALRM
def test_an_unknown_job_met_again_does_not_hide_the_jobs_behind_it(
    table: JobTable, queue: LaravelQueue
) -> None:
    """--queue high,default: an unknown job in `high`, met again while the first `default`
    job runs, is handed back and the sweep goes on to `default` (it once stopped there)."""
    ran: list[int] = []
    registry = HandlerRegistry()
    registry.register(GOOD, lambda job: (ran.append(job.properties["n"]), time.sleep(1.1)))
    queue.dispatch("App\\Jobs\\PhpOnly", {}, queue="high")
    for n in range(3):
        queue.dispatch(GOOD, {"n": n})
    options = WorkerOptions(queues=("high", "default"), stop_when_empty=True, sleep=0,
                            unknown_delay=0, claim="all")  # fmt: skip
    Worker(table, options, handlers=registry).run()
    assert ran == [0, 1, 2]
    assert table.size("default") == 0 and table.size("high") == 1


@pytest.mark.timeout(60, method="thread")  # the worker owns SIGALRM
def test_a_long_running_worker_releases_an_unknown_job_a_bounded_number_of_times(
    table: JobTable, queue: LaravelQueue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.dispatch("App\\Jobs\\PhpOnly", {})
    options = WorkerOptions(sleep=0.2, unknown_delay=0, max_time=2.5, claim="all")
    with caplog.at_level(logging.INFO, logger="laravel_bridge.worker"):
        Worker(table, options, handlers=HandlerRegistry()).run()
    releases = [r for r in caplog.records if "no handler for" in r.getMessage()]
    assert 1 <= len(releases) <= 6  # about one a second (it was 60,723 in 10 s)


def test_a_class_name_that_is_not_text_is_escaped_in_console_and_failed_rows(
    table: JobTable, queue: LaravelQueue
) -> None:
    lines: list[str] = []
    name = "App\\Jobs\\\udcff\x07Odd"
    payload = json.dumps({"uuid": "odd-name", "job": f"{name}@handle", "data": {}})
    insert_raw(table, "default", payload.encode())
    options = WorkerOptions(stop_when_empty=True, sleep=0, unknown_jobs="fail")
    Worker(table, options, handlers=HandlerRegistry(), output=lines.append).run()
    assert lines and "\\udcff\\x07Odd" in lines[0]
    (row,) = failed_rows(table)
    assert "no handler is registered for App\\Jobs\\\\udcffOdd" in row["exception"].replace(
        "\x07", ""
    )
    assert row["payload"] == payload.encode()


# -- the real CLI ------------------------------------------------------------------------

CLI_HANDLERS = textwrap.dedent(
    """
    import os
    from laravel_bridge import handles

    @handles("App\\\\Jobs\\\\Good")
    def good(job):
        with open(os.environ["BAD_ROWS_LOG"], "a") as f:
            f.write(job.uuid + "\\n")

    # The bad rows name this class: this worker runs it, so reading them is its business
    # (a row naming a class it has no handler for is left, unread, to a worker that has).
    @handles("App\\\\Jobs\\\\Bad")
    def bad(job):
        raise AssertionError("a bad row never reaches its handler")
    """
)


def test_laravel_bridge_work_settles_bad_rows_and_stops_when_empty(
    db_url: str, table: JobTable, engine_name: str, tmp_path: Path
) -> None:
    labels = {"deep PHP nesting", "deep JSON", "invalid UTF-8", "BLOB not JSON", "garbage command"}
    rows = [r for r in BAD_ROWS if r.label in labels and r.fits(engine_name, table.layout)]
    for row in rows:
        insert_raw(table, "default", row.raw, blob=row.blob)
    queue = LaravelQueue(db_url, table.layout, table=table)
    queue.dispatch("App\\Jobs\\PhpOnly", {})
    good = queue.dispatch(GOOD, {})
    env = handlers_module_env(
        tmp_path, "bad_rows_handlers", CLI_HANDLERS, BAD_ROWS_LOG=str(tmp_path / "ran.txt")
    )
    done = subprocess.run(
        bridge_cli(
            *("work", "--url", db_url),
            *("--layout", table.layout, "--handlers", "bad_rows_handlers"),
            *("--stop-when-empty", "--sleep", "0", "--unknown-delay", "0"),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran.txt").read_text().split() == [good.uuid]
    assert done.stdout.count("Failed:     (malformed job)") == len(rows)
    failed = failed_rows(table)
    assert sorted(f["payload"] for f in failed) == sorted(r.raw for r in rows)
    assert table.size("default") == 1  # the unknown job, handed back for a PHP worker


def test_a_second_worker_after_a_crash_free_run_finds_nothing_left(
    db_url: str, layout: str, engine_name: str
) -> None:
    """Restarting finds nothing to repeat: every bad row was settled the first time."""
    table = open_table(db_url, layout)
    try:
        rows = [r for r in BAD_ROWS[:4] if r.fits(engine_name, layout)]
        for row in rows:
            insert_raw(table, "default", row.raw, blob=row.blob)
        registry = HandlerRegistry()  # the rows name App\Jobs\Bad: this worker runs it
        registry.register(BAD, lambda job: None)
        for _ in range(2):
            Worker(table, WorkerOptions(stop_when_empty=True, sleep=0), handlers=registry).run()
        assert len(failed_rows(table)) == len(rows)
    finally:
        table.close()


def test_a_failure_reason_any_column_can_hold(table: JobTable, queue: LaravelQueue) -> None:
    """A handler's message with NUL (PostgreSQL's text refuses it) or of 200 KB (MySQL's TEXT
    holds 64 KiB, askr_failed_jobs.exception is TEXT) fails the job, not the worker."""

    def shout(job: Job) -> None:
        raise RuntimeError("nul \x00 here, lone \udcff, and " + "é" * 100_000)

    registry = HandlerRegistry()
    registry.register(GOOD, shout)
    queue.dispatch(GOOD, {})
    Worker(table, WorkerOptions(stop_when_empty=True, sleep=0), handlers=registry).run()
    (row,) = failed_rows(table)
    assert row["exception"].startswith("RuntimeError: nul \\x00 here, lone \\udcff, and éé")
    if table.layout == "askr":
        assert row["exception"].endswith("(cut to fit the failed table's column)")


def test_the_safety_net_settles_a_row_the_reader_did_not_foresee(
    table: JobTable, queue: LaravelQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """Should reading a row raise anything unforeseen (a bug), the row is still failed once,
    as stored, and the worker goes on. (A reader with a bug stands in for such a row.)"""

    class Unprintable(KeyError):
        def __str__(self) -> str:
            raise RuntimeError("no message either")

    class BuggyWorker(Worker):
        def _parse(self, job: ReservedJob) -> Any:
            raise Unprintable("x")

    first = queue.dispatch(GOOD, {"n": 1})
    queue.dispatch(GOOD, {"n": 2})
    BuggyWorker(table, WorkerOptions(stop_when_empty=True, sleep=0, claim="all")).run()
    rows = failed_rows(table)
    assert len(rows) == 2 and table.size("default") == 0
    assert (
        "the worker could not read the job: Unprintable: <the exception's message"
        in (rows[0]["exception"])
    )
    assert json.loads(rows[0]["payload"])["uuid"] == first.uuid
    assert "reading job" in caplog.text  # logged with its traceback


@pytest.mark.timeout(60, method="thread")  # the worker owns SIGALRM
def test_a_job_of_a_class_it_has_no_handler_for_is_left_unread_to_php(
    table: JobTable, engine_name: str
) -> None:
    """Nested deeper than this worker reads, but PHP's (4,096 levels): a Laravel worker runs
    it. Named a class with no Python handler, it is handed back, not failed."""
    deep = next(r for r in BAD_ROWS if r.label == "deep PHP nesting")
    raw = deep.raw.replace(b"App\\\\Jobs\\\\Bad", b"App\\\\Jobs\\\\PhpDeep")
    assert raw != deep.raw
    insert_raw(table, "default", raw)
    Worker(table, WorkerOptions(stop_when_empty=True, sleep=0), handlers=HandlerRegistry()).run()
    assert failed_rows(table) == [] and table.size("default") == 1
