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

#: The URL scheme and the transport class it names.
SCHEME = "sqlqueue"
TRANSPORT_PATH = "kombu_sqlqueue.transport:Transport"


def register() -> None:
    """Register the ``sqlqueue`` scheme with Kombu (idempotent)."""
    from kombu.transport import TRANSPORT_ALIASES

    TRANSPORT_ALIASES.setdefault(SCHEME, TRANSPORT_PATH)
