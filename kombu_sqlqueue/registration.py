"""Make Kombu resolve the ``sqlqueue+…`` URL scheme.

Kombu resolves a URL scheme through ``kombu.transport.TRANSPORT_ALIASES``
and, for a URL, refuses dotted import paths (kombu's ``_check_url_transport``),
and it reads no entry points for transports. So the alias must be in that
dict before the app opens its first connection. Two ways put it there:

* ``import kombu_sqlqueue`` (calls :func:`register`), and
* the ``kombu_sqlqueue.pth`` file the wheel installs, which at interpreter
  start adds a tiny import hook (``_kombu_sqlqueue_hook``) that registers the
  alias the moment ``kombu.transport`` is first imported — without importing
  Kombu or this package early. With it, the broker URL is the only change an
  app makes.
"""

from __future__ import annotations

from typing import Any

#: The URL scheme and the transport class it names.
SCHEME = "sqlqueue"
TRANSPORT_PATH = "kombu_sqlqueue.transport:Transport"

#: Database URL schemes, with their usual drivers, also registered as ``sqlqueue+<scheme>``.
#: ``Connection("sqlqueue+postgresql://…")`` splits off ``sqlqueue`` as the transport, but
#: ``Connection.switch()`` — failover to the next URL of a ``;``-separated list — parses
#: the whole scheme as the transport's name (Kombu's own ``sqla+`` fails the same way).
DATABASE_SCHEMES = (
    "sqlite",
    "sqlite+pysqlite",
    "memory",
    "postgresql",
    "postgresql+psycopg",
    "postgresql+psycopg2",
    "mysql",
    "mysql+pymysql",
    "mysql+mysqldb",
    "mariadb",
    "mariadb+pymysql",
)


def register() -> None:
    """Register the ``sqlqueue`` scheme, and ``sqlqueue+<database scheme>`` for
    failover, with Kombu (idempotent)."""
    from kombu.transport import TRANSPORT_ALIASES

    add_aliases(TRANSPORT_ALIASES)


def add_aliases(aliases: dict[str, str]) -> None:
    """Add our schemes to Kombu's ``TRANSPORT_ALIASES`` (also called by the start-up hook)."""
    aliases.setdefault(SCHEME, TRANSPORT_PATH)
    for scheme in DATABASE_SCHEMES:
        aliases.setdefault(f"{SCHEME}+{scheme}", TRANSPORT_PATH)


def database_url(client: Any) -> str | None:
    """The database URL a Kombu connection names, or None if it names none.

    ``Connection("sqlqueue+<url>")`` keeps ``<url>`` whole as its hostname. After
    ``switch()`` to a failover URL, Kombu has split that URL into parts (transport
    ``sqlqueue+<scheme>``, hostname, port …): the URL is then the entry of the
    connection's failover list those parts came from, else rebuilt from the parts.
    (Kombu's ``switch()`` refuses a failover URL with a query string, for every
    transport: options go in ``transport_options``.)
    """
    from kombu.utils.url import parse_url

    hostname = str(client.hostname or "")
    if "://" in hostname:
        return hostname
    transport = client.transport_cls
    prefix = f"{SCHEME}+"
    if not isinstance(transport, str) or not transport.startswith(prefix):
        return None
    # Kombu's switch() keeps the previous URL's port when the next one has none (an SQLite
    # path after a server URL): a port is compared, and used, only where a host names one.
    current = _identity(transport, client.hostname, client.userid, client.virtual_host)
    for alternate in client.alt or ():
        if isinstance(alternate, str) and alternate.startswith(prefix):
            parts = parse_url(alternate)
            found = _identity(
                parts["transport"], parts["hostname"], parts["userid"], parts["virtual_host"]
            )
            if found == current and parts["port"] in (None, client.port):
                return alternate[len(prefix) :]
    from urllib.parse import quote

    credentials = ""
    if client.userid:
        credentials = quote(str(client.userid), safe="")
        if client.password:
            credentials += ":" + quote(str(client.password), safe="")
        credentials += "@"
    host = str(client.hostname or "")
    port = f":{client.port}" if client.port and host else ""
    path = client.virtual_host if client.virtual_host not in (None, "/") else ""
    return f"{transport[len(prefix) :]}://{credentials}{host}{port}/{path}"


def _identity(transport: str, host: Any, user: Any, path: Any) -> tuple[Any, ...]:
    """What tells one failover URL from another (but its port), as Kombu's parts of it."""
    return (transport, host or None, user or None, path or "/")
