"""The PostgreSQL listener's connection string (the integration side: test_listen_url_forms)."""

from __future__ import annotations

import sqlalchemy as sa

from kombu_sqlqueue.store.engines.postgresql import libpq_conninfo, libpq_network_params


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


def test_the_listener_and_the_engine_give_up_a_silent_server_after_the_bound() -> None:
    """Keepalives, the user timeout and the connect timeout come from network_timeout,
    on the engine's connections and the listener's alike; a value the URL sets wins."""
    from psycopg.conninfo import conninfo_to_dict

    from kombu_sqlqueue.store.network import SilenceBound

    url = sa.make_url("postgresql+psycopg://u@h/db?keepalives_idle=7")
    info = conninfo_to_dict(libpq_conninfo(url, SilenceBound(12)))
    assert {k: info[k] for k in info if k not in ("dbname", "user", "host")} == {
        "connect_timeout": "12",
        "keepalives": "1",
        "keepalives_idle": "7",  # the URL's
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "12000",
    }
    with_timeout = sa.make_url("postgresql://h/db?connect_timeout=5")
    assert libpq_network_params(with_timeout, SilenceBound(12)) == {
        "keepalives": "1",
        "keepalives_idle": "6",
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "12000",
    }
