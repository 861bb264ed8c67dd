"""One small class per database engine; each overrides the shared base only where it must."""

from __future__ import annotations

from .base import BaseEngine
from .mysql import MySQLEngine
from .postgresql import PostgreSQLEngine
from .sqlite import SQLiteEngine

#: URL scheme (the part before ``://``, before any ``+driver``) → engine class.
ENGINES: dict[str, type[BaseEngine]] = {
    "sqlite": SQLiteEngine,
    "postgresql": PostgreSQLEngine,
    "mysql": MySQLEngine,
    "mariadb": MySQLEngine,
}

__all__ = ["ENGINES", "BaseEngine", "MySQLEngine", "PostgreSQLEngine", "SQLiteEngine"]
