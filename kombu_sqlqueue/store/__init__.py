"""The job-table store: contract-v1 SQL over SQLAlchemy Core. No Kombu inside."""

from __future__ import annotations

from .backoff import BackoffPolicy
from .database import Database, StoreOptions, TableStore, parse_store_url
from .model import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_CLAIM,
    Backlog,
    ClaimedJob,
    DeadLetter,
    NewJob,
    Receipt,
    Route,
)
from .names import MAX_QUEUE_NAME_LENGTH, validate_queue_name
from .store import ClaimResult, JobStore
from .topology import Topology

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_CLAIM",
    "MAX_QUEUE_NAME_LENGTH",
    "Backlog",
    "BackoffPolicy",
    "ClaimResult",
    "ClaimedJob",
    "Database",
    "DeadLetter",
    "JobStore",
    "NewJob",
    "Receipt",
    "Route",
    "StoreOptions",
    "TableStore",
    "Topology",
    "parse_store_url",
    "validate_queue_name",
]
