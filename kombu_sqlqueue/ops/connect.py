"""Opening a database's queue tables for an operator: a broker URL or a plain SQLAlchemy
URL, either table layout, never creating what is not there."""

from __future__ import annotations

from pathlib import Path

from ..exceptions import ConfigurationError, DatabaseMissing
from ..store import JobStore, StoreOptions, parse_store_url
from ..store.admin import QueueAdmin

#: The table layouts: contract v1's ``askr_*`` tables, or Laravel's ``jobs``/``failed_jobs``.
LAYOUTS = ("askr", "laravel")
_PREFIX = "sqlqueue+"


def store_url(url: str, *, must_exist: bool = True) -> str:
    """The SQLAlchemy URL in a broker URL (``sqlqueue+sqlite:///q.db`` → ``sqlite:///q.db``);
    a plain SQLAlchemy URL as it is. :class:`InvalidURL` for ``sqlqueue://`` (no database)
    or a database this package does not serve; :class:`DatabaseMissing` for an SQLite file
    that does not exist, unless not ``must_exist`` (``create-tables`` makes it)."""
    url = url.strip()
    url = url.removeprefix(_PREFIX)
    engine_cls, parsed = parse_store_url(url)
    if engine_cls.name == "sqlite" and must_exist:
        path = parsed.database or ""
        in_file = path not in ("", ":memory:") and not path.startswith("file:")
        if in_file and not Path(path).exists():
            raise DatabaseMissing(
                f"database file {path} does not exist (nothing was created); check the "
                "path, or create the tables with `kombu-sqlqueue create-tables URL`"
            )
    return url


def open_admin(
    url: str,
    layout: str = "askr",
    *,
    jobs_table: str = "jobs",
    failed_table: str = "failed_jobs",
    retry_after: float = 90,
) -> QueueAdmin:
    """The operator's verbs on the ``layout`` tables at ``url``; tables are verified, never
    created (:class:`~kombu_sqlqueue.exceptions.SchemaMismatch` names what is missing).

    ``jobs_table``, ``failed_table`` and ``retry_after`` are Laravel's (layout ``laravel``):
    its ``queue.connections.database.table``, ``queue.failed.table`` and ``retry_after``.
    """
    database = store_url(url)
    options = StoreOptions(create_tables=False)
    if layout == "askr":
        store = JobStore(database, options)
        try:
            store.ensure_ready()
        except BaseException:
            store.close()
            raise
        return store.admin
    if layout == "laravel":
        from laravel_bridge.laravel_tables import LaravelAdmin, LaravelTableStore

        tables = LaravelTableStore(
            database, jobs_table=jobs_table, failed_table=failed_table, options=options
        )
        try:
            tables.ensure_ready()
        except BaseException:
            tables.close()
            raise
        return LaravelAdmin(tables, retry_after)
    raise ConfigurationError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
