"""Opening a database's queue tables for an operator: a broker URL or a plain SQLAlchemy
URL, contract v1's tables or an installed layout's, never creating what is not there."""

from __future__ import annotations

from pathlib import Path

from ..exceptions import DatabaseMissing
from ..store import JobStore, StoreOptions, parse_store_url
from ..store.admin import QueueAdmin
from ..store.layouts import CONTRACT_LAYOUT, LayoutSettings, table_layout

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
    url: str, layout: str = CONTRACT_LAYOUT, settings: LayoutSettings | None = None
) -> QueueAdmin:
    """The operator's verbs on the ``layout`` tables at ``url``; tables are verified, never
    created (:class:`~kombu_sqlqueue.exceptions.SchemaMismatch` names what is missing).

    ``layout``: contract v1's (``askr``) or one an installed package registers
    (:mod:`kombu_sqlqueue.store.layouts`), which reads ``settings`` (its table names, its
    reservations' lifetime).
    """
    database = store_url(url)
    options = StoreOptions(create_tables=False)
    if layout != CONTRACT_LAYOUT:
        return table_layout(layout).open_admin(database, settings or LayoutSettings(), options)
    store = JobStore(database, options)
    try:
        store.ensure_ready()
    except BaseException:
        store.close()
        raise
    return store.admin
