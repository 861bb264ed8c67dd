"""Laravel's jobs/failed_jobs tables with Laravel's database-queue rules, on every engine."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from bridge_support import laravel_13_jobs_table
from laravel_support import sql_engine

from kombu_sqlqueue.exceptions import ConfigurationError, InvalidQueueName, SchemaMismatch
from kombu_sqlqueue.store import StoreOptions
from laravel_bridge.laravel_tables import LaravelTableStore

NOW = 1_800_000_000


@pytest.fixture
def lstore(db_url: str) -> Iterator[LaravelTableStore]:
    s = LaravelTableStore(db_url)
    s.clock = lambda: NOW
    yield s
    s.close()


def rows(db_url: str, table: str = "jobs") -> list[dict[str, object]]:
    engine = sql_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))]
    finally:
        engine.dispose()


def test_push_writes_laravels_row(lstore: LaravelTableStore, db_url: str) -> None:
    job_id = lstore.push("mail", '{"uuid":"u1"}', delay=2.5)
    (row,) = rows(db_url)
    assert row["id"] == job_id
    assert row["queue"] == "mail"
    assert row["payload"] == '{"uuid":"u1"}'
    assert row["attempts"] == 0
    assert row["reserved_at"] is None
    assert row["available_at"] == NOW + 3  # a delay is a floor: rounded up
    assert row["created_at"] == NOW


def test_pop_reserves_oldest_and_counts_the_attempt(lstore: LaravelTableStore, db_url: str) -> None:
    first = lstore.push("q", "a")
    lstore.push("q", "b")
    lstore.push("other", "c")
    row = lstore.pop("q", retry_after=90)
    assert row is not None
    assert (row.id, row.payload, row.attempts, row.reserved_at) == (first, "a", 1, NOW)
    stored = {r["id"]: r for r in rows(db_url)}[first]
    assert (stored["attempts"], stored["reserved_at"]) == (1, NOW)
    second = lstore.pop("q", retry_after=90)
    assert second is not None and second.payload == "b"
    assert lstore.pop("q", retry_after=90) is None


def test_delayed_job_waits(lstore: LaravelTableStore) -> None:
    lstore.push("q", "later", delay=10)
    assert lstore.pop("q", 90) is None
    lstore.clock = lambda: NOW + 10
    row = lstore.pop("q", 90)
    assert row is not None and row.payload == "later"


def test_reservation_older_than_retry_after_is_taken_over(lstore: LaravelTableStore) -> None:
    lstore.push("q", "p")
    held = lstore.pop("q", 90)
    assert held is not None
    lstore.clock = lambda: NOW + 89
    assert lstore.pop("q", 90) is None
    lstore.clock = lambda: NOW + 90
    taken = lstore.pop("q", 90)
    assert taken is not None and taken.id == held.id and taken.attempts == 2
    # The first holder's settlements are stale now: nothing is written.
    assert lstore.delete(held) is False
    assert lstore.release(held, 0) is False
    assert lstore.fail(held, "database", "u", "late") is False
    assert lstore.size("q") == 1
    assert lstore.failed_jobs() == []
    assert lstore.delete(taken) is True
    assert lstore.size("q") == 0


def test_release_deletes_and_reinserts_with_same_payload_and_attempts(
    lstore: LaravelTableStore, db_url: str
) -> None:
    lstore.push("q", "payload")
    held = lstore.pop("q", 90)
    assert held is not None
    assert lstore.release(held, delay=7) is True
    (row,) = rows(db_url)
    assert row["id"] != held.id  # Laravel re-inserts
    assert (row["payload"], row["attempts"], row["reserved_at"]) == ("payload", 1, None)
    assert row["available_at"] == NOW + 7
    again = lstore.pop("q", 90)
    assert again is None  # delayed
    lstore.clock = lambda: NOW + 7
    again = lstore.pop("q", 90)
    assert again is not None and again.attempts == 2


def test_release_with_refund_gives_the_attempt_back(lstore: LaravelTableStore, db_url: str) -> None:
    lstore.push("q", "p")
    held = lstore.pop("q", 90)
    assert held is not None
    assert lstore.release(held, 0, attempts=held.attempts - 1)
    assert rows(db_url)[0]["attempts"] == 0


def test_fail_writes_failed_jobs_like_laravels_failer(
    lstore: LaravelTableStore, db_url: str
) -> None:
    payload = '{"uuid":"9b1d…","job":"x"}'
    lstore.push("emails", payload)
    held = lstore.pop("emails", 90)
    assert held is not None
    assert lstore.fail(held, "database", "9b1d-uuid", "RuntimeError: boom\n\ntrace") is True
    assert rows(db_url) == []
    (failed,) = rows(db_url, "failed_jobs")
    assert failed["uuid"] == "9b1d-uuid"
    assert failed["connection"] == "database"
    assert failed["queue"] == "emails"
    assert failed["payload"] == payload
    assert failed["exception"] == "RuntimeError: boom\n\ntrace"
    # Y-m-d H:i:s in UTC (Laravel's default app timezone).
    assert re.fullmatch(r"2027-01-15 08:00:00", str(failed["failed_at"]))


def test_delete_then_pushes_in_the_same_transaction(lstore: LaravelTableStore) -> None:
    lstore.push("q", "first")
    held = lstore.pop("q", 90)
    assert held is not None
    assert lstore.delete(held, then=[("next", "second", 0.0)]) is True
    nxt = lstore.pop("next", 90)
    assert nxt is not None and (nxt.payload, nxt.attempts) == ("second", 1)
    # A stale delete pushes nothing.
    assert lstore.delete(held, then=[("next", "dup", 0.0)]) is False
    assert lstore.size("next") == 1


def test_size_counts_reserved_rows_like_laravel(lstore: LaravelTableStore) -> None:
    lstore.push("q", "a")
    lstore.push("q", "b", delay=60)
    lstore.pop("q", 90)
    assert lstore.size("q") == 2


def test_push_many_inserts_every_row(lstore: LaravelTableStore) -> None:
    assert lstore.push_many([("bulk", f"p{i}", 0.0) for i in range(2500)]) == 2500
    assert lstore.size("bulk") == 2500
    seen = []
    while (row := lstore.pop("bulk", 90)) is not None and len(seen) < 3:
        seen.append(row.payload)
    assert seen == ["p0", "p1", "p2"]


def test_table_names_are_configurable(db_url: str) -> None:
    s = LaravelTableStore(db_url, jobs_table="queue_jobs", failed_table="queue_failed")
    try:
        s.push("q", "x")
        held = s.pop("q", 90)
        assert held is not None
        s.fail(held, "database", "u-1", "e")
        assert len(rows(db_url, "queue_failed")) == 1
        assert rows(db_url, "queue_jobs") == []
    finally:
        s.close()


def test_missing_tables_are_named(db_url: str) -> None:
    s = LaravelTableStore(db_url, options=StoreOptions(create_tables=False))
    try:
        with pytest.raises(SchemaMismatch, match="table jobs does not exist"):
            s.push("q", "x")
    finally:
        s.close()


def test_bad_table_and_queue_names_are_refused(db_url: str, lstore: LaravelTableStore) -> None:
    with pytest.raises(ConfigurationError, match="table name"):
        LaravelTableStore(db_url, jobs_table="jobs; DROP TABLE x")
    with pytest.raises(InvalidQueueName):
        lstore.push("", "x")


def test_stores_opened_and_freed_on_one_database_each_write_their_own_tables(
    db_url: str,
) -> None:
    # The executor caches compiled statements by id: a freed store's statement must not
    # hand its SQL (another table's name) to a later store's statement at the same id.
    import gc

    from kombu_sqlqueue.store import Database

    database = Database(db_url)
    try:
        for i in range(30):
            store = LaravelTableStore(database, jobs_table=f"jobs_{i}", failed_table=f"failed_{i}")
            store.push("q", f'{{"n":{i}}}')
            assert store.size("q") == 1, f"store {i} wrote to another store's table"
            del store
            gc.collect()
        for i in (0, 29):
            assert [r["payload"] for r in rows(db_url, f"jobs_{i}")] == [f'{{"n":{i}}}']
        with pytest.raises(ConfigurationError, match="shared Database"):
            LaravelTableStore(database, options=StoreOptions())
    finally:
        database.close()


def laravel_payload(display: str, command: str | None = None, tail: str = "") -> str:
    """A payload's head as Laravel writes it (JSON-escaped names), the command left out."""
    from laravel_bridge.payload import laravel_json

    data = {"commandName": command or display, "command": "O:8:..."}
    return (
        '{"uuid":"6f1c9a2e-0000-4000-8000-000000000000","displayName":'
        f'{laravel_json(display)},"job":"Illuminate\\\\Queue\\\\CallQueuedHandler@call",'
        f'"maxTries":null,"data":{laravel_json(data)}{tail}}}'
    )


def test_a_pop_by_class_reserves_only_jobs_naming_a_listed_class(
    lstore: LaravelTableStore, db_url: str
) -> None:
    ids = {
        name: lstore.push("q", payload)
        for name, payload in [
            ("php_only", laravel_payload("App\\Jobs\\PhpOnly")),
            ("prefix", laravel_payload("App\\Jobs\\Send")),  # a prefix of a listed name
            ("ours", laravel_payload("App\\Jobs\\SendInvoice")),
            ("listener", laravel_payload("App\\Listeners\\Ship",
                                         "Illuminate\\Events\\CallQueuedListener")),
            ("unicode", laravel_payload("App\\Jobs\\Zoë/Ünï")),
            ("not_json", "{this is no payload"),
            ("no_display", '{"uuid":"x","job":"App\\\\Jobs\\\\PhpOnly"}'),
        ]
    }  # fmt: skip
    classes = ["\\App\\Jobs\\SendInvoice", "Illuminate\\Events\\CallQueuedListener",
               "App\\Jobs\\Zoë/Ünï"]  # fmt: skip
    got = []
    while (row := lstore.pop("q", 90, classes)) is not None:
        got.append(row.id)
    assert got == [ids[k] for k in ("ours", "listener", "unicode", "not_json", "no_display")]
    untouched = {r["id"]: r for r in rows(db_url)}
    for name in ("php_only", "prefix"):  # never reserved: a PHP worker finds them as queued
        assert (untouched[ids[name]]["attempts"], untouched[ids[name]]["reserved_at"]) == (0, None)
    # No class at all: only what is no Laravel payload would be taken (none is left).
    assert lstore.pop("q", 90, []) is None
    assert lstore.pop("q", 90) is not None  # no filter: the oldest, as Laravel pops


def test_a_pop_by_class_reads_only_the_payloads_head(lstore: LaravelTableStore) -> None:
    """A name cut off by the head is no match (never a partial one); a long payload whose
    head names the class is found whatever follows."""
    long_name = "App\\Jobs\\" + "X" * 3000
    lstore.push("q", laravel_payload(long_name))
    big = lstore.push("q", laravel_payload("App\\Jobs\\Big", tail=',"pad":"' + "y" * 100_000 + '"'))
    assert lstore.pop("q", 90, [long_name[:1500]]) is None
    row = lstore.pop("q", 90, ["App\\Jobs\\Big"])
    assert row is not None and row.id == big


def test_laravel_13s_smallint_attempts_are_kept_past_255(db_url: str, engine_name: str) -> None:
    """Laravel 13's jobs.stub has ``unsignedSmallInteger('attempts')``: a row at 300 is
    reserved as attempt 301 and handed back at 300, never clamped to 8-12's 255."""
    laravel_13_jobs_table(db_url, engine_name)
    store = LaravelTableStore(db_url)
    store.clock = lambda: NOW
    try:
        store.push("q", "x")
        job_id = store.push("q", "y", attempts=300)
        assert (
            store.attempts_limit >= 65535 if engine_name == "mysql" else store.attempts_limit > 300
        )
        store.pop("q", 90)  # the first row
        row = store.pop("q", 90)
        assert row is not None and (row.id, row.attempts) == (job_id, 301)
        assert {r["id"]: r["attempts"] for r in rows(db_url)}[job_id] == 301
        assert store.release(row, 0, attempts=300)
        assert [r["attempts"] for r in rows(db_url) if r["payload"] == "y"] == [300]
    finally:
        store.close()


def test_laravel_8s_tinyint_attempts_stay_at_255_on_mysql(db_url: str, engine_name: str) -> None:
    store = LaravelTableStore(db_url)
    store.clock = lambda: NOW
    try:
        job_id = store.push("q", "z", attempts=255)
        row = store.pop("q", 90)
        assert row is not None and row.id == job_id
        if engine_name == "mysql":
            assert store.attempts_limit == 255 and row.attempts == 255
        else:  # Laravel's tinyInteger is a SMALLINT on PostgreSQL, an INTEGER on SQLite
            assert store.attempts_limit >= 32767 and row.attempts == 256
    finally:
        store.close()
