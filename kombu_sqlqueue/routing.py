"""What a channel remembers of the stored bindings (``askr_bindings``), and for how long.

Every process routes by the same table, so a publish to an exchange needs that
exchange's bindings. Reading them per publish would cost a SELECT each; this cache
keeps a routing table for ``bindings_cache_seconds``, the type of exchanges other
processes declared, each queue's x-message-ttl as read with its binding, and the
topic/fanout routing keys a fresh read found bound to nothing (Celery's events with
no monitor listening). No SQL and no Kombu: the channel reads, this remembers.
"""

from __future__ import annotations

from typing import Any

from .store import Route

#: Bound on the (exchange, routing key) pairs remembered as routed nowhere.
MAX_REMEMBERED_MISSES = 1024


class RoutingCache:
    """Routing tables, exchange types, message TTLs and misses, for ``cache_seconds``."""

    def __init__(self, cache_seconds: float) -> None:
        self.cache_seconds = cache_seconds
        #: exchange -> (monotonic time read, routing table).
        self._tables: dict[str, tuple[float, list[Any]]] = {}
        #: exchange -> type, for exchanges this process never declared.
        self._types: dict[str, str] = {}
        #: (exchange, routing key) -> monotonic time a fresh read found no bound queue.
        self._misses: dict[tuple[str, str], float] = {}
        #: queue -> its x-message-ttl in seconds, as declared here or read with bindings.
        self._message_ttls: dict[str, float] = {}

    # -- routing tables -------------------------------------------------------------

    def fresh_table(self, exchange: str, now: float) -> list[Any] | None:
        """The table of ``exchange`` if it was read less than ``cache_seconds`` ago."""
        cached = self._tables.get(exchange)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        return None

    def read_at(self, exchange: str) -> float | None:
        """When the table of ``exchange`` was read (None: not cached)."""
        cached = self._tables.get(exchange)
        return None if cached is None else cached[0]

    def learn(self, exchange: str, routes: list[Route], declared_type: str | None) -> str:
        """Take in a fresh read of ``exchange``'s bindings: its queues' TTLs, and its type
        (``declared_type`` when this process declared it); return the type."""
        for route in routes:
            # As stored now: a queue declared again without a TTL loses the one read before.
            self.set_message_ttl(route.queue, route.message_ttl)
        if declared_type:
            return declared_type
        type_name = routes[0].exchange_type if routes else self._types.get(exchange, "direct")
        self._types[exchange] = type_name
        return type_name

    def keep(self, exchange: str, read_at: float, table: list[Any]) -> None:
        self._tables[exchange] = (read_at, table)

    def drop_table(self, exchange: str) -> None:
        self._tables.pop(exchange, None)

    def forget(self, exchange: str) -> None:
        """Forget ``exchange``'s table and misses (its bindings changed)."""
        self._tables.pop(exchange, None)
        for key in [k for k in self._misses if k[0] == exchange]:
            del self._misses[key]

    def stored_type(self, exchange: str) -> str | None:
        """The type of an exchange another process declared, once read."""
        return self._types.get(exchange)

    # -- misses ---------------------------------------------------------------------

    def missed_recently(self, exchange: str, routing_key: str, now: float) -> bool:
        missed = self._misses.get((exchange, routing_key))
        return missed is not None and now - missed < self.cache_seconds

    def remember_miss(self, exchange: str, routing_key: str, now: float) -> None:
        if len(self._misses) >= MAX_REMEMBERED_MISSES:
            self._misses.clear()  # unique routing keys must not grow this without bound
        self._misses[(exchange, routing_key)] = now

    def forget_miss(self, exchange: str, routing_key: str) -> None:
        self._misses.pop((exchange, routing_key), None)

    # -- message TTLs ----------------------------------------------------------------

    def message_ttl(self, queue: str) -> float | None:
        return self._message_ttls.get(queue)

    def set_message_ttl(self, queue: str, ttl: float | None) -> None:
        if ttl is None:
            self._message_ttls.pop(queue, None)
        else:
            self._message_ttls[queue] = ttl


__all__ = ["MAX_REMEMBERED_MISSES", "RoutingCache"]
