"""Helpers every test folder shares (importable by basename: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import pytest
from click.testing import CliRunner
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


@dataclass(frozen=True)
class CliRun:
    """What a command run in this process left: its exit status and both streams (the
    fields of :class:`subprocess.CompletedProcess` the tests read)."""

    returncode: int
    stdout: str
    stderr: str


def run_in_process(entry_point: Callable[[], None], *args: str, stdin: str | None = None) -> CliRun:
    """Run a console script's real entry point (``kombu_sqlqueue.ops.cli.run``,
    ``laravel_bridge.cli.run``: argument parsing, the error-to-exit-2 mapping) in this
    process with ``args`` as its argv — about a second cheaper a call than a subprocess,
    which tests keep for what only a process shows (a server it serves, its environment,
    signals). Exceptions the entry point does not map propagate, as a traceback would."""
    runner = CliRunner()
    argv = sys.argv
    code: int = 0
    with runner.isolation(input=stdin) as (out, err, _both):
        sys.argv = ["kombu-sqlqueue", *args]
        try:
            entry_point()
        except SystemExit as exit_:
            status = exit_.code
            code = status if isinstance(status, int) else (0 if status is None else 1)
        finally:
            sys.argv = argv
        stdout, stderr = out.getvalue(), err.getvalue()
    return CliRun(code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))


def kombu_sqlqueue_cli(*args: str, stdin: str | None = None) -> CliRun:
    """``kombu-sqlqueue ARGS``, run in this process (:func:`run_in_process`)."""
    from kombu_sqlqueue.ops.cli import run

    return run_in_process(run, *args, stdin=stdin)
