"""Kombu's topology, stored: exchange bindings and queue lifetimes (``x-expires``,
``x-message-ttl``), so a publish from any process reaches every bound queue and a
queue nobody uses goes away.

Not part of the job contract: it lives beside it, on the same database and in the
same transactions as its :class:`~.store.JobStore` (``store.topology``).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from .database import QueryRunner
from .executor import Tx
from .model import Route
from .names import validate_queue_name


class Topology:
    """Bindings and queue records of one :class:`~.store.JobStore`'s database."""

    def __init__(self, store: QueryRunner) -> None:
        self._store = store

    # -- exchange bindings ---------------------------------------------------------------

    def bind(self, exchange: str, exchange_type: str, routing_key: str, queue: str) -> None:
        """Store the binding of ``queue`` to ``exchange`` (idempotent). One stored already
        (every publisher and worker binds its queues as it starts) is only read: no write,
        no write lock."""
        validate_queue_name(queue)
        s = self._store
        params = {
            "exchange": exchange,
            "routing_key": routing_key,
            "queue": queue,
            "exchange_type": exchange_type,
            "now": s._now(),
        }
        found = s._run(
            lambda tx: tx.execute(s.q.binding_exists, params).fetchone(),
            read_only=True,
            single=True,
        )
        if found is None:
            s._run(lambda tx: tx.execute(s.q.binding_add, params), single=True)

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        """Remove one stored binding."""
        s = self._store
        params = {"exchange": exchange, "routing_key": routing_key, "queue": queue}
        s._run(lambda tx: tx.execute(s.q.binding_remove, params), single=True)

    def bindings(self, exchange: str) -> list[tuple[str, str, str]]:
        """``(routing_key, queue, exchange_type)`` of every queue bound to ``exchange``."""
        return [(r.routing_key, r.queue, r.exchange_type) for r in self.routes(exchange)]

    def routes(self, exchange: str) -> list[Route]:
        """Every binding of ``exchange``, with its queue's message TTL (one query)."""
        s = self._store
        rows = s._run(
            lambda tx: tx.execute(s.q.binding_list, {"exchange": exchange}).fetchall(),
            read_only=True,
            single=True,
        )
        return [
            Route(str(rk), str(q), str(t), None if ttl is None else int(ttl) / 1000.0)
            for rk, q, t, ttl in rows
        ]

    # -- queue records: lifetime (x-expires) and message TTL (x-message-ttl) ------------

    def declare_queue(
        self, queue: str, expires: float | None, message_ttl: float | None = None
    ) -> None:
        """Record ``queue`` as used now, deleted after ``expires`` seconds unused (None:
        never); its messages live ``message_ttl`` seconds (None: until consumed)."""
        validate_queue_name(queue)
        s = self._store
        params = {
            "name": queue,
            "expires": None if expires is None else max(1, math.ceil(expires)),
            "now": s._now(),
            "message_ttl_ms": None if message_ttl is None else max(0, round(message_ttl * 1000)),
        }

        def work(tx: Tx) -> None:
            tx.execute(s.q.queue_add, params)
            tx.execute(s.q.queue_set, params)

        s._run(work)

    def touch_queues(self, queues: Collection[str]) -> set[str]:
        """Mark ``queues`` as used now; return those that still exist (not swept)."""
        names = sorted(set(queues))
        if not names:
            return set()
        s = self._store
        now = s._now()

        def work(tx: Tx) -> set[str]:
            touched = tx.execute_bound(s.q.queue_touch, {"now": now, "names": names})
            if touched.rowcount == len(names):
                return set(names)
            rows = tx.execute_bound(s.q.queue_present, {"names": names}).fetchall()
            return {str(r[0]) for r in rows}

        return s._run(work)

    def expired_queues(self) -> list[str]:
        """Queues unused for longer than their ``expires``."""
        s = self._store
        rows = s._run(
            lambda tx: tx.execute(s.q.queue_expired, {"now": s._now()}).fetchall(),
            read_only=True,
            single=True,
        )
        return [str(r[0]) for r in rows]

    def discard_expired(self) -> dict[str, int]:
        """Delete unclaimed messages past their TTL in every queue that has a message TTL;
        return how many went per queue. (A message with its own expiry in a queue without
        one is discarded when a consumer reaches it, as AMQP does.)"""
        s = self._store
        now = s._now()
        queues = s._run(
            lambda tx: tx.execute(s.q.queue_with_message_ttl, {}).fetchall(),
            read_only=True,
            single=True,
        )
        discarded: dict[str, int] = {}
        for name, ttl_ms in queues:
            params = {
                "queue": str(name),
                "now": now,
                "created_before": now - math.ceil(int(ttl_ms) / 1000.0) - 1,
            }

            def work(tx: Tx, params: dict[str, Any] = params) -> int:
                return int(tx.execute(s.q.queue_discard_expired, params).rowcount)

            count = s._run(work, single=True)
            if count:
                discarded[str(name)] = count
        return discarded

    def drop_queue(self, queue: str) -> int:
        """Delete ``queue``: its jobs (held ones too), its bindings and its record, in one
        transaction; return how many jobs went."""
        s = self._store
        params = {"queue": queue, "name": queue}

        def work(tx: Tx) -> int:
            tx.execute(s.q.binding_remove_queue, params)
            tx.execute(s.q.queue_forget, params)
            return int(tx.execute(s.q.queue_delete, params).rowcount)

        return s._run(work)
