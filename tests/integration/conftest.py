"""Fixtures of the Kombu integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kombu import Connection


@pytest.fixture
def connect(broker_url: str) -> Iterator[Callable[[], Connection]]:
    """Open Kombu connections to the test's broker; all released at the end."""
    opened: list[Connection] = []

    def make() -> Connection:
        c = Connection(broker_url)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.release()
