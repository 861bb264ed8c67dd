"""Kombu's own integration base classes (``t/integration/common.py`` of the installed Kombu's
sdist: kombu_sdist.py) run against sqlqueue on every SQL engine.

Each base gets one subclass per engine (``TestBasicFunctionality_sqlite`` …), built below
from ``ADAPTED``: a base's tests run as Kombu wrote them; a test that cannot apply to this
transport is marked ``xfail(strict=True)`` with the reason (``NOT_APPLICABLE``), so it is
noticed if it starts passing. ``test_every_kombu_base_has_subclasses_here`` fails when a
Kombu release adds a base this file does not run. The conftest's terminal summary prints
the counts and every not-applicable test.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kombu_sdist
import pytest
from support import ENGINES, unavailable

#: Kombu's bases this file runs: every class of common.py holding tests (the ``Base*``
#: classes, and ``BasicFunctionality``).
ADAPTED = [
    "BasicFunctionality",
    "BaseExchangeTypes",
    "BaseTimeToLive",
    "BasePriority",
    "BaseMessage",
    "BaseEventLoop",
    "BaseFailover",
]

#: ``(base, test, engines, why)``: a test of Kombu's that cannot apply to this transport.
NOT_APPLICABLE: list[tuple[str, str, tuple[str, ...], str]] = [
    (
        "BaseEventLoop",
        "test_ack_from_another_thread",
        tuple(ENGINES),
        "a synchronous transport (implements.asynchronous=False): register_with_event_loop is "
        "Kombu's no-op, so a Hub never consumes (Celery drives such transports by drain_events)",
    ),
    (
        "BaseFailover",
        "test_failover_switches_to_alternate_url",
        ("sqlite",),
        "it tells the dead URL from the live one by port, and SQLite URLs have none",
    ),
    (
        "BaseFailover",
        "test_failover_switches_to_alternate_url",
        ("mysql",),
        "it needs a dead URL without a port (Kombu keeps a first sqlqueue+ URL whole, port "
        "None): PyMySQL 1.2.4 leaks the socket of a failed Unix-socket connect (ResourceWarning)",
    ),
]


def _kombu_bases(module: Any) -> set[str]:
    """The classes common.py defines that hold tests (``Base*``, ``BasicFunctionality``)."""
    return {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and any(attr.startswith("test_") for attr in dir(value))
    }


def test_every_kombu_base_has_subclasses_here() -> None:
    common = kombu_sdist.common
    if common is None:
        unavailable(kombu_sdist.unavailable_reason)
    version = Path(common.__sdist__).name
    bases = _kombu_bases(common)
    assert not bases - set(ADAPTED), f"{version}'s bases not run here: {bases - set(ADAPTED)}"
    assert not set(ADAPTED) - bases, f"not in {version}: {set(ADAPTED) - bases}"
    stale = [(b, t) for b, t, _, _ in NOT_APPLICABLE if not hasattr(getattr(common, b, None), t)]
    assert not stale, f"NOT_APPLICABLE names tests {version} does not have: {stale}"
    for base in ADAPTED:
        for engine in ENGINES:
            cls = globals().get(_class_name(base, engine))
            assert cls is not None and issubclass(cls, getattr(common, base))


def _class_name(base: str, engine: str) -> str:
    return f"Test{base.removeprefix('Base')}_{engine}"


def _not_applicable(test: Callable[..., Any], reason: str) -> Callable[..., Any]:
    """``test`` (one of Kombu's, shared by every subclass) marked for this class only."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return test(*args, **kwargs)

    return pytest.mark.xfail(strict=True, reason=f"not applicable: {reason}")(wrapper)


def _engine_fixture(engine: str) -> Any:
    @pytest.fixture
    def engine_name(self: Any) -> str:
        return engine

    return engine_name


def _subclasses(common: Any) -> dict[str, type]:
    made: dict[str, type] = {}
    for base_name in ADAPTED:
        base = getattr(common, base_name, None)
        if base is None:  # gone from this Kombu: the guard test says so
            continue
        for engine in ENGINES:
            body: dict[str, Any] = {"engine_name": _engine_fixture(engine)}
            for owner, test, engines, reason in NOT_APPLICABLE:
                if owner == base_name and engine in engines and hasattr(base, test):
                    body[test] = _not_applicable(getattr(base, test), reason)
            name = _class_name(base_name, engine)
            made[name] = type(name, (base,), body)
    return made


if kombu_sdist.common is not None:
    globals().update(_subclasses(kombu_sdist.common))
