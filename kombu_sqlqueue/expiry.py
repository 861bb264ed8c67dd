"""Queues with a lifetime (AMQP's ``x-expires``): kept alive while their process lives.

Celery declares its control and event queues with ``expires`` (a worker's pidbox queue:
10 s, a reply queue: 10 s, a monitor's event queue: 60 s), so a process that dies without
deleting them — SIGKILL, a lost host — does not leave a queue that every broadcast keeps
adding to. The store records such a queue with its lifetime and the last time it was used;
:class:`QueueKeeper`, one daemon thread per transport, marks the queues its process declared
as used a few times per lifetime and deletes, with their jobs and bindings, queues nobody
has used for longer (whoever's they were). A queue of this process found swept (the process
stalled past the lifetime) is declared and bound again.

The keeper also discards the unconsumed messages that outlived their queue's message TTL
(``x-message-ttl``; Celery's event queues: 5 s, control queues: 300 s), whoever's queue it
is, so a queue nobody reads does not keep them; consumers discard them on sight too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .exceptions import StoreError
from .store import JobContract

logger = logging.getLogger(__name__)

#: Bounds of the keeper's period (a third of the shortest lifetime it watches).
MIN_PERIOD = 0.5
MAX_PERIOD = 30.0


class QueueKeeper:
    """Keeps this process's expiring queues alive and sweeps everybody's expired ones."""

    def __init__(self, store: JobContract) -> None:
        self.store = store
        #: queue -> (lifetime in seconds, re-declare-and-bind callback)
        self._watched: dict[str, tuple[float, Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, queue: str, expires: float, restore: Callable[[], None]) -> None:
        """Keep ``queue`` (lifetime ``expires`` s) alive; ``restore`` re-declares it."""
        with self._lock:
            self._watched[queue] = (expires, restore)
        self.ensure_started()
        self._wake.set()

    def forget(self, queue: str) -> None:
        """Stop keeping ``queue`` alive (it was deleted)."""
        with self._lock:
            self._watched.pop(queue, None)

    def period(self) -> float:
        with self._lock:
            shortest = min((e for e, _ in self._watched.values()), default=MAX_PERIOD * 3)
        return min(max(shortest / 3, MIN_PERIOD), MAX_PERIOD)

    def run_once(self) -> None:
        """Touch the watched queues, restore any that were swept, sweep expired ones."""
        with self._lock:
            watched = dict(self._watched)
        if watched:
            alive = self.store.topology.touch_queues(watched)
            for queue in set(watched) - alive:
                logger.warning("queue %r had expired while this process lived; restoring", queue)
                watched[queue][1]()
        for queue in self.store.topology.expired_queues():
            if queue in watched:
                continue
            dropped = self.store.topology.drop_queue(queue)
            logger.info("deleted expired queue %r (%d message(s))", queue, dropped)
        for queue, count in self.store.topology.discard_expired().items():
            logger.info("discarded %d message(s) of queue %r past their TTL", count, queue)

    def ensure_started(self) -> None:
        """Run the upkeep thread (it also discards expired messages of every queue)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name="kombu-sqlqueue-queues", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except StoreError as exc:  # the next round tries again
                logger.warning("expiring-queue upkeep failed: %s", exc)
            self._wake.wait(self.period())
            self._wake.clear()

    def stop(self, wait: float = 5.0) -> None:
        """Stop; wait up to ``wait`` seconds for a round under way (see Renewer.stop)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)
