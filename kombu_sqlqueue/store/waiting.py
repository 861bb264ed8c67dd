"""An idle consumer's wait for jobs, on the engine's wake-up listener when it has one.

PostgreSQL wakes on NOTIFY, one idle consumer of the same queues at a time
(``PgListener``); other engines have no listener and just sleep (they are polled). The
listener is opened on the first wait — a producer never opens one — and tried once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

from .engines.base import Listener


class IdleWaits:
    """A store's idle waits (see the module docstring)."""

    def __init__(self, open_listener: Callable[[], Listener | None]) -> None:
        self._open_listener = open_listener
        self._listener: Listener | None = None
        self._tried = False
        #: Set by :meth:`interrupt`; taken by the wait it ends (a listener's own wait is
        #: interrupted by the listener).
        self._interrupted = threading.Event()

    def wait(
        self, seconds: float, queues: Collection[str] | None, private: Collection[str]
    ) -> bool:
        """Up to ``seconds``; True when woken early by a job on one of ``queues``."""
        if seconds <= 0:
            return False
        if self._listener is None and not self._tried:
            self._tried = True
            self._listener = self._open_listener()
            # An interrupt made before the listener existed reached only the Event (one
            # made after this check finds the listener: interrupt() sets, then looks).
            if self._interrupted.is_set():
                self._interrupted.clear()
                return False
        listener = self._listener
        if listener is not None:
            woken = listener.wait(seconds, queues, private)
            # The listener keeps its own interrupt (taken by the wait it ends); the Event
            # only matters before a listener exists.
            self._interrupted.clear()
            return woken
        if self._interrupted.wait(seconds):
            self._interrupted.clear()
        return False

    def wakes(self) -> bool:
        """True when an enqueue is sure to end some idle consumer's wait."""
        return self._listener is not None and self._listener.wakes()

    def leave(self) -> None:
        """This consumer will not wait for a while: another idle one is woken meanwhile."""
        if self._listener is not None:
            self._listener.leave()

    def interrupt(self) -> None:
        """End the wait under way (from another thread), or the next one, early: it returns
        False, as on a timeout."""
        self._interrupted.set()
        listener = self._listener  # read once: close() may clear it meanwhile
        if listener is not None:
            listener.interrupt()

    def close(self) -> None:
        """Release the listening connection (a later wait opens none again)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
