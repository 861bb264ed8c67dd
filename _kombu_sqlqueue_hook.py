"""Interpreter-start hook installed by ``kombu_sqlqueue.pth``.

Registers Kombu's ``sqlqueue`` transport alias as soon as ``kombu.transport``
is imported, so ``broker_url = "sqlqueue+sqlite:///queue.db"`` works without
the app importing anything. Costs one small import at start-up; imports
neither Kombu nor kombu_sqlqueue until the app imports Kombu (then only
``kombu_sqlqueue.registration``, for the failover aliases).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

_ALIAS = ("sqlqueue", "kombu_sqlqueue.transport:Transport")
_TARGET = "kombu.transport"


def _register(module: ModuleType) -> None:
    aliases = getattr(module, "TRANSPORT_ALIASES", None)
    if isinstance(aliases, dict):
        aliases.setdefault(*_ALIAS)
        try:  # sqlqueue+<scheme>, for failover lists (a small module: no Kombu import)
            from kombu_sqlqueue.registration import add_aliases
        except ImportError:  # the package was removed and this hook left behind
            return
        add_aliases(aliases)


class _KombuTransportFinder(MetaPathFinder):
    """Wraps the loader of ``kombu.transport`` to add our alias after it runs."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _TARGET:
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _register(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Register now if Kombu is loaded, else when it loads."""
    loaded = sys.modules.get(_TARGET)
    if loaded is not None:
        _register(loaded)
    elif not any(isinstance(f, _KombuTransportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _KombuTransportFinder())


install()
