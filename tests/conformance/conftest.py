"""The conformance suite's engines: ``ENGINES`` (tests/support.py) and the in-memory store.

The in-memory store is an engine here only: the integration and e2e tiers run real
processes, and its data lives in one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support import ENGINES, MEMORY

from kombu_sqlqueue.store import JobContract, StoreOptions, memory, open_store

#: The SQL engines, and the in-memory store.
CONFORMANCE_ENGINES = [*ENGINES, MEMORY]


@pytest.fixture(params=CONFORMANCE_ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(engine_name: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh ``memory://`` name, else tests/conftest.py's empty database."""
    if engine_name != MEMORY:
        yield str(request.getfixturevalue("db_url"))  # the overridden fixture: a database
        return
    url = f"memory://t_{uuid.uuid4().hex[:16]}"
    yield url
    memory.reset(url)


@pytest.fixture
def store(db_url: str) -> Iterator[JobContract]:
    s = open_store(db_url, StoreOptions())
    yield s
    s.close()
