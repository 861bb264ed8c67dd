"""The operator's verbs (``QueueAdmin``) on every engine and both table layouts: the
figures partition the jobs, peek shows claim order, failed jobs are listed, found, retried
(attempts reset, as Laravel's queue:retry), forgotten and flushed, purge keeps held jobs."""

from __future__ import annotations

import json

import pytest
from support import Clock

from kombu_sqlqueue.store.admin import QueueAdmin
from laravel_bridge import LaravelQueue, Payload
from laravel_bridge.admin import LaravelAdmin
from laravel_bridge.tables import JobTable, PushJob

#: The visibility a pop takes (the laravel layout's retry_after, the askr claim's timeout).
HOLD = 90


def admin_of(table: JobTable) -> QueueAdmin:
    store = table.store  # type: ignore[attr-defined]
    return store.admin if table.layout == "askr" else LaravelAdmin(store, retry_after=HOLD)


def fail_next(table: JobTable, queue: str = "default", reason: str = "boom") -> str:
    job = table.pop(queue, HOLD)
    assert job is not None
    uuid = str(Payload.parse(job.payload).uuid)
    assert table.fail(job, "database", uuid, reason)
    return uuid


def test_stats_partition_the_jobs_and_count_failures(
    table: JobTable, queue: LaravelQueue, clock: Clock
) -> None:
    admin = admin_of(table)
    for n in range(4):
        queue.dispatch("App\\Jobs\\A", {"n": n})
    queue.dispatch("App\\Jobs\\A", {"n": 9}, delay=60)
    queue.dispatch("App\\Jobs\\B", {}, queue="mail")
    clock.advance(5)
    held = table.pop("default", HOLD)
    assert held is not None
    fail_next(table, "mail")

    by_queue = {s.queue: s for s in admin.stats()}
    assert set(by_queue) == {"default", "mail"}
    d = by_queue["default"]
    assert (d.total, d.ready, d.reserved, d.delayed, d.dead_letters) == (5, 3, 1, 1, 0)
    assert d.oldest_seconds == 5
    m = by_queue["mail"]
    assert (m.total, m.ready, m.dead_letters) == (0, 0, 1)
    assert admin.attempts()["default"] == {0: 4, 1: 1}

    clock.advance(HOLD + 1)  # the held job's reservation lapsed: ready again
    d = next(s for s in admin.stats() if s.queue == "default")
    assert (d.ready, d.reserved, d.delayed) == (5, 0, 0)
    assert admin.is_known("mail") and not admin.is_known("nowhere")


def test_peek_shows_claim_order_ready_first_then_delayed(
    table: JobTable, queue: LaravelQueue, clock: Clock, layout: str
) -> None:
    admin = admin_of(table)
    late = queue.dispatch("App\\Jobs\\A", {"n": "late"}, delay=120)
    soon = queue.dispatch("App\\Jobs\\A", {"n": "soon"}, delay=30)
    first = queue.dispatch("App\\Jobs\\A", {"n": "first"})
    second = queue.dispatch("App\\Jobs\\A", {"n": "second"})
    taken_id = queue.dispatch("App\\Jobs\\A", {"n": "taken"}).id
    # The pop takes the next ready job: `first`; the rest keep their order.
    held = table.pop("default", HOLD)
    assert held is not None and held.id == first.id
    shown = [job.id for job in admin.peek("default", 10)]
    assert shown[-2:] == [soon.id, late.id]
    assert shown[0] == second.id and first.id not in shown
    assert [job.id for job in admin.peek("default", 1)] == [second.id]
    assert admin.peek("nowhere", 5) == []
    # A lapsed reservation is ready again, in claim order: contract v1's by age (`first`
    # ahead of `second`, `soon`, due meanwhile, after both), Laravel's by id; `late` is
    # still delayed.
    clock.advance(HOLD + 1)
    shown = [job.id for job in admin.peek("default", 10)]
    ready = [first.id, second.id, taken_id, soon.id]
    assert shown == (sorted(ready) if layout == "laravel" else ready) + [late.id]
    assert [job.id for job in admin.peek("default", 2)] == shown[:2]


def test_failed_jobs_are_listed_found_and_retried_with_attempts_reset(
    table: JobTable, queue: LaravelQueue, clock: Clock
) -> None:
    admin = admin_of(table)
    queue.dispatch("App\\Jobs\\A", {"n": 1})
    queue.dispatch("App\\Jobs\\A", {"n": 2})
    older = fail_next(table, reason="first\ntrace")
    clock.advance(10)
    newer = fail_next(table, reason="second")

    listed = admin.failed()
    assert [f.uuid for f in listed] == [newer, older]  # newest first, as queue:failed
    assert listed[1].exception == "first\ntrace" and listed[1].queue == "default"
    assert listed[0].failed_at - listed[1].failed_at == 10
    (by_uuid,) = admin.find_failed(older)
    (by_id,) = admin.find_failed(str(by_uuid.id))
    assert by_id == by_uuid
    assert admin.find_failed("no-such-job") == []
    assert admin.failed("mail") == []

    assert admin.retry_failed([by_uuid.id]) == 1
    assert admin.retry_failed([by_uuid.id]) == 0  # gone from the failed table
    assert [f.uuid for f in admin.failed()] == [newer]
    back = table.pop("default", HOLD)
    assert back is not None and Payload.parse(back.payload).uuid == older
    assert back.attempts == 1  # reset to 0 by the retry, 1 for this pop


def test_failed_ids_are_every_dead_letter_oldest_first_without_payloads(
    table: JobTable, queue: LaravelQueue
) -> None:
    admin = admin_of(table)
    assert admin.failed_ids() == []
    for n in range(3):
        queue.dispatch("App\\Jobs\\A", {"n": n})
    queue.dispatch("App\\Jobs\\B", {}, queue="mail")
    uuids = [fail_next(table) for _ in range(3)] + [fail_next(table, "mail")]
    by_uuid = {f.uuid: f.id for f in admin.failed(limit=10)}
    ids = admin.failed_ids()
    assert ids == sorted(ids) and ids == [by_uuid[u] for u in uuids]
    assert admin.failed_ids("mail") == [by_uuid[uuids[3]]]
    assert admin.failed_ids("nowhere") == []


def test_retry_restarts_a_retry_until_window_laravel_11_wrote(
    table: JobTable, queue: LaravelQueue, clock: Clock
) -> None:
    if table.layout != "laravel":
        pytest.skip("the payload is rewritten as queue:retry does on Laravel's table")
    admin = admin_of(table)
    data = queue.build("App\\Jobs\\A", {"n": 1}).payload
    payload = json.loads(data)
    payload["createdAt"] = int(clock.now)
    payload["retryUntil"] = int(clock.now) + 600
    payload["attempts"] = 3
    table.push(PushJob("default", json.dumps(payload)))
    fail_next(table)
    clock.advance(3600)
    (failed,) = admin.failed()
    assert admin.retry_failed([failed.id]) == 1
    back = table.pop("default", HOLD)
    assert back is not None
    again = Payload.parse(back.payload).data
    assert again["createdAt"] == int(clock.now)
    assert again["retryUntil"] == int(clock.now) + 600
    assert again["attempts"] == 0


def test_forget_and_flush(table: JobTable, queue: LaravelQueue, clock: Clock) -> None:
    admin = admin_of(table)
    for n in range(4):
        queue.dispatch("App\\Jobs\\A", {"n": n}, queue="mail" if n == 3 else "default")
    old = [fail_next(table), fail_next(table)]
    clock.advance(7 * 86400)
    recent = fail_next(table)
    mail = fail_next(table, "mail")

    (first,) = admin.find_failed(old[0])
    assert admin.forget_failed([first.id]) == 1
    assert admin.forget_failed([first.id]) == 0
    assert admin.flush_failed(older_than=86400, queue="mail") == 0
    assert admin.flush_failed(older_than=86400) == 1  # old[1]
    assert {f.uuid for f in admin.failed()} == {recent, mail}
    assert admin.flush_failed(queue="mail") == 1
    assert admin.flush_failed() == 1
    assert admin.failed() == []


def test_purge_deletes_unheld_jobs_only(table: JobTable, queue: LaravelQueue) -> None:
    admin = admin_of(table)
    for n in range(3):
        queue.dispatch("App\\Jobs\\A", {"n": n})
    queue.dispatch("App\\Jobs\\A", {"n": 9}, delay=60)
    held = table.pop("default", HOLD)
    assert held is not None
    assert admin.purge("default") == 3
    (left,) = admin.stats()
    assert (left.total, left.reserved) == (1, 1)
    assert table.delete(held)
