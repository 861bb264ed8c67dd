"""kombu-sqlqueue: a Kombu/Celery broker over an ordinary SQL database.

``broker_url = "sqlqueue+sqlite:///queue.db"`` is all a Celery app changes.
Importing this package registers the ``sqlqueue`` URL scheme with Kombu; an
installed copy also registers it at interpreter start (see README).
"""

from __future__ import annotations

from ._version import __version__
from .registration import register

try:
    # Registers the alias when Kombu loads, so importing the store alone (laravel_bridge
    # does) does not import Kombu.
    import _kombu_sqlqueue_hook  # noqa: F401
except ImportError:  # a copy on sys.path without its hook module
    register()


def __getattr__(name: str) -> object:
    # enlist and complete load the store (SQLAlchemy): only for those who use them, not at
    # every import.
    if name == "enlist":
        from .store.enlist import enlist

        return enlist
    if name == "complete":
        from .completion import complete

        return complete
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "complete", "enlist", "register"]
