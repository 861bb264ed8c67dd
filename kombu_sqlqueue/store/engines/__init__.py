"""One small class per database engine; each overrides the shared base only where it must."""

from __future__ import annotations

from .base import BaseEngine
from .sqlite import SQLiteEngine

#: URL scheme (the part before ``://``, before any ``+driver``) → engine class.
ENGINES: dict[str, type[BaseEngine]] = {"sqlite": SQLiteEngine}

__all__ = ["ENGINES", "BaseEngine", "SQLiteEngine"]
