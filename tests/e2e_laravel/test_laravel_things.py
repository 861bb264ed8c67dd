"""What a Laravel app queues besides jobs — a queued listener, a mailable, a notification, a
closure — put on the queue by Laravel 8.83's own calls (``event()``, ``Mail::to()->queue()``,
``$user->notify()``, ``dispatch(function () {…})``: ``php/things.php``), run by Python handlers
registered under the names Laravel prints, on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from laravel_harness import LaravelQueueHarness, parse_status_lines
from laravel_support import APP_KEY

from laravel_bridge import (
    HandlerRegistry,
    Job,
    LaravelQueue,
    ModelIdentifier,
    PhpObject,
    Worker,
    WorkerOptions,
)
from laravel_bridge.tables import JobTable

pytestmark = pytest.mark.timeout(180)

LISTENER = "App\\Things\\SendShipmentNotification"
MAILABLE = "App\\Things\\OrderShippedMail"
NOTIFICATION = "App\\Things\\InvoicePaid"
CUSTOMER = ModelIdentifier("App\\Things\\Customer", 7, (), "default")


@pytest.fixture
def table(queue: LaravelQueueHarness) -> Iterator[JobTable]:
    """Laravel's ``jobs`` table as the Python worker opens it."""
    laravel = LaravelQueue(queue.db_url, "laravel", create_tables=False)
    yield laravel.table
    laravel.close()


def worker(table: JobTable, registry: HandlerRegistry, lines: list[str], **options: Any) -> Worker:
    options.setdefault("stop_when_empty", True)
    options.setdefault("sleep", 0)
    return Worker(
        table, WorkerOptions(**options), handlers=registry, app_key=APP_KEY, output=lines.append
    )


def test_listener_mailable_and_notification_run_by_handlers_under_the_names_laravel_prints(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    queued = queue.queue_things("listener", "mailable", "notification")
    got: dict[str, Job] = {}
    registry = HandlerRegistry()
    for name in (LISTENER, MAILABLE, NOTIFICATION):
        registry.register(name, lambda job: got.setdefault(job.name, job))
    lines: list[str] = []
    worker(table, registry, lines).run()

    assert sorted(got) == sorted([LISTENER, MAILABLE, NOTIFICATION])
    assert table.size("default") == 0 and queue.failed() == []

    listener = got[LISTENER]
    assert listener.kind == "listener" and listener.uuid == queued["listener"]["uuid"]
    event = listener.event
    assert isinstance(event, PhpObject) and event.class_name == "App\\Things\\OrderShipped"
    assert event["customer"] == CUSTOMER  # SerializesModels' identifier, intact
    assert event["orderId"] == 1001
    assert event["shippedAt"] == datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert listener.arguments == [event] and listener.properties == {}
    assert listener.payload.max_tries == 2  # the listener's $tries, as Laravel wrote it

    mail = got[MAILABLE]
    assert mail.kind == "mailable" and mail.mailable is not None
    assert mail.mailable.class_name == MAILABLE
    assert mail.properties["to"] == [{"name": None, "address": "ada@example.com"}]
    assert mail.properties["cc"] == [{"name": None, "address": "ops@example.com"}]
    assert mail.properties["customer"] == CUSTOMER and mail.properties["orderId"] == 1001
    assert "queue" not in mail.properties  # Queueable's plumbing is not the mailable's own

    note = got[NOTIFICATION]
    assert note.kind == "notification"
    assert note.notifiables == ModelIdentifier("App\\Things\\Customer", [7], (), "default")
    assert note.notification is not None and note.notification.class_name == NOTIFICATION
    assert note.properties["invoiceId"] == 42 and note.properties["amount"] == 99.5
    assert re.fullmatch(r"[0-9a-f-]{36}", note.properties["id"])  # the notification's uuid
    assert note.channels == ["App\\Things\\LogChannel"]

    # The console says what `php artisan queue:work` says for the same rows.
    statuses = parse_status_lines("\n".join(lines))
    assert [(s["status"], s["name"]) for s in statuses] == [
        (status, name)
        for name in (LISTENER, MAILABLE, NOTIFICATION)
        for status in ("Processing", "Processed")
    ]


def test_the_console_lines_are_laravels_own(queue: LaravelQueueHarness, table: JobTable) -> None:
    """The same four things run once by PHP and once by Python print the same names."""
    queue.queue_things("listener", "mailable", "notification", "closure")
    php = queue.work()
    assert php.returncode == 0, php.stderr
    assert len(queue.runs()) == 4  # PHP really ran all four: listener, mail, notification, closure
    queue.queue_things("listener", "mailable", "notification")
    registry = HandlerRegistry()
    for name in (LISTENER, MAILABLE, NOTIFICATION):
        registry.register(name, lambda job: None)
    lines: list[str] = []
    worker(table, registry, lines).run()
    php_names = [(s["status"], s["name"]) for s in php.statuses]
    python_names = [(s["status"], s["name"]) for s in parse_status_lines("\n".join(lines))]
    assert python_names == php_names[:6]
    assert php_names[6][1].startswith("Closure (")


def test_a_handler_under_laravels_wrapper_name_still_gets_what_it_wraps(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    queue.queue_things("listener", "mailable")
    got: list[Job] = []
    registry = HandlerRegistry()
    registry.register("Illuminate\\Events\\CallQueuedListener", got.append)
    registry.register(MAILABLE, got.append)  # the precise name wins over the wrapper's
    registry.register("Illuminate\\Mail\\SendQueuedMailable", lambda job: pytest.fail("wrapper"))
    worker(table, registry, []).run()
    assert [(j.name, j.kind) for j in got] == [(LISTENER, "listener"), (MAILABLE, "mailable")]
    assert got[0].event["orderId"] == 1001


def test_a_queued_closure_is_not_even_reserved_by_default(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    queue.queue_things("closure")
    python = worker(table, HandlerRegistry(), [])
    python.run()
    assert python.jobs_processed == 0 and table.size("default") == 1
    php = queue.work()
    assert [r["class"] for r in queue.runs()] == ["closure"], php.stderr


def test_a_queued_closure_is_left_to_php_and_the_log_says_why(
    queue: LaravelQueueHarness, table: JobTable, caplog: pytest.LogCaptureFixture
) -> None:
    queue.queue_things("closure")
    caplog.set_level(logging.WARNING, logger="laravel_bridge.worker")
    worker(table, HandlerRegistry(), [], unknown_delay=0, claim="all").run()
    assert table.size("default") == 1 and queue.failed() == []
    assert any(
        "is a queued closure, PHP code only a PHP worker can run" in r.getMessage()
        and r.getMessage().startswith("Closure (")
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    time.sleep(2.1)  # handed back for the least delay, 1 s (whole seconds): then PHP runs it
    php = queue.work()
    assert php.returncode == 0, php.stderr
    assert [r["class"] for r in queue.runs()] == ["closure"]
    assert [s["status"] for s in php.statuses] == ["Processing", "Processed"]
    assert table.size("default") == 0


def test_a_queued_closure_failed_by_policy_says_it_is_php_code(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    queued = queue.queue_things("closure")["closure"]
    worker(table, HandlerRegistry(), [], unknown_jobs="fail", claim="all").run()
    (failed,) = queue.failed()
    assert failed["uuid"] == queued["uuid"] and failed["payload"] == queued["payload"]
    assert "is a queued closure: PHP code, which only a PHP worker can run" in failed["exception"]


def test_a_serializes_models_job_with_a_collection_and_relations_keeps_its_identifiers(
    queue: LaravelQueueHarness, table: JobTable
) -> None:
    """What SerializesModels leaves of an Eloquent collection and a model with eager-loaded
    relations reaches the handler as ModelIdentifiers (ids, relations, connection); the
    same job run by PHP restores the models and reloads the relations."""
    queue.queue_things("models")
    got: list[Job] = []
    registry = HandlerRegistry()
    registry.register("App\\Things\\SyncCustomers", got.append)
    worker(table, registry, []).run()
    (job,) = got
    assert job.properties == {
        "customers": ModelIdentifier("App\\Things\\Customer", [7, 8], ("namesakes",), "default"),
        "owner": ModelIdentifier("App\\Things\\Customer", 7, ("namesakes",), "default"),
    }
    queue.queue_things("models")
    php = queue.work()
    assert php.returncode == 0, php.stderr
    (run,) = queue.runs()
    assert (run["customers"], run["loaded"], run["namesakes"]) == (["Ada", "Grace"], True, [7, 9])
