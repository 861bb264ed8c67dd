"""Helpers every test folder shares (importable by basename: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

from typing import NoReturn

import pytest
from servers import in_ci

#: The SQL engines the parametrized suites run on (the conformance suite adds the in-memory
#: store: tests/conformance/conftest.py).
ENGINES = ["sqlite", "postgresql", "mysql"]
#: The in-memory store's name as an engine of the conformance suite.
MEMORY = "memory"


def unavailable(message: str) -> NoReturn:
    """Something a test needs (a server, a program, root) is missing: fail under
    ``CI=true`` (CI installs and starts everything), skip elsewhere."""
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


#: Where a test's :class:`Clock` starts (2027-01-15 08:00:00 UTC).
T0 = 1_800_000_000.0


class Clock:
    """A clock the test moves (``clock.now = …``), for stores and workers."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
