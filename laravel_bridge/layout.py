"""The ``laravel`` table layout, as the operator's tools reach it: Laravel's own
``jobs``/``failed_jobs``, registered with ``kombu_sqlqueue`` by the entry point
``kombu_sqlqueue.layouts: laravel`` (``kombu-sqlqueue stats URL --layout laravel``).

It satisfies ``kombu_sqlqueue.store.layouts.TableLayout``; ``kombu_sqlqueue`` never
imports this package.
"""

from __future__ import annotations

from typing import ClassVar

from kombu_sqlqueue.store.admin import QueueAdmin
from kombu_sqlqueue.store.database import StoreOptions, schema_ddl
from kombu_sqlqueue.store.layouts import JobSummary, LayoutSettings, short

from .admin import LaravelAdmin
from .exceptions import LaravelBridgeError
from .laravel_tables import LaravelTableStore, QueuePauses
from .payload import Payload
from .sql import laravel_tables

__all__ = ["LaravelLayout", "laravel", "summarize"]


def summarize(payload: bytes | str) -> JobSummary:
    """A Laravel payload as a person reads it: its class and its command's properties;
    ``unreadable`` with the reason when it is not one. Never raises."""
    try:
        parsed = Payload.parse(payload)
    except LaravelBridgeError as exc:
        return JobSummary("unreadable", "-", str(exc))
    except Exception as exc:  # whatever the row holds: still only a summary
        return JobSummary("unreadable", "-", f"{type(exc).__name__}: {exc}")
    name = parsed.display_name or parsed.job
    if parsed.is_encrypted:
        return JobSummary("laravel", name, "(encrypted: needs APP_KEY)")
    rules = _rules(parsed)
    try:
        properties = parsed.command().properties
    except Exception as exc:  # a command PHP wrote that we cannot read: still a summary
        return JobSummary("laravel", name, f"(command unreadable: {exc}){rules}")
    return JobSummary("laravel", name, short(properties) + rules)


def _rules(parsed: Payload) -> str:
    """The retry rules the payload carries, as Laravel names them (``tries=3
    backoff=10,30``), after the properties; "" when it carries none."""
    data = parsed.data
    shown = [
        f"{label}={str(data[key])[:40]}"
        for label, key in (
            ("tries", "maxTries"),
            ("maxExceptions", "maxExceptions"),
            ("backoff", "backoff"),
            ("timeout", "timeout"),
            ("retryUntil", "retryUntil"),
        )
        if data.get(key) is not None
    ]
    return f" ({' '.join(shown)})" if shown else ""


class LaravelLayout:
    """Laravel's ``jobs``/``failed_jobs`` (``--jobs-table``, ``--failed-table``: the app's
    ``queue.connections.database.table`` and ``queue.failed.table``; ``--retry-after``: the
    connection's ``retry_after``, 90 by default as in ``config/queue.php``; ``--connection``,
    ``--cache-table``, ``--cache-prefix``: whose queues ``queue:pause`` pauses, and the
    database cache store's table and ``cache.prefix`` its keys are in: ``database``,
    ``cache``, ``laravel_cache``)."""

    name: ClassVar[str] = "laravel"
    description: ClassVar[str] = "Laravel's jobs/failed_jobs"
    errors: ClassVar[tuple[type[Exception], ...]] = (LaravelBridgeError,)

    @staticmethod
    def _tables(settings: LayoutSettings) -> tuple[str, str]:
        return settings.jobs_table or "jobs", settings.failed_table or "failed_jobs"

    def open_admin(self, url: str, settings: LayoutSettings, options: StoreOptions) -> QueueAdmin:
        jobs, failed = self._tables(settings)
        tables = LaravelTableStore(url, jobs_table=jobs, failed_table=failed, options=options)
        try:
            tables.ensure_ready()
        except BaseException:
            tables.close()
            raise
        retry_after = 90.0 if settings.retry_after is None else settings.retry_after
        pauses = QueuePauses(
            tables.database,
            settings.cache_table or "cache",
            prefix="laravel_cache" if settings.cache_prefix is None else settings.cache_prefix,
        )
        return LaravelAdmin(
            tables,
            retry_after,
            pauses=pauses,
            connection=settings.connection or "database",
            prefix_given=settings.cache_prefix is not None,
        )

    def create_tables(self, url: str, settings: LayoutSettings) -> str:
        jobs, failed = self._tables(settings)
        tables = LaravelTableStore(url, jobs_table=jobs, failed_table=failed)
        try:
            tables.create_schema()
        finally:
            tables.close()
        return f"tables ready: {jobs}, {failed} (Laravel's database queue)"

    def ddl(self, url: str, settings: LayoutSettings) -> list[str]:
        jobs, _failed = laravel_tables(*self._tables(settings))
        return schema_ddl(url, jobs.metadata)

    def summarize(self, payload: bytes | str) -> JobSummary:
        return summarize(payload)


#: The entry point's object.
laravel = LaravelLayout()
