"""The job-table store: contract-v1 SQL over SQLAlchemy Core (``JobStore``), its in-memory
twin for tests and examples (``MemoryJobStore``), and the interface both satisfy
(``JobContract``, opened by URL with ``open_store``). No Kombu inside."""

from __future__ import annotations

from .backoff import BackoffPolicy
from .contract import DeliveryStore, JobContract, TopologyContract, open_store
from .controls import QueueControl, Rate
from .database import Database, StoreOptions, TableStore, parse_store_url
from .memory import MemoryJobStore, MemoryTopology
from .model import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_CLAIM,
    Backlog,
    ClaimedJob,
    ClaimResult,
    DeadLetter,
    NewJob,
    Receipt,
    Route,
)
from .names import MAX_QUEUE_NAME_LENGTH, validate_queue_name
from .store import JobStore
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
    "DeliveryStore",
    "JobContract",
    "JobStore",
    "MemoryJobStore",
    "MemoryTopology",
    "NewJob",
    "QueueControl",
    "Rate",
    "Receipt",
    "Route",
    "StoreOptions",
    "TableStore",
    "Topology",
    "TopologyContract",
    "open_store",
    "parse_store_url",
    "validate_queue_name",
]
