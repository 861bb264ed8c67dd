"""The PostgreSQL listener's connection string (the integration side: test_listen_url_forms)."""

from __future__ import annotations

import sqlalchemy as sa

from kombu_sqlqueue.store.engines.postgresql import libpq_conninfo


def test_the_listener_connects_with_the_engines_own_parameters() -> None:
    """What the engine's dialect gives libpq is what the listener gives it."""
    from psycopg.conninfo import conninfo_to_dict

    url = sa.make_url(
        "postgresql+psycopg://u:p%20w@/db?host=h1:5432&host=h2:5433&target_session_attrs=read-write"
    )
    assert conninfo_to_dict(libpq_conninfo(url)) == {
        "dbname": "db",
        "user": "u",
        "password": "p w",
        "host": "h1,h2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
    }
