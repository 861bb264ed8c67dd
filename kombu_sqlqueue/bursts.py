"""Writes held while a burst lasts and written together: the thread, fork and exit rules
shared by the transient-message writer (``transient.py``) and the ack batcher (``acks.py``).

A :class:`BurstWriter` holds what it is given while writes come close together and writes it
in one statement at most ``interval`` seconds later, from its own daemon thread (started on
the first held write, and again in a forked child, whose threads did not survive). What is
held is written when :meth:`~BurstWriter.stop` is called and at interpreter exit
(``lifecycle.py``); a forked child forgets what its parent held, the parent's to write.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

from . import lifecycle

logger = logging.getLogger(__name__)


class BurstWriter(ABC):
    """What a writer that holds bursts shares: its locks, its thread, stop and fork."""

    #: The writer thread's name (seen in thread dumps).
    thread_name = "kombu-sqlqueue-writer"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._reset()
        lifecycle.track_writer(self)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's held writes are the parent's to write (a child
        writing them too would duplicate them), and its locks may have been held by a
        thread that does not exist here."""
        self._reset()

    def _reset(self) -> None:
        self._last_write = float("-inf")
        self._lock = threading.Lock()  # guards what is held and _last_write
        self._write_lock = threading.Lock()  # one write at a time: order is kept
        self._wake = threading.Event()
        self._stop_event = threading.Event()  # set by stop(): a gathering wait ends at once
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._reset_held()

    @abstractmethod
    def _reset_held(self) -> None:
        """Start holding nothing (at construction and in a forked child)."""

    @abstractmethod
    def flush(self) -> None:
        """Write what is held now."""

    def _write_soon(self) -> None:
        """Under ``_lock``, having held a write: have the thread write it within the interval."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
            self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            # Gather what comes within one interval (or until another caller writes it
            # first), then write it.
            self._stop_event.wait(self.interval)
            try:
                self.flush()
            except Exception:  # the thread must outlive any one batch
                logger.exception("%s: writing what was held failed", self.thread_name)

    def stop(self) -> None:
        """Write what is held, and write everything later at once."""
        with self._lock:
            self._stopped = True
        self._stop_event.set()
        self._wake.set()
        self.flush()
        lifecycle.untrack_writer(self)
