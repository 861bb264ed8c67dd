"""Failover URLs: Kombu's ``switch()`` splits ``sqlqueue+<scheme>://…``; we find the URL again."""

from __future__ import annotations

from kombu import Connection
from kombu.transport import resolve_transport

from kombu_sqlqueue.registration import database_url


def test_the_first_url_is_kept_whole_by_kombu() -> None:
    conn = Connection("sqlqueue+sqlite:///a.db;sqlqueue+sqlite:////abs/b.db")
    assert database_url(conn) == "sqlite:///a.db"


def test_a_switched_url_is_the_alternate_it_came_from() -> None:
    first, second = "sqlqueue+memory://a", "sqlqueue+postgresql+psycopg://u:p%40ss@db2:5433/jobs"
    conn = Connection(f"{first};{second}")
    conn.switch(second)
    assert conn.transport_cls == "sqlqueue+postgresql+psycopg"
    assert database_url(conn) == second.removeprefix("sqlqueue+")  # the password as given
    conn.switch("sqlqueue+sqlite:////abs/b.db")
    assert database_url(conn) == "sqlite:////abs/b.db"


def test_a_url_switched_to_outside_the_list_is_rebuilt_from_its_parts() -> None:
    conn = Connection("sqlqueue+memory://a")
    conn.switch("sqlqueue+mysql://user:pw@db3:3307/jobs")
    assert database_url(conn) == "mysql://user:pw@db3:3307/jobs"
    conn.switch("sqlqueue+sqlite:///relative.db")
    assert database_url(conn) == "sqlite:///relative.db"


def test_every_failover_scheme_names_our_transport() -> None:
    for scheme in ("sqlite", "memory", "postgresql", "postgresql+psycopg", "mysql+pymysql"):
        assert resolve_transport(f"sqlqueue+{scheme}") is resolve_transport("sqlqueue")


def test_a_url_of_another_transport_names_no_database() -> None:
    conn = Connection("memory://")
    assert database_url(conn) is None


def test_a_file_url_after_a_server_url_is_found_despite_the_port_kombu_keeps() -> None:
    urls = ["sqlqueue+sqlite:///a.db", "sqlqueue+postgresql://u@db2:5433/jobs",
            "sqlqueue+sqlite:///b.db"]  # fmt: skip
    conn = Connection(";".join(urls))
    conn.switch(urls[1])
    conn.switch(urls[2])
    assert conn.port == 5433  # Kombu's switch() keeps the last port when a URL has none
    assert database_url(conn) == "sqlite:///b.db"
