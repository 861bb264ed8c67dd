"""Fixtures for laravel_bridge's worker and dispatch, on every engine and both layouts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from laravel_support import APP_KEY
from support import Clock

from laravel_bridge import HandlerRegistry, LaravelQueue
from laravel_bridge.tables import JobTable, open_table


@pytest.fixture(params=["laravel", "askr"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def table(db_url: str, layout: str) -> Iterator[JobTable]:
    t = open_table(db_url, layout)
    yield t
    t.close()


@pytest.fixture
def queue(db_url: str, table: JobTable) -> Iterator[LaravelQueue]:
    yield LaravelQueue(db_url, table.layout, app_key=APP_KEY, table=table)


@pytest.fixture
def registry() -> HandlerRegistry:
    return HandlerRegistry()


@pytest.fixture
def clock(table: JobTable) -> Clock:
    """A :class:`~bridge_support.Clock` the table's store reads (pass it to make_worker too)."""
    c = Clock()
    table.store.clock = c  # type: ignore[attr-defined]
    return c
