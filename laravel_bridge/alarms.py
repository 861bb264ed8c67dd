"""A worker's signals: SIGTERM and SIGINT stop it after the current job (as ``php artisan
queue:work`` does), SIGALRM ends a job that runs past its timeout.

Signals reach the main thread only: a worker run in another thread installs nothing, and
its jobs' timeouts cannot be enforced (the worker says so when it starts).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

logger = logging.getLogger("laravel_bridge.worker")

#: The longest timer a job's timeout sets (68 years: ``setitimer`` refuses far more).
MAX_TIMEOUT = 2**31 - 1


class JobTimedOut(BaseException):
    """The job ran past its timeout.

    A ``BaseException``, like ``KeyboardInterrupt``, so a handler's
    ``except Exception`` does not swallow it.
    """


# The name failed_jobs rows have always carried for it (and still importable from there).
JobTimedOut.__module__ = "laravel_bridge.worker"


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class WorkerSignals:
    """Stop on SIGTERM/SIGINT (``on_stop``), and the per-job alarm."""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self.on_stop = on_stop
        #: The running job's timeout in seconds (0: none running, or no limit).
        self._timeout = 0
        #: The alarm's handler is installed for the whole run (see :meth:`installed`).
        self._alarm_ready = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """For a worker's run: the stop signals' handler, and the alarm's, installed once
        (not once per job); the previous handlers restored after."""
        if not in_main_thread():
            yield
            return

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            logger.info("received %s: stopping after the current job", signal.Signals(signum).name)
            self.on_stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_alarm)
        self._alarm_ready = True
        try:
            yield
        finally:
            self._alarm_ready = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _on_alarm(self, _signum: int, _frame: FrameType | None) -> None:
        if self._timeout:
            raise JobTimedOut(f"the job ran longer than its timeout of {self._timeout} s")

    @contextlib.contextmanager
    def time_limit(self, seconds: int) -> Iterator[None]:
        """Raise :class:`JobTimedOut` in the handler after ``seconds`` (main thread only)."""
        if seconds <= 0 or not in_main_thread():
            yield
            return
        seconds = min(seconds, MAX_TIMEOUT)

        self._timeout = seconds
        # Outside a run (a job processed directly) the handler is installed per job.
        previous = None if self._alarm_ready else signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._timeout = 0
            if previous is not None:
                signal.signal(signal.SIGALRM, previous)
