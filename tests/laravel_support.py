"""What the Laravel-side test folders share (``integration_bridge/``, ``e2e_laravel/``,
``e2e_php_codec/``): the app key, what to do when PHP or Laravel lacks a part, and a plain SQL
engine on a test database.

Importable by basename: ``tests/conftest.py`` puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from support import unavailable

from kombu_sqlqueue.store import parse_store_url

#: A Laravel app key (32 bytes, base64, as in ``.env``) for encrypted jobs, PHP's and ours.
APP_KEY = "base64:" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="

#: Debian's Laravel 8.83 (``php-laravel-framework``).
LARAVEL_AUTOLOAD = Path("/usr/share/php/Illuminate/autoload.php")


def require_laravel() -> None:
    """:func:`unavailable` when Debian's Laravel is not installed."""
    if not LARAVEL_AUTOLOAD.exists():
        unavailable("Laravel is not installed (apt-get install php-laravel-framework)")


def sql_engine(db_url: str) -> sa.Engine:
    """An engine on a test database for raw SQL, with the package's drivers (the fixtures'
    URLs name none). The caller disposes of it."""
    return sa.create_engine(parse_store_url(db_url)[1])


def unique_locks(db_url: str) -> list[str]:
    """The keys held in Laravel's database cache store's lock table (``cache_locks``)."""
    engine = sql_engine(db_url)
    try:
        with engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(sa.text("SELECT ks.key FROM cache_locks ks")))
    finally:
        engine.dispose()


def batch_row(db_url: str, batch_id: str) -> dict[str, Any]:
    """The ``job_batches`` row of ``batch_id``, as Laravel's tables hold it."""
    engine = sql_engine(db_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT * FROM job_batches WHERE id = :id"), {"id": batch_id}
            )
            return dict(found.one()._mapping)
    finally:
        engine.dispose()
