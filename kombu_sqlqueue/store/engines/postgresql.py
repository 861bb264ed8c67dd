"""PostgreSQL (psycopg 3): row locks with ``FOR UPDATE SKIP LOCKED``, ``RETURNING`` everywhere.

Overrides, each for a reason:

* the claim locks the rows it considers with ``SKIP LOCKED``, so concurrent
  claimers pass each other instead of queueing on one row; PostgreSQL refuses
  ``FOR UPDATE`` inside a ``UNION``, so the two index-ordered halves of the
  ready predicate are CTEs;
* enqueue uses ``RETURNING id``: psycopg has no ``lastrowid``;
* the dead-letter copy casts its parameters: in a ``SELECT`` list PostgreSQL
  cannot infer a parameter's type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa

from .base import BaseEngine, Queries

if TYPE_CHECKING:
    from ..executor import Tx


class PostgreSQLQueries(Queries):
    job_claim = sa.text(
        """
        WITH fresh AS (
                 SELECT id, priority, available_at FROM askr_jobs
                  WHERE queue = :queue AND reserved_until IS NULL AND available_at <= :now
                  ORDER BY priority DESC, available_at, id
                  LIMIT :n FOR UPDATE SKIP LOCKED),
             lapsed AS (
                 SELECT id, priority, available_at FROM askr_jobs
                  WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now
                  ORDER BY priority DESC, available_at, id
                  LIMIT :n FOR UPDATE SKIP LOCKED),
             picked AS (
                 SELECT id FROM (SELECT * FROM fresh UNION ALL SELECT * FROM lapsed) AS ready
                  ORDER BY priority DESC, available_at, id LIMIT :n)
        UPDATE askr_jobs AS j
           SET reserved_until = :until, attempts = j.attempts + 1, reserved_token = :token
          FROM picked WHERE j.id = picked.id
        RETURNING j.id, j.queue, j.payload, j.priority, j.available_at, j.attempts,
                  j.max_attempts, j.uuid
        """
    )
    job_dead_letter_copy = sa.text(
        """
        INSERT INTO askr_failed_jobs (uuid, queue, payload, exception, attempts, failed_at)
        SELECT uuid, queue, payload, CAST(:exception AS TEXT),
               attempts - CAST(:uncounted AS INTEGER), CAST(:now AS BIGINT)
          FROM askr_jobs WHERE id = :id AND reserved_token = :token
        """
    )


class PostgreSQLEngine(BaseEngine):
    """PostgreSQL 12+ through psycopg 3."""

    name: ClassVar[str] = "postgresql"
    default_driver: ClassVar[str] = "psycopg"
    now_sql: ClassVar[str] = "(CAST(extract(epoch FROM now()) AS BIGINT))"
    queries: ClassVar[type[Queries]] = PostgreSQLQueries

    def __init__(self) -> None:
        super().__init__()
        self.job_enqueue_returning = self.job_enqueue.returning(self.jobs.c.id)

    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        return int(tx.execute(self.job_enqueue_returning, row).fetchone()[0])

    def create_engine(self, url: sa.URL, options: Any) -> sa.Engine:
        return sa.create_engine(url, pool_size=4, max_overflow=-1, pool_pre_ping=False)

    def is_busy_error(self, exc: BaseException) -> bool:
        # deadlock_detected, lock_not_available, serialization_failure: try again.
        return getattr(exc, "sqlstate", None) in ("40P01", "55P03", "40001")

    def is_connection_error(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
