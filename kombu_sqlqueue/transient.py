"""Transient messages (AMQP ``delivery_mode=1``) written in batches when they come in bursts.

Celery's events and its control messages (pidbox requests and replies) are published
transient: a broker may lose them on a crash, and Celery expects nothing more. A worker run
with ``-E`` publishes three events per task; written one committed row each, they cost more
than the task's own message. :class:`TransientWriter` writes a transient message at once
when none was written in the last ``interval`` seconds (a lone ``revoke`` or reply waits for
nothing), and otherwise collects it and writes the burst with one multi-row INSERT at most
``interval`` seconds later. What it holds is written when the transport closes or the
interpreter exits; a process killed outright loses at most that interval's messages, as
a broker loses transient messages it had not yet handed over.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from time import monotonic

from .exceptions import StoreError
from .store import JobStore, NewJob

logger = logging.getLogger(__name__)

#: Writers with messages possibly held, flushed by the exit hook below.
_WRITERS: weakref.WeakSet[TransientWriter] = weakref.WeakSet()


@atexit.register
def _flush_all_at_exit() -> None:
    for writer in list(_WRITERS):
        writer.flush()


class TransientWriter:
    """Writes transient messages: at once when sporadic, in batches when in bursts."""

    def __init__(self, store: JobStore, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._pending: list[NewJob] = []
        self._last_write = float("-inf")
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        _WRITERS.add(self)

    def put(self, job: NewJob) -> None:
        """Store ``job`` now, or within ``interval`` seconds if one was stored just before."""
        with self._lock:
            now = monotonic()
            immediate = self._stopped or (
                not self._pending and now - self._last_write >= self.interval
            )
            if immediate:
                self._last_write = now
            else:
                self._pending.append(job)
                if len(self._pending) == 1:
                    self._ensure_thread()
                    self._wake.set()
        if immediate:
            self.store.enqueue(job)

    def flush(self) -> None:
        """Write what is held now (one transaction)."""
        with self._flush_lock:
            with self._lock:
                jobs, self._pending = self._pending, []
                self._last_write = monotonic()
            if not jobs:
                return
            try:
                self.store.enqueue_many(jobs)
            except StoreError as exc:
                # Transient by definition; the store already retried a lost connection.
                logger.error("lost %d transient message(s): %s", len(jobs), exc)

    def _ensure_thread(self) -> None:
        # Called under the lock; a forked child starts its own thread on first use.
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(
            target=self._loop, name="kombu-sqlqueue-transient", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            # Collect the burst for one interval, then write it in one statement.
            time.sleep(self.interval)
            self.flush()

    def stop(self) -> None:
        """Write what is held and stop batching (later messages are written at once)."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        self.flush()
        _WRITERS.discard(self)
