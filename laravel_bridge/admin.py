"""The operator's verbs on Laravel's ``jobs``/``failed_jobs`` (:class:`LaravelAdmin`): what
``queue:failed``, ``queue:retry``, ``queue:forget``, ``queue:flush`` and ``queue:clear`` do,
as ``kombu_sqlqueue.store.admin.QueueAdmin`` (the ``laravel`` layout's, ``layout.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kombu_sqlqueue.exceptions import ConfigurationError, SchemaMismatch
from kombu_sqlqueue.store.admin import (
    FailedJob,
    PeekAfter,
    QueueStats,
    WaitingJob,
    below,
    cutoff,
    group_attempts,
    ids_issued,
    merge_stats,
    per_row,
    read_rows,
    row_ref,
)
from kombu_sqlqueue.store.controls import Rate, check_pause
from kombu_sqlqueue.store.executor import Tx
from kombu_sqlqueue.store.model import Holding
from kombu_sqlqueue.store.names import validate_queue_name

from .exceptions import LaravelBridgeError, PayloadError
from .laravel_tables import FOREVER_SECONDS, LaravelTableStore, QueuePauses
from .payload import Payload

__all__ = ["LaravelAdmin"]


class LaravelAdmin:
    """``kombu_sqlqueue.store.admin.QueueAdmin`` over Laravel's ``jobs``/``failed_jobs``
    (what ``queue:failed``, ``queue:retry``, ``queue:forget``, ``queue:flush`` and
    ``queue:clear`` do, plus the figures Laravel's ``queue:monitor`` would want).

    ``retry_after`` is the connection's: a reservation older than that counts as ready
    (Laravel's workers take it back), a younger one as reserved. A retried job is pushed
    as ``queue:retry`` pushes it (attempts 0, ``Payload.for_retry``) and forgotten in the
    same transaction.
    """

    layout = "laravel"

    def __init__(
        self,
        store: LaravelTableStore,
        retry_after: float = 90,
        *,
        pauses: QueuePauses | None = None,
        connection: str = "database",
        prefix_given: bool = True,
    ) -> None:
        self._store = store
        self.retry_after = retry_after
        self.tables = (store.jobs_table.name, store.failed_table.name)
        #: The cache table ``queue:pause`` writes, and the connection whose queues it is
        #: for (None: the app keeps no database cache store here; pauses are not shown).
        self._pauses = pauses
        self.connection = connection
        #: The operator named the cache prefix: a pause is written under it (only then:
        #: Laravel's ``queue:resume`` forgets the one key its own prefix makes).
        self._prefix_given = prefix_given

    def _params(self) -> dict[str, Any]:
        now = self._store._now()
        return {"now": now, "expired": now - int(self.retry_after)}

    def stats(self) -> list[QueueStats]:
        s, params = self._store, self._params()

        def work(tx: Tx) -> tuple[list[Any], list[Any]]:
            jobs = tx.execute(s.q.stats, params).fetchall()
            return jobs, tx.execute(s.q.failed_counts).fetchall()

        jobs, dead = s._run(work, read_only=True)
        found = {row.queue: row for row in merge_stats(params["now"], jobs, dead)}
        for queue, until in self._paused().items():
            row = found.get(queue, QueueStats(queue))
            forever = until - params["now"] > FOREVER_SECONDS - 86400  # pause(), not pauseFor()
            found[queue] = replace(row, paused=True, resume_at=None if forever else until)
        return [found[name] for name in sorted(found)]

    def _paused(self) -> dict[str, int]:
        """The connection's paused queues → when their key expires; none when the cache
        table is not in this database."""
        if self._pauses is None:
            return {}
        try:
            return self._pauses.pauses(self.connection)
        except SchemaMismatch:
            return {}

    def _pause_table(self) -> QueuePauses:
        if self._pauses is None:
            raise LaravelBridgeError("give the database cache store's table (--cache-table)")
        return self._pauses

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """``php artisan queue:pause connection:queue`` (Laravel 12.40+): the cache key
        ``queue:work`` reads, forever or for ``for_seconds`` (``QueueManager::pauseFor``);
        when its key expires, None for a pause until resumed."""
        seconds = None
        if for_seconds is not None:
            seconds = check_pause(queue, for_seconds, 0.0)
        if not self._prefix_given:
            raise LaravelBridgeError(
                "give the app's cache prefix (--cache-prefix, config('cache.prefix')): an app "
                "named Laravel has laravel_cache (8.x), laravel_cache_ (9.x to 12.0) or "
                "laravel-cache- (12.x from skeleton v12.1.0, 13.x); a pause under another "
                "prefix is one queue:work never reads"
            )
        expiration = self._pause_table().pause(self.connection, queue, seconds)
        return None if seconds is None else expiration

    def resume(self, queue: str) -> bool:
        """``php artisan queue:resume connection:queue``: the key forgotten; False when the
        queue was not paused."""
        return self._pause_table().resume(self.connection, queue)

    def limit(self, queue: str, concurrency: int | None) -> None:
        """Refused: Laravel's workers have no fleet-wide limit to honour (a queue's limit
        is contract v1's, kept in its table; Laravel limits a job with its
        ``WithoutOverlapping`` / ``RateLimited`` middleware)."""
        raise LaravelBridgeError(
            "Laravel's queue workers have no concurrency limit to honour: a limit is kept "
            "with contract v1's tables (--layout askr); Laravel limits jobs with the "
            "WithoutOverlapping or RateLimited job middleware"
        )

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """Refused, as :meth:`limit` is: Laravel's workers would not honour a per-key limit
        (Laravel's own is ``WithoutOverlapping``, a cache lock per job key)."""
        raise LaravelBridgeError(
            "Laravel's queue workers have no per-key limit to honour: it is kept with "
            "contract v1's tables (--layout askr); Laravel's WithoutOverlapping middleware "
            "locks a key in the cache"
        )

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """Refused, as :meth:`limit` is: Laravel's workers have no fleet-wide rate to honour."""
        raise LaravelBridgeError(
            "Laravel's queue workers have no rate limit to honour: a rate limit is kept "
            "with contract v1's tables (--layout askr); Laravel limits jobs with the "
            "RateLimited job middleware"
        )

    def issued(self) -> tuple[int, int]:
        return ids_issued(self._store, self._store.q.engine.ids_issued, self.tables)

    def attempts(self) -> dict[str, dict[int, int]]:
        return group_attempts(read_rows(self._store, self._store.q.attempts))

    def is_known(self, queue: str) -> bool:
        validate_queue_name(queue)
        ((found,),) = read_rows(self._store, self._store.q.known, {"queue": queue})
        return bool(found)

    def peek(self, queue: str, n: int, after: PeekAfter | None = None) -> list[WaitingJob]:
        validate_queue_name(queue)
        s = self._store

        def read(query: Any, count: int, **more: Any) -> list[WaitingJob]:
            params = {**self._params(), "queue": queue, "n": max(0, int(count)), **more}
            return [
                WaitingJob(int(i), str(q), s.q.stored_payload(p), int(a), int(at), int(c))
                for i, q, a, at, c, *p in read_rows(s, query, params)
            ]

        if after is not None and after.delayed:
            return read(s.q.peek_delayed_after, n, available_at=after.available_at, id=after.id)
        found = read(s.q.peek_ready_after, n, id=0 if after is None else after.id)
        return found + (read(s.q.peek_delayed, n - len(found)) if len(found) < n else [])

    def job(self, queue: str, job_id: int) -> WaitingJob | None:
        validate_queue_name(queue)
        s = self._store
        expired = self._params()["expired"]
        for i, q, a, at, c, reserved_at, *p in read_rows(
            s, s.q.job, {"queue": queue, "id": int(job_id)}
        ):
            # Held while its reservation is younger than retry_after (Laravel's rule); it
            # lapses then. No holder: Laravel's table records none.
            held = reserved_at is not None and int(reserved_at) > expired
            return WaitingJob(
                int(i),
                str(q),
                s.q.stored_payload(p),
                int(a),
                int(at),
                int(c),
                reserved_until=int(reserved_at) + int(self.retry_after) if held else None,
            )
        return None

    # Laravel's jobs table has no column for a holder: holds are anonymous there.
    def held(self, queue: str, n: int) -> list[WaitingJob]:
        raise ConfigurationError(
            f"Laravel's {self.tables[0]} table records no holder; --held reads contract v1's"
        )

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        return []

    def release_holder(self, holder: str, queue: str | None = None) -> int:
        raise ConfigurationError(
            f"Laravel's {self.tables[0]} table records no holder: a reservation comes back "
            "after the connection's retry_after"
        )

    def _failed(self, rows: Sequence[Any]) -> list[FailedJob]:
        return [
            FailedJob(
                id=int(i),
                uuid=u,
                queue=str(q),
                payload=self._store.q.stored_payload(p),
                exception=e,
                failed_at=unix_timestamp(f),
                connection=c,
            )
            for i, u, q, e, f, c, *p in rows
        ]

    def failed(
        self, queue: str | None = None, limit: int = 50, before: int | None = None
    ) -> list[FailedJob]:
        s = self._store
        params: dict[str, Any] = {"limit": max(0, int(limit)), "before": below(before)}
        query = s.q.failed_recent
        if queue is not None:
            validate_queue_name(queue)
            params["queue"] = queue
            query = s.q.failed_recent_queue
        return self._failed(read_rows(s, query, params))

    def find_failed(self, ref: str) -> list[FailedJob]:
        return self._failed(read_rows(self._store, self._store.q.failed_find, row_ref(ref)))

    def failed_ids(self, queue: str | None = None) -> list[int]:
        s = self._store
        params: dict[str, Any] = {}
        query = s.q.failed_ids
        if queue is not None:
            validate_queue_name(queue)
            params["queue"] = queue
            query = s.q.failed_ids_queue
        return [int(i) for (i,) in read_rows(s, query, params)]

    def retry_failed(self, ids: Sequence[int]) -> int:
        s = self._store

        def retry(tx: Tx, job_id: int, now: int) -> bool:
            found = tx.execute(s.q.failed_find, {"id": job_id, "uuid": None}).fetchone()
            if found is None:
                return False
            (row,) = self._failed([found])
            payload = row.payload
            try:
                rewritten = Payload.parse(payload).for_retry(now)
            except PayloadError:  # pushed back as stored: its reader fails it again
                rewritten = None
            if rewritten is not None:
                payload = rewritten.to_json()
            s.q.insert_job(tx, s._row(row.queue, payload, 0.0, 0, now))
            tx.execute(s.q.failed_delete, {"id": job_id})
            return True

        return per_row(s, ids, retry)

    def forget_failed(self, ids: Sequence[int]) -> int:
        s = self._store
        return per_row(
            s,
            ids,
            lambda tx, i, _now: tx.execute(s.q.failed_delete, {"id": i}).rowcount == 1,
        )

    def flush_failed(self, older_than: float | None = None, queue: str | None = None) -> int:
        s = self._store
        before = datetime.fromtimestamp(cutoff(s._now(), older_than), UTC).replace(tzinfo=None)
        params: dict[str, Any] = {"before": before}
        query = s.q.failed_flush
        if queue is not None:
            validate_queue_name(queue)
            params["queue"] = queue
            query = s.q.failed_flush_queue
        return int(s._run(lambda tx: tx.execute(query, params).rowcount, single=True))

    def purge(self, queue: str) -> int:
        return self._store.purge(queue)

    def close(self) -> None:
        if self._pauses is not None:
            self._pauses.close()
        self._store.close()


def unix_timestamp(value: Any) -> int:
    """``failed_at`` (a TIMESTAMP Laravel writes in UTC, read back as a naive datetime, or
    SQLite's text of one) as unix seconds."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return int(value.replace(tzinfo=value.tzinfo or UTC).timestamp())
    return int(value)
