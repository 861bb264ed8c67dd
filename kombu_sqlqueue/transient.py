"""Transient messages (AMQP ``delivery_mode=1``) written in batches when they come in bursts.

Celery's events and its control messages (pidbox requests and replies) are published
transient: a broker may lose them on a crash, and Celery expects nothing more. A worker run
with ``-E`` publishes three events per task; written one committed row each, they cost more
than the task's own message. :class:`TransientWriter` writes a transient message at once
when none was written in the last ``interval`` seconds (a lone ``revoke`` or reply waits for
nothing), and otherwise holds it and writes the burst with one multi-row INSERT at most
``interval`` seconds later. A persistent message is written after what is held (one queue
keeps its publish order). What is held is written when the transport closes and when the
interpreter exits normally; a process killed outright (or leaving by ``os._exit``) loses at
most that interval's messages, as a broker may lose transient messages (the exit and fork hooks
are in ``lifecycle.py``).
"""

from __future__ import annotations

import logging
from time import monotonic

from .bursts import BurstWriter
from .exceptions import StoreError
from .store import JobContract, NewJob

logger = logging.getLogger(__name__)


class TransientWriter(BurstWriter):
    """Writes transient messages: at once when sporadic, in batches when in bursts."""

    thread_name = "kombu-sqlqueue-transient"

    def __init__(self, store: JobContract, interval: float) -> None:
        self.store = store
        super().__init__(interval)

    def _reset_held(self) -> None:
        self._pending: list[NewJob] = []

    def put(self, job: NewJob, *, hold: bool = False) -> None:
        """Store ``job`` now, or within ``interval`` seconds if one was stored just before
        (``hold``: always later, by the writer thread)."""
        with self._lock:
            now = monotonic()
            due = not self._pending and now - self._last_write >= self.interval
            if self._stopped or (due and not hold):
                self._last_write = now
            else:
                self._pending.append(job)
                self._write_soon()
                return
        self.write_through(job)

    def write_through(self, job: NewJob, once: tuple[str, float] | None = None) -> bool:
        """Store ``job`` now, after the messages held before it; errors are the caller's.

        ``once``: (identity, window) — write it only if the identity was not first written
        within the window (``enqueue_once``). Returns False when it wrote nothing."""
        with self._write_lock:
            with self._lock:
                held, self._pending = self._pending, []
            if held:
                self._write(held)
            if once is None:
                self.store.enqueue(job)
                return True
            return self.store.enqueue_once(job, *once) is not None

    def flush(self) -> None:
        """Write what is held now (one statement)."""
        with self._write_lock:
            with self._lock:
                held, self._pending = self._pending, []
                self._last_write = monotonic()
            if held:
                self._write(held)

    def _write(self, jobs: list[NewJob]) -> None:
        try:
            self.store.enqueue_many(jobs)
        except StoreError as exc:
            # Transient by definition; the store already retried a lost connection.
            logger.error("lost %d transient message(s): %s", len(jobs), exc)
        except Exception:
            # One bad message must not take the others with it: write them one by one.
            for job in jobs:
                try:
                    self.store.enqueue(job)
                except Exception as exc:
                    logger.error("lost a transient message to queue %r: %s", job.queue, exc)
