"""Fixtures of the unit tests: the in-memory store stands in for a database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kombu_sqlqueue.store import memory


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh ``memory://`` store name, forgotten afterwards."""
    name = f"memory://unit-{uuid.uuid4().hex[:12]}"
    yield name
    memory.reset(name)
