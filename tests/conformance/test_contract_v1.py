"""Durable queue contract v1, operation by operation, against the store on every engine.

The clock is the store's ``clock`` attribute, moved forward by the tests
instead of sleeping; the database is real. The fourth engine, ``memory``, is the
in-memory store (``kombu_sqlqueue.store.memory``): it runs everything but what
inspects SQL (schema, statements, drivers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from support import MEMORY, T0, Clock

from kombu_sqlqueue.exceptions import (
    ClaimLimitExceeded,
    InvalidQueueName,
    SchemaMismatch,
    StoreConnectionError,
    StoreError,
)
from kombu_sqlqueue.store import (
    MAX_CLAIM,
    JobContract,
    JobStore,
    MemoryJobStore,
    NewJob,
    Receipt,
    StoreOptions,
    open_store,
)


@pytest.fixture
def clock(store: JobContract) -> Clock:
    c = Clock()
    store.clock = c
    return c


def job(queue: str = "q", payload: bytes = b"p", **kw: object) -> NewJob:
    return NewJob(queue=queue, payload=payload, **kw)  # type: ignore[arg-type]


def raw(store: JobContract, sql: str) -> list[tuple[object, ...]]:
    assert isinstance(store, JobStore)
    with store._db.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(sql)]


def stored_payloads(store: JobContract) -> list[bytes]:
    """The payload of every row of askr_jobs (the memory store's rows)."""
    if isinstance(store, MemoryJobStore):
        return [r["payload"] for r in store.rows()]
    return [bytes(r[0]) for r in raw(store, "SELECT payload FROM askr_jobs")]


def stored_count(store: JobContract) -> int:
    """``SELECT count(*) FROM askr_jobs`` (the memory store's rows)."""
    if isinstance(store, MemoryJobStore):
        return len(store.rows())
    ((count,),) = raw(store, "SELECT count(*) FROM askr_jobs")
    return int(count)


def sql_only(engine_name: str, why: str) -> None:
    """Skip on the in-memory store, which has no SQL: ``why`` says what it lacks."""
    if engine_name == MEMORY:
        pytest.skip(f"the in-memory store has no {why}")


# -- schema --------------------------------------------------------------------------


def test_tables_and_claim_index_have_contract_names(store: JobContract, engine_name: str) -> None:
    sql_only(engine_name, "tables or indexes to inspect")
    assert isinstance(store, JobStore)
    store.create_schema()
    store.create_schema()  # idempotent
    insp = sa.inspect(store._db)
    jobs = [c["name"] for c in insp.get_columns("askr_jobs")]
    assert jobs[:9] == [
        "id", "queue", "payload", "priority", "available_at",
        "reserved_until", "attempts", "max_attempts", "created_at",
    ]  # fmt: skip
    assert {"reserved_token", "uuid", "expires_at"} <= set(jobs)
    failed = [c["name"] for c in insp.get_columns("askr_failed_jobs")]
    assert failed[:7] == ["id", "uuid", "queue", "payload", "exception", "attempts", "failed_at"]
    assert failed[7:] == ["concurrency_key"]  # ours, additive (nullable): a per-key limit's
    index = {i["name"]: i for i in insp.get_indexes("askr_jobs")}["askr_jobs_claim"]
    assert index["column_names"] == ["queue", "reserved_until", "priority", "available_at", "id"]


#: Contract v1's askr_jobs, without this package's additive columns, in each engine's types.
CONTRACT_DDL = {
    "sqlite": """CREATE TABLE askr_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL DEFAULT 'default',
        payload BLOB NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
        available_at INTEGER NOT NULL, reserved_until INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 25,
        created_at INTEGER NOT NULL DEFAULT (unixepoch()))""",
    "postgresql": """CREATE TABLE askr_jobs (
        id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL DEFAULT 'default',
        payload BYTEA NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
        available_at BIGINT NOT NULL, reserved_until BIGINT,
        attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 25,
        created_at BIGINT NOT NULL DEFAULT 0)""",
    "mysql": """CREATE TABLE askr_jobs (
        id BIGINT AUTO_INCREMENT PRIMARY KEY, queue VARCHAR(255) NOT NULL DEFAULT 'default',
        payload LONGBLOB NOT NULL, priority INTEGER NOT NULL DEFAULT 0,
        available_at BIGINT NOT NULL, reserved_until BIGINT,
        attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL DEFAULT 25,
        created_at BIGINT NOT NULL DEFAULT 0) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin""",
}


def test_contract_table_made_by_another_runtime_gains_our_columns(
    db_url: str, engine_name: str
) -> None:
    sql_only(engine_name, "tables another runtime could have made")
    engine = sa.create_engine(JobStore(db_url).url)
    with engine.begin() as conn:
        conn.exec_driver_sql(CONTRACT_DDL[engine_name])
        conn.execute(
            sa.text("INSERT INTO askr_jobs (queue, payload, available_at) VALUES ('q', :p, 0)"),
            {"p": b"x"},
        )
    engine.dispose()
    store = JobStore(db_url)
    try:
        claimed = store.claim("q", 1, 30).jobs
        assert [j.payload for j in claimed] == [b"x"]
        assert store.ack(claimed[0].receipt)
    finally:
        store.close()


def test_missing_tables_with_create_off_is_a_named_error(db_url: str, engine_name: str) -> None:
    sql_only(engine_name, "tables that could be missing")
    store = JobStore(db_url, StoreOptions(create_tables=False))
    try:
        with pytest.raises(SchemaMismatch, match="askr_jobs does not exist"):
            store.size("q")
    finally:
        store.close()


# -- enqueue -------------------------------------------------------------------------


def test_enqueue_stamps_columns(store: JobContract, clock: Clock) -> None:
    job_id = store.enqueue(job(priority=5, max_attempts=3, uuid="u-1"))
    row = store.get_job(job_id)
    assert row is not None
    assert (row["queue"], row["payload"], row["priority"]) == ("q", b"p", 5)
    assert (row["available_at"], row["created_at"], row["max_attempts"]) == (T0, T0, 3)
    assert (row["reserved_until"], row["attempts"], row["uuid"]) == (None, 0, "u-1")


def test_a_job_written_again_keeps_the_attempts_it_used(store: JobContract) -> None:
    """A format that counts its own attempts (a Celery retry of a Laravel job) writes them."""
    ready, ready_now = (
        store.enqueue(job(max_attempts=5, attempts=2)),
        store.enqueue_many([job(max_attempts=5, attempts=4)]),
    )
    assert store.get_job(ready)["attempts"] == 2  # type: ignore[index]
    claimed = store.claim("q", 2, 30).jobs
    assert sorted(j.attempts for j in claimed) == [3, 5] and ready_now
    with pytest.raises(ValueError, match="attempts"):
        store.enqueue(job(max_attempts=3, attempts=4))


def test_bulk_enqueue_is_one_statement_and_keeps_order(
    store: JobContract, clock: Clock, caplog: pytest.LogCaptureFixture, engine_name: str
) -> None:
    store.create_schema()
    with caplog.at_level(logging.DEBUG, logger="kombu_sqlqueue.store.executor"):
        ids = store.enqueue_many([job(payload=b"%d" % i) for i in range(300)])
    inserts = [r for r in caplog.records if r.getMessage().startswith("SQL INSERT")]
    if engine_name != MEMORY:  # the memory store runs no statement
        assert len(inserts) == 1
    assert len(ids) == 300 and ids == sorted(ids)
    assert [store.get_job(i)["payload"] for i in ids[:3]] == [b"0", b"1", b"2"]  # type: ignore[index]
    assert store.enqueue_many([]) == []


def test_binary_payload_round_trips(store: JobContract) -> None:
    payload = bytes(range(256)) * 64
    store.enqueue(job(payload=payload))
    assert store.claim("q", 1, 30).jobs[0].payload == payload


def test_delayed_job_is_not_claimable_before_its_time(store: JobContract, clock: Clock) -> None:
    store.enqueue(job(delay=10.2))
    assert store.claim("q", 10, 30).jobs == []
    clock.advance(10)
    assert store.claim("q", 10, 30).jobs == []  # rounded up: never early
    clock.advance(1)
    assert len(store.claim("q", 10, 30).jobs) == 1


# -- claim ---------------------------------------------------------------------------


def test_claim_orders_by_priority_then_age_and_stays_in_its_queue(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue(job(payload=b"low-old", priority=0))
    clock.advance(1)
    store.enqueue(job(payload=b"high", priority=9))
    store.enqueue(job(payload=b"low-new", priority=0))
    store.enqueue(job(queue="other", payload=b"elsewhere", priority=9))
    clock.advance(1)
    claimed = store.claim("q", 10, 30).jobs
    assert [j.payload for j in claimed] == [b"high", b"low-old", b"low-new"]


def test_claim_reserves_counts_attempt_and_writes_a_fresh_token(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue(job())
    (first,) = store.claim("q", 1, 30).jobs
    row = store.get_job(first.id)
    assert row is not None
    assert (row["attempts"], row["reserved_until"], row["reserved_token"]) == (
        1,
        T0 + 30,
        first.token,
    )
    assert store.claim("q", 1, 30).jobs == []  # reserved: nobody else gets it
    clock.advance(30)  # lapsed
    (second,) = store.claim("q", 1, 30).jobs
    assert second.id == first.id and second.attempts == 2 and second.token != first.token


@pytest.mark.parametrize("n", [0, -1, -1000])
def test_claim_of_zero_or_fewer_claims_nothing(store: JobContract, n: int) -> None:
    store.enqueue(job())
    assert store.claim("q", n, 30).jobs == []
    assert store.backlog("q").ready == 1


def test_claim_above_the_ceiling_is_refused_not_trimmed(store: JobContract) -> None:
    store.enqueue(job())
    with pytest.raises(ClaimLimitExceeded, match=str(MAX_CLAIM)):
        store.claim("q", MAX_CLAIM + 1, 30)
    assert store.backlog("q").ready == 1
    assert len(store.claim("q", MAX_CLAIM, 30).jobs) == 1


def test_empty_queue_is_an_answer_not_an_error(store: JobContract) -> None:
    assert store.claim("nothing-here", 5, 30).jobs == []


def race_claimers(db_url: str, drain: Callable[[JobContract], None], jobs: int = 400) -> None:
    """Seed ``jobs`` jobs on queue q, then run ``drain`` on 6 stores of their own at once."""
    seed = open_store(db_url)
    seed.enqueue_many([job(payload=b"%d" % i) for i in range(jobs)])

    def claimer() -> None:
        s = open_store(db_url)
        try:
            drain(s)
        finally:
            s.close()

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    seed.close()


def test_concurrent_claimers_never_share_a_job(db_url: str) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def drain(s: JobContract) -> None:
        while got := s.claim("q", 7, 60).jobs:
            with lock:
                seen.extend(j.id for j in got)

    race_claimers(db_url, drain)
    assert len(seen) == 400 and len(set(seen)) == 400


def test_concurrent_claimers_settling_with_their_claims_never_share_a_job(db_url: str) -> None:
    """Each claimer acks its last batch with its next claim (ack_many_and_claim: one
    statement on PostgreSQL): no job is handed out twice, every ack lands, the table ends
    empty."""
    seen: list[int] = []
    acked: list[int] = []
    lock = threading.Lock()

    def drain(s: JobContract) -> None:
        held: list[Receipt] = []
        while True:
            done, claimed = s.ack_many_and_claim(held, "q", 7, 60)
            held = [j.receipt for j in claimed.jobs]
            with lock:
                seen.extend(j.id for j in claimed.jobs)
                acked.extend(r.job_id for r in done)
            if not held:
                return

    race_claimers(db_url, drain)
    assert len(seen) == 400 and len(set(seen)) == 400
    assert sorted(acked) == sorted(seen)
    store = open_store(db_url)
    try:
        assert store.backlog("q").total == 0
    finally:
        store.close()


# -- settlements and fencing ---------------------------------------------------------


@pytest.fixture
def taken_over(store: JobContract, clock: Clock) -> Iterator[tuple[Receipt, Receipt]]:
    """A job claimed by A, lapsed, and claimed again by B."""
    store.enqueue(job(uuid="u-9"))
    (a,) = store.claim("q", 1, 5).jobs
    clock.advance(5)
    (b,) = store.claim("q", 1, 5).jobs
    yield a.receipt, b.receipt


def test_ack_deletes_and_a_second_ack_is_stale(store: JobContract) -> None:
    store.enqueue(job())
    (j,) = store.claim("q", 1, 30).jobs
    assert store.ack(j.receipt) is True
    assert store.get_job(j.id) is None
    assert store.ack(j.receipt) is False


def test_late_ack_of_a_taken_over_job_changes_nothing(
    store: JobContract, taken_over: tuple[Receipt, Receipt]
) -> None:
    a, b = taken_over
    before = store.get_job(a.job_id)
    assert store.ack(a) is False
    assert store.release(a, 0) is False
    assert store.return_job(a) is False
    assert store.dead_letter(a, "late") is False
    assert store.renew([a], 30) == set()
    assert store.get_job(a.job_id) == before
    assert store.dead_letters() == []
    assert store.ack(b) is True


def test_gone_tells_a_settled_job_from_one_taken_over(
    store: JobContract, taken_over: tuple[Receipt, Receipt]
) -> None:
    """A stale settlement of a job whose row is gone was settled already (completed in an
    application's transaction, or finished by its new holder); one whose row is held by
    another consumer was taken over. ``gone`` tells them apart, in one statement."""
    a, b = taken_over
    waiting = store.enqueue(job())
    assert store.gone([a.job_id, waiting]) == set()  # held by another, and waiting: present
    assert store.ack(b)
    assert store.gone([a.job_id, waiting, 10**9]) == {a.job_id, 10**9}
    assert store.gone([]) == set()


def test_ack_many_acks_only_what_is_held(
    store: JobContract, taken_over: tuple[Receipt, Receipt]
) -> None:
    a, b = taken_over
    store.enqueue(job(payload=b"other"))
    (c,) = store.claim("q", 1, 30).jobs
    assert store.ack_many([a, c.receipt]) == {c.receipt}
    assert store.get_job(a.job_id) is not None and store.get_job(c.id) is None
    assert store.ack_many([b]) == {b}
    assert store.ack_many([b, c.receipt]) == set()  # settled already: stale


def test_ack_many_and_claim_settles_then_claims_at_once(
    store: JobContract, taken_over: tuple[Receipt, Receipt]
) -> None:
    """A consumer's held acks and its next claim in one transaction: the acks fenced as
    ``ack_many``'s (a stale one changes nothing and fails none of the others), the claim as
    ``claim``'s (another's held row is not handed out)."""
    a, b = taken_over
    for n in range(3):
        store.enqueue(job(payload=b"next-%d" % n))
    c, d = store.claim("q", 2, 30).jobs
    acked, claimed = store.ack_many_and_claim([a, c.receipt, d.receipt], "q", 5, 30)
    assert acked == {c.receipt, d.receipt}
    assert [j.payload for j in claimed.jobs] == [b"next-2"]  # b's row stays b's
    assert store.get_job(c.id) is None and store.get_job(d.id) is None
    assert store.get_job(a.job_id) is not None
    (e,) = claimed.jobs
    acked, claimed = store.ack_many_and_claim([e.receipt, b], "q", 5, 30)
    assert acked == {e.receipt, b} and claimed.jobs == []  # empty queue: the acks still written
    assert store.backlog("q").total == 0


def test_ack_many_and_claim_never_hands_out_a_row_it_acks(store: JobContract, clock: Clock) -> None:
    """A reservation that lapsed just before its ack: the row would be ready to the claim,
    but the ack comes first and deletes it, so it is not handed out again."""
    store.enqueue(job())
    (j,) = store.claim("q", 1, 30).jobs
    clock.advance(31)
    acked, claimed = store.ack_many_and_claim([j.receipt], "q", 5, 30)
    assert acked == {j.receipt} and claimed.jobs == []
    assert store.get_job(j.id) is None


def test_release_rearms_after_delay_and_keeps_attempts(store: JobContract, clock: Clock) -> None:
    store.enqueue(job())
    (j,) = store.claim("q", 1, 30).jobs
    assert store.release(j.receipt, delay=4) is True
    row = store.get_job(j.id)
    assert row is not None
    assert (row["reserved_until"], row["reserved_token"], row["attempts"]) == (None, None, 1)
    assert row["available_at"] == T0 + 4
    assert store.claim("q", 1, 30).jobs == []
    clock.advance(4)
    (again,) = store.claim("q", 1, 30).jobs
    assert again.attempts == 2


def test_return_refunds_the_unstarted_attempt(store: JobContract) -> None:
    store.enqueue(job())
    (j,) = store.claim("q", 1, 30).jobs
    assert store.return_job(j.receipt) is True
    (again,) = store.claim("q", 1, 30).jobs
    assert again.attempts == 1


def test_renew_extends_only_held_reservations(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(), job()])
    first, second = store.claim("q", 2, 10).jobs
    assert store.ack(second.receipt)
    clock.advance(9)
    assert store.renew([first.receipt, second.receipt], 10) == {first.receipt}
    clock.advance(9)  # past the first deadline, inside the renewed one
    assert store.claim("q", 1, 10).jobs == []
    assert store.get_job(first.id)["reserved_until"] == T0 + 19  # type: ignore[index]


def test_dead_letter_moves_the_row_with_reason_in_one_step(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue(job(payload=b"body", uuid="task-1"))
    (j,) = store.claim("q", 1, 30).jobs
    assert store.dead_letter(j.receipt, "handler raised ValueError") is True
    assert store.get_job(j.id) is None
    (dead,) = store.dead_letters()
    assert (dead.uuid, dead.queue, dead.payload) == ("task-1", "q", b"body")
    assert (dead.exception, dead.attempts, dead.failed_at) == ("handler raised ValueError", 1, T0)


def test_a_message_that_never_became_a_job_is_kept_as_a_dead_letter(
    store: JobContract, clock: Clock
) -> None:
    """What ``kombu-sqlqueue move`` does with a source message it cannot copy: its bytes
    (any bytes, a NUL and invalid UTF-8 included) and the reason, never a job."""
    raw = b'{"body": "\x00\xff", "properties": {"expiration": "soon"}}'
    store.dead_letter_message(job(payload=raw, uuid="task-9"), "expiration 'soon': no number")
    store.dead_letter_message(job(queue="other", payload=b""), "x" * 100_000)
    assert store.size("q") == 0 and store.claim("q", 5, 30).jobs == []
    first, second = store.dead_letters()
    assert (first.uuid, first.queue, first.payload) == ("task-9", "q", raw)
    assert (first.exception, first.attempts, first.failed_at) == (
        "expiration 'soon': no number", 0, T0,
    )  # fmt: skip
    assert second.queue == "other" and second.uuid is None and second.payload == b""
    assert second.exception is not None and 0 < len(second.exception) <= 100_000
    with pytest.raises(InvalidQueueName):
        store.dead_letter_message(job(queue="bad\x00name"), "never written")
    assert len(store.dead_letters()) == 2


def test_claim_dead_letters_a_job_past_max_attempts(store: JobContract, clock: Clock) -> None:
    store.enqueue(job(max_attempts=2, uuid="poison"))
    store.enqueue(job(payload=b"healthy", priority=-1))
    for _ in range(2):
        got = store.claim("q", 1, 5).jobs
        assert [j.uuid for j in got] == ["poison"]
        clock.advance(5)  # the worker died; the reservation lapses
    result = store.claim("q", 5, 5)
    assert [j.payload for j in result.jobs] == [b"healthy"]
    assert result.dead_lettered == 1
    (dead,) = store.dead_letters("q")
    assert dead.uuid == "poison" and dead.attempts == 2  # deliveries made
    assert dead.exception is not None and "max attempts exceeded" in dead.exception


def test_the_claimers_lower_limit_wins(store: JobContract, clock: Clock) -> None:
    store.enqueue(job(max_attempts=25))  # the producer stamped the default
    assert store.claim("q", 1, 5, max_attempts=1).jobs[0].max_attempts == 1
    clock.advance(5)
    result = store.claim("q", 1, 5, max_attempts=1)
    assert result.jobs == [] and result.dead_lettered == 1
    store.enqueue(job(max_attempts=1))  # and the producer's, when it is lower
    store.claim("q", 1, 5, max_attempts=10)
    clock.advance(5)
    assert store.claim("q", 1, 5, max_attempts=10).dead_lettered == 1


# -- time to live (expires_at: AMQP's message TTL) -----------------------------------


def test_a_job_past_its_ttl_is_discarded_at_claim_not_dead_lettered(
    store: JobContract, clock: Clock
) -> None:
    doomed = store.enqueue(job(payload=b"short-lived", expires_in=2))
    kept = store.enqueue(job(payload=b"forever", priority=-1))
    row = store.get_job(doomed)
    assert row is not None and row["expires_at"] == T0 + 2
    clock.advance(1)
    assert store.claim("q", 1, 30).jobs[0].payload == b"short-lived"  # still alive
    clock.advance(30)  # its reservation lapsed, and so did its TTL
    result = store.claim("q", 5, 30)
    assert [j.payload for j in result.jobs] == [b"forever"]
    assert (result.expired, result.dead_lettered) == (1, 0)
    assert store.get_job(doomed) is None and store.get_job(kept) is not None
    assert store.dead_letters() == []


def test_a_claim_reaches_past_expired_rows_to_live_ones(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(payload=b"old%d" % i, priority=5, expires_in=1) for i in range(20)])
    store.enqueue(job(payload=b"live"))
    clock.advance(3)
    result = store.claim("q", 2, 30)
    assert [j.payload for j in result.jobs] == [b"live"]
    assert result.expired == 20
    assert store.backlog("q").total == 1


def test_ttl_of_zero_lives_under_a_second(store: JobContract, clock: Clock) -> None:
    clock.advance(0.5)
    store.enqueue(job(expires_in=0))
    assert len(store.claim("q", 1, 30).jobs) == 1  # taken at once: delivered
    store.enqueue(job(expires_in=0))
    clock.advance(1)
    assert store.claim("q", 1, 30).jobs == []


def test_queue_message_ttl_is_swept_unconsumed_and_read_with_bindings(
    store: JobContract, clock: Clock
) -> None:
    store.topology.declare_queue("monitor", None, message_ttl=5)
    store.topology.bind("events", "topic", "#", "monitor")
    store.topology.bind("events", "topic", "#", "no-ttl")
    routes = {r.queue: r.message_ttl for r in store.topology.routes("events")}
    assert routes == {"monitor": 5.0, "no-ttl": None}
    # Stamped by a publisher that read the TTL, or not (its created_at then counts).
    store.enqueue(job("monitor", b"stamped", expires_in=5))
    store.enqueue(job("monitor", b"unstamped"))
    store.enqueue(job("monitor", b"held"))
    store.enqueue(job("no-ttl", b"stays"))
    held = store.claim("monitor", 1, 600).jobs
    assert store.topology.discard_expired() == {}
    clock.advance(4)
    store.enqueue(job("monitor", b"young"))
    clock.advance(3)
    assert store.topology.discard_expired() == {"monitor": 2}
    left = sorted(stored_payloads(store))
    assert left == sorted([held[0].payload, b"young", b"stays"])  # held: its holder settles


def test_declaring_again_updates_the_message_ttl(store: JobContract) -> None:
    store.topology.declare_queue("r", 10, message_ttl=300)
    store.topology.declare_queue("r", 10, message_ttl=None)
    store.topology.bind("x", "direct", "r", "r")
    assert [r.message_ttl for r in store.topology.routes("x")] == [None]


# -- backlog, size, purge, delete, sweep ---------------------------------------------


def test_backlog_reports_total_ready_and_oldest(store: JobContract, clock: Clock) -> None:
    assert store.backlog("q").total == 0 and store.backlog("q").oldest_seconds == 0
    store.enqueue(job())
    clock.advance(7)
    store.enqueue(job())
    store.enqueue(job(delay=100))
    store.enqueue(job(priority=9))
    store.claim("q", 1, 30)  # holds the priority-9 job
    b = store.backlog("q")
    assert (b.total, b.ready, b.oldest_seconds) == (4, 2, 7)


def test_size_counts_delayed_and_lapsed_but_not_held(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(), job(), job(delay=50)])
    store.claim("q", 1, 10)
    assert store.size("q") == 2
    clock.advance(10)
    assert store.size("q") == 3


def test_purge_removes_unreserved_jobs_only(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(), job(), job(delay=50)])
    (held,) = store.claim("q", 1, 10).jobs
    clock.advance(20)  # even a lapsed reservation is not purged
    assert store.purge("q") == 2
    assert store.get_job(held.id) is not None
    assert store.ack(held.receipt)


def test_delete_queue_removes_everything_of_that_queue(store: JobContract) -> None:
    store.enqueue_many([job(), job(), job(queue="keep")])
    store.claim("q", 1, 10)
    assert store.delete_queue("q") == 2
    assert store.size("keep") == 1


def test_sweep_deletes_dead_letters_past_retention(store: JobContract, clock: Clock) -> None:
    store.enqueue_many([job(), job()])
    first, second = store.claim("q", 2, 10).jobs
    store.dead_letter(first.receipt, "old")
    clock.advance(100)
    store.dead_letter(second.receipt, "new")
    assert store.sweep_dead_letters(retention=50) == 1
    assert [d.exception for d in store.dead_letters()] == ["new"]


# -- names and errors ----------------------------------------------------------------

CELERY_NAMES = [
    "celery",
    "celery@worker-1.example.com.celery.pidbox",
    "celeryev.0b3e1f7a-6c0c-4d6f-9b2e-0d6f3c1e2a4b",
    "0b3e1f7a-6c0c-4d6f-9b2e-0d6f3c1e2a4b.reply.celery.pidbox",
    "default",
    "high priority",
    "ünïcode-queue",
]


@pytest.mark.parametrize("name", CELERY_NAMES)
def test_celery_queue_names_work(store: JobContract, name: str) -> None:
    store.enqueue(job(queue=name))
    assert [j.queue for j in store.claim(name, 1, 10).jobs] == [name]


def test_names_travel_as_parameters_not_sql(store: JobContract) -> None:
    name = "x'); DROP TABLE askr_jobs; --"
    store.enqueue(job(queue=name))
    assert store.size(name) == 1
    assert stored_count(store) == 1


@pytest.mark.parametrize("name", ["", "a\nb", "tab\there", "nul\x00", "x" * 256, " lead"])
def test_bad_queue_names_are_refused_before_any_sql(db_url: str, name: str) -> None:
    store = open_store(db_url, StoreOptions(create_tables=False))  # no tables: SQL would fail
    try:
        for call in (
            lambda: store.enqueue(job(queue=name)),
            lambda: store.claim(name, 1, 10),
            lambda: store.size(name),
            lambda: store.purge(name),
            lambda: store.backlog(name),
        ):
            with pytest.raises(InvalidQueueName):
                call()
    finally:
        store.close()


def test_driver_errors_are_wrapped(tmp_path: object, engine_name: str) -> None:
    sql_only(engine_name, "driver")
    from pathlib import Path

    from servers import free_port

    if engine_name == "sqlite":
        path = Path(str(tmp_path)) / "garbage.db"
        path.write_bytes(b"this is not a database" * 100)
        url, expected = f"sqlite:///{path}", StoreError
    else:  # a server that is not there
        url = f"{engine_name}://nobody@127.0.0.1:{free_port()}/nothing"
        expected = StoreConnectionError
    store = JobStore(url)
    try:
        with pytest.raises(expected) as info:
            store.size("q")
        assert not isinstance(info.value, sa.exc.SQLAlchemyError)
        assert info.value.__cause__ is not None  # the driver's error, for the curious
    finally:
        store.close()


def test_lapsed_and_never_claimed_jobs_are_served_in_one_order(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue(job(payload=b"old-low", priority=0))
    store.enqueue(job(payload=b"lapsing-high", priority=5))
    (held,) = store.claim("q", 1, 5).jobs  # takes the priority-5 job
    clock.advance(1)
    store.enqueue(job(payload=b"new-high", priority=5))
    store.enqueue(job(payload=b"new-low", priority=0))
    clock.advance(5)  # the priority-5 reservation lapses
    claimed = store.claim("q", 3, 5).jobs
    assert [j.payload for j in claimed] == [b"lapsing-high", b"new-high", b"old-low"]
    assert claimed[0].id == held.id and claimed[0].attempts == 2
    assert [j.lapsed for j in claimed] == [True, False, False]


def test_a_claim_says_which_jobs_come_back_from_a_lapsed_reservation(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue_many([job(payload=b"lapses"), job(payload=b"released"), job(payload=b"back")])
    lapses, released, back = store.claim("q", 3, 5).jobs
    assert not (lapses.lapsed or released.lapsed or back.lapsed)  # first deliveries
    assert store.release(released.receipt) and store.return_job(back.receipt)
    clock.advance(5)
    again = {j.payload: j for j in store.claim("q", 3, 5).jobs}
    # Only the one whose holder never settled it is AMQP-"redelivered" after a lapse; the
    # consumer that requeued or handed back the others lived to do so.
    assert {p: j.lapsed for p, j in again.items()} == {
        b"lapses": True,
        b"released": False,
        b"back": False,
    }
    assert again[b"released"].attempts == 2 and again[b"back"].attempts == 1


def test_a_lapsed_reservation_nobody_took_is_still_the_holders(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue_many([job(payload=b"renewed"), job(payload=b"acked")])
    first, second = store.claim("q", 2, 5).jobs
    clock.advance(30)  # both lapsed; no other consumer claimed them
    assert store.renew([first.receipt], 5) == {first.receipt}  # only the token fences
    assert store.ack(second.receipt) is True
    assert store.claim("q", 5, 5).jobs == []  # the renewed one is held again


# -- who holds what (seed 001's consumer identity) ------------------------------------------


def test_a_claim_signs_its_holds_and_a_release_clears_them(
    store: JobContract, clock: Clock
) -> None:
    from kombu_sqlqueue.store.model import this_instance

    store.enqueue_many([NewJob("q", b"a"), NewJob("q", b"b"), NewJob("other", b"c")])
    store.holder = "billing@host"
    a, b = store.claim("q", 2, 30).jobs
    store.holder = None
    (c,) = store.claim("other", 1, 30).jobs
    assert [(h.queue, h.holder, h.instance, h.jobs) for h in store.holders()] == [
        ("other", None, this_instance(), 1),
        ("q", "billing@host", this_instance(), 2),
    ]
    # Of the queues named alone (what stats says holds jobs: a read of the claim index).
    assert [(h.queue, h.jobs) for h in store.holders(["q", "q", "nowhere"])] == [("q", 2)]
    assert store.holders([]) == []
    row = store.get_job(a.id)
    assert row is not None and row["reserved_by"] == "billing@host"
    assert store.release(a.receipt)
    row = store.get_job(a.id)
    assert row is not None and (row["reserved_by"], row["reserved_instance"]) == (None, None)
    clock.advance(31)  # b's and c's reservations lapse: nobody holds them any more
    assert store.holders() == []
    del b, c


def test_release_holder_hands_back_its_holds_only_and_fences_them(
    store: JobContract, clock: Clock
) -> None:
    store.enqueue_many([NewJob("q", b"a"), NewJob("q", b"b"), NewJob("r", b"c")])
    store.holder = "dead@host"
    (mine,) = store.claim("q", 1, 300).jobs
    (other_queue,) = store.claim("r", 1, 300).jobs
    store.holder = "alive@host"
    (theirs,) = store.claim("q", 1, 300).jobs

    assert store.release_holder("dead@host", queue="q") == 1
    assert store.release_holder("dead@host", queue="q") == 0
    # Lapsed now: the next claim takes it as redelivered, its attempt counted.
    again = store.claim("q", 1, 300).jobs
    assert [(j.id, j.attempts, j.lapsed) for j in again] == [(mine.id, 2, True)]
    assert not store.ack(mine.receipt)  # the old holder's late ack is stale
    assert store.release_holder("nobody") == 0
    assert store.release_holder("dead@host", instance="elsewhere:1") == 0
    assert store.release_holder("dead@host", instance=store.holders()[0].instance) == 1
    assert store.ack(theirs.receipt)  # the live holder was never touched
    del other_queue


# -- enqueue once (seed 001's deduplication window) -----------------------------------------


def test_enqueue_once_writes_an_identity_once_per_window_from_its_first_write(
    store: JobContract, clock: Clock
) -> None:
    first = store.enqueue_once(job(payload=b"1"), "task-1", 60)
    assert first is not None
    clock.advance(30)
    assert store.enqueue_once(job(payload=b"2"), "task-1", 60) is None  # queued: nothing
    (held,) = store.claim("q", 1, 30).jobs
    assert store.enqueue_once(job(payload=b"3"), "task-1", 60) is None  # held: nothing
    assert store.ack(held.receipt)
    clock.advance(29)
    assert store.enqueue_once(job(payload=b"4"), "task-1", 60) is None  # done: nothing
    assert stored_count(store) == 0
    # Repeats did not stretch the window: 60 s after the first write it is open again.
    clock.advance(1)
    assert store.enqueue_once(job(payload=b"5"), "task-1", 60) is not None
    assert store.enqueue_once(job(payload=b"6"), "task-1", 60) is None
    # Per queue, per key; and a key too long to store whole is stored as its digest.
    assert store.enqueue_once(job(queue="other", payload=b"7"), "task-1", 60) is not None
    assert store.enqueue_once(job(payload=b"8"), "task-2", 60) is not None
    long_key = "k" * 1000
    assert store.enqueue_once(job(payload=b"9"), long_key, 60) is not None
    assert store.enqueue_once(job(payload=b"10"), long_key, 60) is None
    assert sorted(stored_payloads(store)) == [b"5", b"7", b"8", b"9"]


@pytest.mark.parametrize(("key", "window"), [("", 60), ("k", 0), ("k", -1)])
def test_enqueue_once_refuses_an_empty_key_or_window(
    store: JobContract, key: str, window: float
) -> None:
    with pytest.raises(ValueError):
        store.enqueue_once(job(), key, window)
    assert stored_count(store) == 0


def _race_enqueue_once(url: str, start: object, n: int) -> int:
    s = open_store(url)
    try:
        start.wait()  # type: ignore[attr-defined]
        return sum(
            s.enqueue_once(job(payload=b"%d" % i), "the-same-key", 600) is not None
            for i in range(n)
        )
    finally:
        s.close()


def test_publishers_racing_one_key_in_separate_processes_write_one_row(
    db_url: str, engine_name: str
) -> None:
    sql_only(engine_name, "processes sharing it")
    import multiprocessing

    seed = open_store(db_url)
    seed.ensure_ready()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Manager().Event()
    with ctx.Pool(6) as pool:
        pending = [pool.apply_async(_race_enqueue_once, (db_url, start, 5)) for _ in range(6)]
        time.sleep(1.0)  # let every process connect and wait at the start line
        start.set()
        written = [p.get(timeout=60) for p in pending]
    assert sum(written) == 1
    assert stored_count(seed) == 1
    seed.close()


# -- idle waits --------------------------------------------------------------------------


def _wait_in_thread(store: JobContract, seconds: float) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(store.wait_for_jobs(seconds, ["work"])))
    thread.start()
    return thread, result


def test_an_interrupt_ends_a_wait_under_way_as_a_timeout_would(store: JobContract) -> None:
    """From another thread (an ack freeing prefetch room, from a pool's result thread): the
    wait returns False long before its 60 s."""
    assert store.wait_for_jobs(0.01, ["work"]) is False  # the listener (if any) open
    thread, result = _wait_in_thread(store, 60)
    time.sleep(0.2)  # most likely inside the wait by now; if not, the next test's case
    store.interrupt_wait()
    thread.join(timeout=20)
    assert not thread.is_alive(), "interrupt_wait did not end the wait"
    assert result == [False]


def test_an_interrupt_before_a_wait_ends_the_next_one_at_once(db_url: str) -> None:
    """Made before the store ever waited (no listener opened yet): the first wait returns."""
    store = open_store(db_url, StoreOptions())
    try:
        store.interrupt_wait()
        thread, result = _wait_in_thread(store, 60)
        thread.join(timeout=20)
        assert not thread.is_alive(), "the interrupt made before the wait was lost"
        assert result == [False]
    finally:
        store.close()


def test_a_claim_after_empty_ones_finds_what_became_ready_meanwhile(
    store: JobContract, clock: Clock
) -> None:
    """An engine may read whether anything is ready before a claim of a queue that was
    idle (MariaDB, SQLite): a job enqueued, a delayed one come due and a lapsed reservation
    are each found by the next claim."""
    assert store.claim("q", 5, 30).jobs == []
    store.enqueue(job(payload=b"now"))
    assert [j.payload for j in store.claim("q", 5, 30).jobs] == [b"now"]
    assert store.claim("q", 5, 30).jobs == []
    store.enqueue(job(payload=b"later", delay=10))
    assert store.claim("q", 5, 30).jobs == []
    clock.advance(10)
    (later,) = store.claim("q", 5, 2).jobs
    assert store.claim("q", 5, 30).jobs == []
    clock.advance(5)  # its reservation lapsed
    assert [(j.payload, j.lapsed) for j in store.claim("q", 5, 30).jobs] == [(b"later", True)]
    assert later.payload == b"later"
