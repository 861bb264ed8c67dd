"""Progress of a long run, for a person watching it: a line as each tier (tests/<tier>/)
finishes, and a line at most every ``HEARTBEAT`` seconds saying how far the run is and
which test has been running longest — so a slow test and a hung one look different
before ``pytest-timeout`` decides. ``--durations`` (scripts/test) names the slowest at
the end.

It runs where the reports arrive: in the one pytest process, or, under xdist, in the
controller (the workers send it their ``logstart`` / ``logreport`` events and their
collected ids). Registered by tests/conftest.py.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

#: Seconds between two "still running" lines, at most.
HEARTBEAT = 60.0


def tier_of(nodeid: str) -> str:
    """``tests/e2e/test_x.py::t`` → ``e2e`` (the folder is the tier)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.start = time.monotonic()
        self.last_line = self.start
        self.totals: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.tier_started: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self._collected = False

    # -- what will run ------------------------------------------------------------------

    def _count(self, nodeids: Sequence[str]) -> None:
        if self._collected:  # every xdist worker reports the same collection
            return
        self._collected = True
        self.totals.update(tier_of(n) for n in nodeids)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.config.pluginmanager.hasplugin("dsession"):  # no xdist: this process ran it
            self._count([item.nodeid for item in session.items])

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self._count(ids)

    # -- as it runs ---------------------------------------------------------------------

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        now = time.monotonic()
        self.running[nodeid] = now
        self.tier_started.setdefault(tier_of(nodeid), now)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tier = tier_of(report.nodeid)
        if report.failed:
            self.failed[tier] += 1
        if report.when != "teardown":
            return
        self.running.pop(report.nodeid, None)
        self.done[tier] += 1
        now = time.monotonic()
        if self.totals and self.done[tier] == self.totals[tier]:
            failed = f", {self.failed[tier]} failed" if self.failed[tier] else ""
            self._line(
                f"tier {tier}: {self.done[tier]} tests done{failed} in "
                f"{clock(now - self.tier_started.get(tier, self.start))} — {self._overall(now)}"
            )
        elif now - self.last_line >= HEARTBEAT:
            self._line(f"{self._overall(now)}{self._longest(now)}")

    def _overall(self, now: float) -> str:
        done, total = sum(self.done.values()), sum(self.totals.values())
        share = f" ({100 * done // total}%)" if total else ""
        failed = sum(self.failed.values())
        failures = f", {failed} failed" if failed else ""
        return f"{clock(now - self.start)} elapsed, {done}/{total or '?'} tests{share}{failures}"

    def _longest(self, now: float) -> str:
        if not self.running:
            return ""
        nodeid, since = min(self.running.items(), key=lambda item: item[1])
        return f"; running longest: {nodeid} ({int(now - since)} s)"

    def _line(self, text: str) -> None:
        self.last_line = time.monotonic()
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if reporter._tw.width_of_current_line:  # after a row of dots (xdist's too)
                reporter.write("\n")
            reporter.write_line(f"[progress] {text}")
