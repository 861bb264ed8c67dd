"""Laravel's ``queue:pause`` as a Python consumer honours it: ``laravel-bridge work`` skips a
paused queue as ``php artisan queue:work`` does (Laravel 12.40+), and a Celery worker on a
Laravel queue claims nothing of it.

The pause is a key of the app's ``database`` cache store (:class:`QueuePauses`); what
this module adds is how a consumer reads it: at most once a second per set of queues
(``queue:work`` reads it once per loop, a loop being a job or a ``--sleep``), and a
missing cache table is said once (at info) and then not read again, an unreadable one is
warned of and read again later — a worker never stops for the cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from kombu_sqlqueue.exceptions import SchemaMismatch, SqlQueueError

from .laravel_tables import QueuePauses

logger = logging.getLogger(__name__)

#: Seconds a consumer trusts what it last read of the pauses: a pause reaches every
#: worker within this (and a ``--sleep``, for one idling).
RECHECK_SECONDS = 1.0


class PausedQueues:
    """Which of a consumer's queues are paused, for the Laravel ``connection`` it serves,
    read from the cache table ``opener`` opens (None: pauses are not read)."""

    def __init__(
        self,
        opener: Callable[[], QueuePauses] | None,
        connection: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._opener = opener
        self._table: QueuePauses | None = None
        self.connection = connection
        self._clock = clock
        #: queue → (when read, paused then)
        self._read: dict[str, tuple[float, bool]] = {}

    def of(self, queues: Sequence[str]) -> set[str]:
        """Those of ``queues`` paused now (as of at most :data:`RECHECK_SECONDS` ago): one
        read for the queues not read within that."""
        if self._opener is None or not queues:
            return set()
        now = self._clock()
        stale = [
            q
            for q in dict.fromkeys(queues)
            if now - self._read.get(q, (-1e18,))[0] >= RECHECK_SECONDS
        ]
        if stale:
            try:
                if self._table is None:
                    self._table = self._opener()
                paused = self._table.paused(self.connection, stale)
            except SchemaMismatch as exc:
                # An app whose cache is not the database store has no such table: not a
                # fault (said once, at info: Laravel 8-10 apps mostly keep files or Redis).
                logger.info("queue:pause is not read: %s (a paused queue is still worked)", exc)
                self.close()
                self._opener = None
                return set()
            except SqlQueueError as exc:
                # The last answer stands (none yet: not paused) until the next read.
                logger.warning("could not read the queue pauses: %s", exc)
                paused = {q for q in stale if self._read.get(q, (0.0, False))[1]}
            self._read.update((q, (now, q in paused)) for q in stale)
        return {q for q in queues if self._read[q][1]}

    def close(self) -> None:
        """Release the cache table's connections."""
        if self._table is not None:
            self._table.close()
            self._table = None
