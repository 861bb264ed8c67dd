"""The shared engine: contract-v1 SQL as named queries, portable where SQL allows.

Every query has a name (``job_claim``, ``job_ack`` …) and the same name in
every engine; an engine subclass overrides a query or a hook only where its
database differs, with a comment saying why. Bind parameters only: queue
names and payloads never enter SQL text. Time is the ``:now`` parameter (unix
seconds) read once per store call from the client clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL

from ...exceptions import ConfigurationError, StoreConditionError
from ..claiming import ClaimedRow
from ..schema import build_metadata

if TYPE_CHECKING:
    from ..executor import Tx


#: What the plain claim adds to its candidates: the queue has no control row. Uncorrelated,
#: so every engine evaluates it once per statement (one primary-key probe).
UNCONTROLLED = "AND NOT EXISTS (SELECT 1 FROM askr_queue_controls WHERE queue = :queue)"

#: What a keyed claim's candidates leave out: the jobs of keys whose held jobs are at the
#: limit (the held rows are found by the claim index: queue, reserved_until). Which of the
#: others a round takes, at most the limit per key counting those, is picked in Python
#: (Queries.claim_keyed_rows).
KEYED = """
        AND (concurrency_key IS NULL OR concurrency_key NOT IN (
             SELECT held.concurrency_key FROM askr_jobs held
              WHERE held.queue = :queue AND held.reserved_until > :now
                AND held.concurrency_key IS NOT NULL
              GROUP BY held.concurrency_key HAVING count(*) >= :per_key))"""

#: A keyed claim reads this many candidates per row it asks for: enough that a round
#: usually fills the claim although several candidates share a key with one slot left.
KEYED_WINDOW = 4

# A keyed claim's candidates: the claim's two halves (fresh, lapsed), each in claim order
# and bounded, with KEYED; ids and keys only (payloads are read for the rows taken). The
# fresh half orders by reserved_until too (all NULL there): PostgreSQL follows an index's
# order only past equalities, and IS NULL is not one — without it, it sorted every ready
# row of the queue (400k: 217 ms a round → 3 ms), as PostgreSQL's own claim says.
_KEYED_CANDIDATES = f"""
        SELECT * FROM (
            SELECT id, priority, available_at, concurrency_key, 0 AS lapsed FROM askr_jobs
             WHERE queue = :queue AND reserved_until IS NULL AND available_at <= :now {KEYED}
             ORDER BY reserved_until, priority DESC, available_at, id LIMIT :n) AS fresh
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, available_at, concurrency_key, 1 AS lapsed FROM askr_jobs
             WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now {KEYED}
             ORDER BY priority DESC, available_at, id LIMIT :n) AS lapsed_rows
        """

#: The columns of a job a queue's page shows (admin.peek).
_PEEKED = "id, queue, payload, priority, available_at, attempts, max_attempts, uuid, created_at"
# A queue's ready jobs, the claim's two halves (see Queries.queue_peek); {after}: nothing,
# or the next page's start.
_PEEK_READY = f"""
        SELECT * FROM (
            SELECT {_PEEKED} FROM askr_jobs
             WHERE queue = :queue AND reserved_until IS NULL AND available_at <= :now {{after}}
             ORDER BY reserved_until, priority DESC, available_at, id LIMIT :n) AS fresh
        UNION ALL
        SELECT * FROM (
            SELECT {_PEEKED} FROM askr_jobs
             WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now {{after}}
             ORDER BY priority DESC, available_at, id LIMIT :n) AS lapsed_rows
        """
# Past a ready job in claim order (priority descending, then age, then id).
_PEEK_AFTER_READY = """
               AND (priority < :priority OR (priority = :priority AND (available_at > :available_at
                    OR (available_at = :available_at AND id > :id))))"""
_PEEK_DELAYED = f"""
        SELECT {_PEEKED} FROM askr_jobs
         WHERE queue = :queue AND available_at > :now
           AND (reserved_until IS NULL OR reserved_until <= :now) {{after}}
         ORDER BY available_at, id
         LIMIT :n
        """
_PEEK_AFTER_DELAYED = """
           AND (available_at > :available_at OR (available_at = :available_at AND id > :id))"""

# Contract v1's claim; {uncontrolled}: UNCONTROLLED or nothing (see Queries.job_claim).
_CLAIM = """
        UPDATE askr_jobs
           SET reserved_until    = :until,
               attempts          = attempts + 1,
               reserved_token    = :token,
               reserved_by       = :holder,
               reserved_instance = :instance
         WHERE id IN (
               SELECT id FROM (
                   SELECT * FROM (
                       SELECT id, priority, available_at FROM askr_jobs
                        WHERE queue = :queue AND reserved_until IS NULL
                          AND available_at <= :now {uncontrolled}
                        ORDER BY priority DESC, available_at, id LIMIT :n)
                   UNION ALL
                   SELECT * FROM (
                       SELECT id, priority, available_at FROM askr_jobs
                        WHERE queue = :queue AND reserved_until <= :now
                          AND available_at <= :now {uncontrolled}
                        ORDER BY priority DESC, available_at, id LIMIT :n)
               ) AS ready
               ORDER BY priority DESC, available_at, id
               LIMIT :n)
        RETURNING id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
                  expires_at
        """


class Listener:
    """Waits for "a job became ready" signals (PostgreSQL LISTEN/NOTIFY)."""

    def wait(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        """Block up to ``seconds``; True when a job became ready on one of ``queues``
        (among them ``private``: queues only this consumer reads), False on timeout."""
        raise NotImplementedError

    def leave(self) -> None:
        """The consumer has work now (or will not wait for a while): let another idle
        consumer be the one woken meanwhile."""

    def wakes(self) -> bool:
        """True while an enqueue is sure to wake an idle consumer (none is lost)."""
        return False

    def interrupt(self) -> None:
        """End the wait under way (from another thread), or the next one, at once: it
        returns False, as on a timeout. (A listener that cannot be interrupted leaves its
        waits to end at their timeout.)"""

    def close(self) -> None:
        """Release the listening connection."""


#: The execution option a SQLAlchemy connection that only reads (the schema's
#: verification) carries: an engine may begin it without a write lock.
READ_ONLY = "sqlqueue_read_only"

#: A prepared multi-row insert (:meth:`Queries.rows_insert`): run it for the rows given.
RowsInsert: TypeAlias = "Callable[[Tx, Sequence[dict[str, Any]]], None]"

#: Columns an enqueue writes (the rest take their defaults).
ENQUEUE_COLUMNS = (
    "queue",
    "payload",
    "priority",
    "available_at",
    "attempts",
    "max_attempts",
    "created_at",
    "uuid",
    "expires_at",
    "concurrency_key",
)

#: Columns ``dead_letter_insert`` writes.
DEAD_LETTER_COLUMNS = ("uuid", "queue", "payload", "exception", "attempts", "failed_at")


class LayoutPrimitives:
    """What another table layout's statements are built from.

    A layout a package adds (its own tables and rules, e.g. another runtime's queue)
    builds its statements with SQLAlchemy Core from these, so it needs nothing per engine:
    an engine's :class:`Queries` overrides the ones its database does differently, saying
    why. Static methods; a layout reaches them on the engine's ``Queries`` class.
    """

    @staticmethod
    def insert_or_nothing(table: sa.Table) -> Any:
        """``INSERT`` into ``table`` that writes nothing when the row's key exists.
        SQLite and PostgreSQL: ON CONFLICT DO NOTHING, through their dialect's insert
        (the base's, SQLite's)."""
        return sqlite_insert(table).on_conflict_do_nothing()

    @staticmethod
    def text_position(haystack: Any, needle: Any) -> Any:
        """The 1-based position of ``needle`` in ``haystack``, 0 when absent."""
        return sa.func.instr(haystack, needle)

    @staticmethod
    def text_read(column: Any) -> list[Any]:
        """The columns that read a text column back (what :meth:`text_value` takes)."""
        return [column]

    @staticmethod
    def text_value(found: Sequence[Any]) -> str | bytes:
        """The value from the columns :meth:`text_read` selected."""
        (value,) = found
        return value if isinstance(value, str) else bytes(value)

    #: The database server's clock, unix microseconds (what beats on several hosts agree on:
    #: kombu_sqlqueue.beat). Each engine says it its own way.
    clock_us: ClassVar[sa.TextClause] = sa.text("SELECT 0")

    @staticmethod
    def grouped_by_scan(column: Any) -> Any:
        """What a count of every row grouped by ``column`` groups by: the column, where the
        engine's planner reads the whole table (or a covering index) for it."""
        return column

    @staticmethod
    def ids_issued(table: str) -> sa.Executable:
        """The highest ``id`` ``table`` has handed out (its autoincrement's high-water mark,
        NULL before the first): rows ever inserted, those since deleted included — what a
        throughput is counted from (``MAX(id)`` forgets the rows of an emptied table).
        SQLite: AUTOINCREMENT's ``sqlite_sequence`` row (contract v1 and Laravel's
        migrations both declare AUTOINCREMENT)."""
        return sa.text("SELECT seq FROM sqlite_sequence WHERE name = :table").bindparams(
            table=table
        )

    @staticmethod
    def returning_id(insert: sa.Insert, id_column: Any) -> sa.Executable:
        """``insert`` of one row, made to hand back its generated ``id_column``
        (:meth:`inserted_id` reads it)."""
        return insert.returning(id_column)

    @staticmethod
    def inserted_id(tx: Tx, statement: sa.Executable, row: dict[str, Any]) -> int:
        """Run :meth:`returning_id`'s ``statement`` for ``row``; return the new row's id."""
        return int(tx.execute(statement, row).fetchone()[0])

    @staticmethod
    def rows_insert(table: sa.Table, columns: Sequence[str]) -> RowsInsert:
        """Inserting many rows of ``table`` (values for ``columns``, the rest their
        defaults) with one statement: a multi-row ``INSERT … VALUES``."""
        one = sa.insert(table).values({c: sa.bindparam(c) for c in columns})

        def run(tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
            tx.execute_values(one, rows)

        return run


class Queries(LayoutPrimitives):
    """One engine's named statements, under the same names in every engine; an engine
    subclasses this and overrides what differs, saying why.

    * Contract v1 (``askr_*`` tables, fixed names): class attributes (``job_*``,
      ``queue_*``, ``binding_*``, ``dead_letter_*``) and the methods below them for
      statements that differ between engines by more than their text.
    * The primitives another table layout builds its own statements from, inherited from
      :class:`LayoutPrimitives` (``insert_or_nothing``, ``text_position``,
      ``text_read``/``text_value``, ``returning_id``/``inserted_id``, ``rows_insert``),
      overridden here per engine: a layout a package adds needs nothing per engine.

    One instance per store; the contract statements are shared by every instance.
    """

    #: The engine's clock in unix seconds, for column defaults only.
    now_sql: ClassVar[str] = "0"

    # Contract v1's claim, with its "ready" predicate split in two: the
    # written-as-one `reserved_until IS NULL OR reserved_until <= now` makes
    # the planner sort every row of the queue (measured: 27 ms per claim at
    # 200 000 waiting). Each half reads the claim index in ORDER BY order and
    # stops after :n rows (0.02 ms at 200 000), so only up to 2n rows are sorted.
    # job_claim is the plain claim, of a queue without controls: {uncontrolled} is
    # UNCONTROLLED, so a queue that has a control row gets nothing from it (the store then
    # learns of the row and claims with job_claim_controlled, after reading the row).
    job_claim = sa.text(_CLAIM.format(uncontrolled=UNCONTROLLED))
    job_claim_controlled = sa.text(_CLAIM.format(uncontrolled=""))
    # A keyed claim (store._claim_in under a per-key limit, the queue's row locked): the
    # held jobs by key, the candidates, then the ones picked reserved — if still claimable
    # (an old holder's late ack or renewal may have got there first) — and read back.
    job_held_by_key = sa.text(
        """
        SELECT concurrency_key, count(*) FROM askr_jobs
         WHERE queue = :queue AND reserved_until > :now AND concurrency_key IS NOT NULL
         GROUP BY concurrency_key
        """
    )
    job_keyed_candidates = sa.text(_KEYED_CANDIDATES)
    job_claim_picked = sa.text(
        """
        UPDATE askr_jobs
           SET reserved_until = :until, attempts = attempts + 1, reserved_token = :token,
               reserved_by = :holder, reserved_instance = :instance
         WHERE id IN :ids AND available_at <= :now
           AND (reserved_until IS NULL OR reserved_until <= :now)
        """
    ).bindparams(sa.bindparam("ids", expanding=True))
    job_claimed_read = sa.text(
        """
        SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
               expires_at
          FROM askr_jobs WHERE id IN :ids AND reserved_token = :token
        """
    ).bindparams(sa.bindparam("ids", expanding=True))
    job_ack = sa.text("DELETE FROM askr_jobs WHERE id = :id AND reserved_token = :token")
    job_ack_many = sa.text(
        "DELETE FROM askr_jobs WHERE reserved_token = :token AND id IN :ids"
    ).bindparams(sa.bindparam("ids", expanding=True))
    job_ack_many_returning = sa.text(
        "DELETE FROM askr_jobs WHERE reserved_token = :token AND id IN :ids RETURNING id"
    ).bindparams(sa.bindparam("ids", expanding=True))
    job_release = sa.text(
        """
        UPDATE askr_jobs
           SET reserved_until = NULL, reserved_token = NULL, available_at = :available_at,
               reserved_by = NULL, reserved_instance = NULL
         WHERE id = :id AND reserved_token = :token
        """
    )
    # A clean shutdown hands back messages the worker prefetched but never
    # started, so the attempt the claim counted is given back.
    job_return = sa.text(
        """
        UPDATE askr_jobs
           SET reserved_until = NULL, reserved_token = NULL, available_at = :available_at,
               reserved_by = NULL, reserved_instance = NULL,
               attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
         WHERE id = :id AND reserved_token = :token
        """
    )
    # By id and token: one claim's token covers its whole batch, and a row of it this
    # process no longer holds (handed back, or dropped to lapse) must not be kept alive.
    job_renew = sa.text(
        "UPDATE askr_jobs SET reserved_until = :until"
        " WHERE reserved_token IN :tokens AND id IN :ids"
    ).bindparams(sa.bindparam("tokens", expanding=True), sa.bindparam("ids", expanding=True))
    # Which of these jobs still have a row (held, waiting or lapsed): the rest are settled.
    job_existing = sa.text("SELECT id FROM askr_jobs WHERE id IN :ids").bindparams(
        sa.bindparam("ids", expanding=True)
    )
    job_held = sa.text(
        "SELECT id, reserved_token FROM askr_jobs WHERE reserved_token IN :tokens AND id IN :ids"
    ).bindparams(sa.bindparam("tokens", expanding=True), sa.bindparam("ids", expanding=True))
    # :uncounted is 1 when the claim that refused the job already counted an
    # attempt that never ran, so the dead letter records deliveries made.
    job_dead_letter_copy = sa.text(
        """
        INSERT INTO askr_failed_jobs
               (uuid, queue, payload, exception, attempts, failed_at, concurrency_key)
        SELECT uuid, queue, payload, :exception, attempts - :uncounted, :now, concurrency_key
          FROM askr_jobs WHERE id = :id AND reserved_token = :token
        """
    )
    job_get = sa.text(
        """
        SELECT id, queue, payload, priority, available_at, reserved_until, attempts,
               max_attempts, created_at, reserved_token, uuid, expires_at, reserved_by,
               reserved_instance, concurrency_key
          FROM askr_jobs WHERE id = :id
        """
    )
    queue_backlog = sa.text(
        """
        SELECT count(*) AS total,
               count(CASE WHEN available_at <= :now
                           AND (reserved_until IS NULL OR reserved_until <= :now)
                          THEN 1 END) AS ready,
               coalesce(:now - min(CASE WHEN available_at <= :now
                                         AND (reserved_until IS NULL OR reserved_until <= :now)
                                        THEN available_at END), 0) AS oldest_seconds
          FROM askr_jobs WHERE queue = :queue
        """
    )
    # Waiting work: delayed jobs count, held jobs do not, lapsed ones do (seed 004 size()).
    queue_size = sa.text(
        """
        SELECT count(*) FROM askr_jobs
         WHERE queue = :queue AND (reserved_until IS NULL OR reserved_until <= :now)
        """
    )
    # Never removes a reservation, even a lapsed one: its holder may still be running it.
    queue_purge = sa.text("DELETE FROM askr_jobs WHERE queue = :queue AND reserved_until IS NULL")
    queue_delete = sa.text("DELETE FROM askr_jobs WHERE queue = :queue")
    # Bindings. "Insert unless present": race-free here only where writers are serialized
    # (SQLite's BEGIN IMMEDIATE); the server engines override it with their upsert.
    binding_add = sa.text(
        """
        INSERT INTO askr_bindings (exchange, routing_key, queue, exchange_type, created_at)
        SELECT :exchange, :routing_key, :queue, :exchange_type, :now
         WHERE NOT EXISTS (SELECT 1 FROM askr_bindings
                            WHERE exchange = :exchange AND routing_key = :routing_key
                              AND queue = :queue)
        """
    )
    binding_remove = sa.text(
        "DELETE FROM askr_bindings WHERE exchange = :exchange AND routing_key = :routing_key"
        " AND queue = :queue"
    )
    binding_remove_queue = sa.text("DELETE FROM askr_bindings WHERE queue = :queue")
    # With each bound queue's x-message-ttl, so a publisher stamps the expiry of messages
    # to queues other processes declared (a monitor's event queue, a client's reply queue).
    binding_exists = sa.text(
        """
        SELECT 1 FROM askr_bindings
         WHERE exchange = :exchange AND routing_key = :routing_key AND queue = :queue
        """
    )
    binding_list = sa.text(
        """
        SELECT b.routing_key, b.queue, b.exchange_type, q.message_ttl_ms
          FROM askr_bindings b LEFT JOIN askr_queues q ON q.name = b.queue
         WHERE b.exchange = :exchange
         ORDER BY b.created_at, b.queue
        """
    )
    # Queues with a lifetime or a message TTL: "insert unless present" as binding_add
    # (engines override it).
    queue_add = sa.text(
        """
        INSERT INTO askr_queues (name, expires_seconds, last_used_at, message_ttl_ms)
        SELECT :name, :expires, :now, :message_ttl_ms
         WHERE NOT EXISTS (SELECT 1 FROM askr_queues WHERE name = :name)
        """
    )
    queue_set = sa.text(
        """
        UPDATE askr_queues
           SET expires_seconds = :expires, last_used_at = :now, message_ttl_ms = :message_ttl_ms
         WHERE name = :name
        """
    )
    queue_with_message_ttl = sa.text(
        "SELECT name, message_ttl_ms FROM askr_queues WHERE message_ttl_ms IS NOT NULL"
    )
    # Messages past their TTL that nobody consumes (a held one is its holder's to settle).
    queue_discard_expired = sa.text(
        """
        DELETE FROM askr_jobs
         WHERE queue = :queue AND reserved_until IS NULL
           AND (expires_at <= :now OR created_at <= :created_before)
        """
    )
    queue_touch = sa.text(
        "UPDATE askr_queues SET last_used_at = :now WHERE name IN :names"
    ).bindparams(sa.bindparam("names", expanding=True))
    queue_present = sa.text("SELECT name FROM askr_queues WHERE name IN :names").bindparams(
        sa.bindparam("names", expanding=True)
    )
    queue_expired = sa.text(
        "SELECT name FROM askr_queues WHERE expires_seconds IS NOT NULL"
        " AND last_used_at + expires_seconds <= :now"
    )
    queue_forget = sa.text("DELETE FROM askr_queues WHERE name = :name")
    dead_letter_sweep = sa.text("DELETE FROM askr_failed_jobs WHERE failed_at < :cutoff")
    dead_letter_list = sa.text(
        """
        SELECT id, uuid, queue, payload, exception, attempts, failed_at
          FROM askr_failed_jobs ORDER BY id LIMIT :limit
        """
    )
    dead_letter_list_queue = sa.text(
        """
        SELECT id, uuid, queue, payload, exception, attempts, failed_at
          FROM askr_failed_jobs WHERE queue = :queue ORDER BY id LIMIT :limit
        """
    )

    # -- enqueue once (seed 001's deduplication window) -----------------------------------
    # Insert-or-nothing, race-free on every engine that has ON CONFLICT (SQLite 3.24+,
    # PostgreSQL): of two publishers racing one key, one inserts, the other waits for its
    # commit and inserts nothing.
    dedupe_add = sa.text(
        """
        INSERT INTO askr_dedupe (queue, dedupe_key, first_at) VALUES (:queue, :key, :now)
        ON CONFLICT DO NOTHING
        """
    )
    # A key first written before the window began starts a new window (a repeat inside
    # the window never moves it: the window counts from the first write).
    dedupe_renew = sa.text(
        """
        UPDATE askr_dedupe SET first_at = :now
         WHERE queue = :queue AND dedupe_key = :key AND first_at <= :cutoff
        """
    )
    dedupe_sweep = sa.text("DELETE FROM askr_dedupe WHERE queue = :queue AND first_at <= :cutoff")

    # -- flow control (askr_queue_controls: store/controls.py decides) ----------------------
    control_all = sa.text(
        """
        SELECT queue, paused, resume_at, concurrency, rate_count, rate_period_ms, rate_burst,
               rate_tat_us, key_concurrency
          FROM askr_queue_controls ORDER BY queue
        """
    )
    # A claim of a controlled queue reads its row first. Here (SQLite) the claim's
    # transaction holds the database's one write lock (BEGIN IMMEDIATE): claims of the
    # queue are one at a time already; the server engines lock the row (FOR UPDATE).
    control_get = sa.text(
        """
        SELECT queue, paused, resume_at, concurrency, rate_count, rate_period_ms, rate_burst,
               rate_tat_us, key_concurrency
          FROM askr_queue_controls
         WHERE queue = :queue
        """
    )
    # Live reservations of a queue, every holder's (a concurrency limit counts them).
    control_held = sa.text(
        "SELECT count(*) FROM askr_jobs WHERE queue = :queue AND reserved_until > :now"
    )
    control_limit = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, concurrency, updated_at)
        VALUES (:queue, 0, :concurrency, :now)
        ON CONFLICT (queue) DO UPDATE
           SET concurrency = excluded.concurrency, updated_at = excluded.updated_at
        """
    )
    # Ready jobs of the keys at the queue's per-key limit, and how many such keys: what
    # waits on it now (stats; the held rows are found by the claim index).
    control_key_waiting = sa.text(
        """
        SELECT count(*), count(DISTINCT concurrency_key) FROM askr_jobs
         WHERE queue = :queue AND available_at <= :now
           AND (reserved_until IS NULL OR reserved_until <= :now)
           AND concurrency_key IN (
               SELECT held.concurrency_key FROM askr_jobs held
                WHERE held.queue = :queue AND held.reserved_until > :now
                  AND held.concurrency_key IS NOT NULL
                GROUP BY held.concurrency_key HAVING count(*) >= :per_key)
        """
    )
    control_key_limit = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, key_concurrency, updated_at)
        VALUES (:queue, 0, :key_concurrency, :now)
        ON CONFLICT (queue) DO UPDATE
           SET key_concurrency = excluded.key_concurrency, updated_at = excluded.updated_at
        """
    )
    control_key_unlimit = sa.text(
        """
        UPDATE askr_queue_controls SET key_concurrency = NULL, updated_at = :now
         WHERE queue = :queue AND key_concurrency IS NOT NULL
        """
    )
    control_unlimit = sa.text(
        """
        UPDATE askr_queue_controls SET concurrency = NULL, updated_at = :now
         WHERE queue = :queue AND concurrency IS NOT NULL
        """
    )
    control_pause = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, resume_at, updated_at)
        VALUES (:queue, 1, :resume_at, :now)
        ON CONFLICT (queue) DO UPDATE
           SET paused = 1, resume_at = excluded.resume_at, updated_at = excluded.updated_at
        """
    )
    control_unpause = sa.text(
        """
        UPDATE askr_queue_controls SET paused = 0, resume_at = NULL, updated_at = :now
         WHERE queue = :queue AND paused = 1
        """
    )
    # A pause for a time that ran out, ended by the claim that finds it so.
    control_unpause_lapsed = sa.text(
        """
        UPDATE askr_queue_controls SET paused = 0, resume_at = NULL, updated_at = :now
         WHERE queue = :queue AND paused = 1 AND resume_at <= :now
        """
    )
    # Setting the rate a queue has keeps its due time (every worker that declares it writes
    # it again); a new rate starts afresh (a slower one's due time would hold it back).
    control_rate = sa.text(
        """
        INSERT INTO askr_queue_controls
               (queue, paused, rate_count, rate_period_ms, rate_burst, rate_tat_us, updated_at)
        VALUES (:queue, 0, :count, :period_ms, :burst, 0, :now)
        ON CONFLICT (queue) DO UPDATE
           SET rate_tat_us = CASE WHEN askr_queue_controls.rate_count = excluded.rate_count
                                   AND askr_queue_controls.rate_period_ms = excluded.rate_period_ms
                                   AND askr_queue_controls.rate_burst = excluded.rate_burst
                                  THEN askr_queue_controls.rate_tat_us ELSE 0 END,
               rate_count = excluded.rate_count, rate_period_ms = excluded.rate_period_ms,
               rate_burst = excluded.rate_burst, updated_at = excluded.updated_at
        """
    )
    control_unrate = sa.text(
        """
        UPDATE askr_queue_controls
           SET rate_count = NULL, rate_period_ms = NULL, rate_burst = NULL, rate_tat_us = NULL,
               updated_at = :now
         WHERE queue = :queue AND rate_count IS NOT NULL
        """
    )
    # What a claim under a rate limit handed out, spent: when the next claim conforms
    # (store/controls.py's rate_charged), written under the row's lock.
    control_rate_spend = sa.text(
        "UPDATE askr_queue_controls SET rate_tat_us = :tat WHERE queue = :queue"
    )
    # A row whose every control is off is dropped: the queue's claims are plain again.
    control_drop_idle = sa.text(
        """
        DELETE FROM askr_queue_controls
         WHERE queue = :queue AND paused = 0 AND concurrency IS NULL AND rate_count IS NULL
           AND key_concurrency IS NULL
        """
    )

    # -- who holds what (seed 001's consumer identity) -------------------------------------
    job_holders = sa.text(
        """
        SELECT queue, reserved_by, reserved_instance, count(*) FROM askr_jobs
         WHERE reserved_until > :now
         GROUP BY queue, reserved_by, reserved_instance
        """
    )
    # The same for the queues named: a range of the claim index per queue. (No index
    # leads with reserved_until: MariaDB and MySQL read the whole table for the query
    # above, 1.2 s at 1M jobs, and neither plans a loose scan of the queues for it.)
    job_holders_of = sa.text(
        """
        SELECT queue, reserved_by, reserved_instance, count(*) FROM askr_jobs
         WHERE queue IN :queues AND reserved_until > :now
         GROUP BY queue, reserved_by, reserved_instance
        """
    ).bindparams(sa.bindparam("queues", expanding=True))
    # A holder's reservations handed back, live ones too, as if their visibility timeout
    # ran out now: the next claim takes them as lapsed (redelivered, attempts counted), and
    # from then on the old holder's settlements are stale.
    job_release_holder = sa.text(
        """
        UPDATE askr_jobs SET reserved_until = :now
         WHERE reserved_by = :holder AND reserved_until > :now
        """
    )
    job_release_holder_queue = sa.text(
        """
        UPDATE askr_jobs SET reserved_until = :now
         WHERE reserved_by = :holder AND queue = :queue AND reserved_until > :now
        """
    )
    job_release_instance = sa.text(
        """
        UPDATE askr_jobs SET reserved_until = :now
         WHERE reserved_by = :holder AND reserved_instance = :instance AND reserved_until > :now
        """
    )

    # -- what operators read and steer (store/admin.py) ---------------------------------
    # One pass over the jobs for every queue's figures: the columns it reads are all in
    # the claim index, so a server engine can answer from the index alone.
    queue_stats = sa.text(
        """
        SELECT queue,
               count(*),
               count(CASE WHEN available_at <= :now
                           AND (reserved_until IS NULL OR reserved_until <= :now)
                          THEN 1 END),
               count(CASE WHEN reserved_until > :now THEN 1 END),
               count(CASE WHEN available_at > :now
                           AND (reserved_until IS NULL OR reserved_until <= :now)
                          THEN 1 END),
               min(CASE WHEN available_at <= :now
                         AND (reserved_until IS NULL OR reserved_until <= :now)
                        THEN available_at END)
          FROM askr_jobs GROUP BY queue
        """
    )
    queue_attempts = sa.text(
        "SELECT queue, attempts, count(*) FROM askr_jobs GROUP BY queue, attempts"
    )
    # The jobs no one holds, in the order claims will take them: the ready ones first —
    # the claim's two halves (never reserved, reservation lapsed), each read in claim
    # order from the claim index and bounded, merged by the caller (admin.peek); the
    # first orders by reserved_until too (all NULL: PostgreSQL follows the index's order
    # only past equalities, and IS NULL is not one: without it, it sorted the queue's
    # 400k ready rows, 0.23 s, as the claim would) —, then,
    # when fewer than asked are ready, the delayed ones by when they become ready. (One
    # statement ordering every unheld row by "ready, else when" sorted the whole queue:
    # 0.27 s for 400k jobs on MariaDB.)
    queue_peek = sa.text(_PEEK_READY.format(after=""))
    queue_peek_after = sa.text(_PEEK_READY.format(after=_PEEK_AFTER_READY))
    queue_peek_delayed = sa.text(_PEEK_DELAYED.format(after=""))
    queue_peek_delayed_after = sa.text(_PEEK_DELAYED.format(after=_PEEK_AFTER_DELAYED))
    # The live reservations of a queue, the soonest to lapse first.
    queue_held = sa.text(
        """
        SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
               created_at, reserved_until, reserved_by, reserved_instance
          FROM askr_jobs
         WHERE queue = :queue AND reserved_until > :now
         ORDER BY reserved_until, id
         LIMIT :n
        """
    )
    # One job of a queue by its id, held or not (a job's page).
    queue_job = sa.text(
        """
        SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
               created_at, reserved_until, reserved_by, reserved_instance
          FROM askr_jobs
         WHERE id = :id AND queue = :queue
        """
    )
    # A queue is known while it has a job, a dead letter or a binding (contract v1 keeps
    # no list of queues).
    queue_known = sa.text(
        """
        SELECT CASE WHEN EXISTS (SELECT 1 FROM askr_jobs WHERE queue = :queue)
                      OR EXISTS (SELECT 1 FROM askr_failed_jobs WHERE queue = :queue)
                      OR EXISTS (SELECT 1 FROM askr_bindings WHERE queue = :queue)
                    THEN 1 ELSE 0 END
        """
    )
    dead_letter_counts = sa.text("SELECT queue, count(*) FROM askr_failed_jobs GROUP BY queue")
    # Newest first, as Laravel's queue:failed lists them; a page after the first starts
    # below the last id shown (keyset: no OFFSET, no scan of the pages before).
    dead_letter_recent = sa.text(
        """
        SELECT id, uuid, queue, payload, exception, attempts, failed_at
          FROM askr_failed_jobs WHERE id < :before ORDER BY id DESC LIMIT :limit
        """
    )
    dead_letter_recent_queue = sa.text(
        """
        SELECT id, uuid, queue, payload, exception, attempts, failed_at
          FROM askr_failed_jobs WHERE queue = :queue AND id < :before
         ORDER BY id DESC LIMIT :limit
        """
    )
    # By row id or by the job's uuid (a Celery task id): what an operator copies.
    dead_letter_find = sa.text(
        """
        SELECT id, uuid, queue, payload, exception, attempts, failed_at
          FROM askr_failed_jobs WHERE id = :id OR uuid = :uuid ORDER BY id
        """
    )
    # Back on its queue as a new job: attempts reset (Laravel's queue:retry), ready now.
    dead_letter_retry_copy = sa.text(
        """
        INSERT INTO askr_jobs (queue, payload, priority, available_at, attempts, max_attempts,
                               created_at, uuid, concurrency_key)
        SELECT queue, payload, 0, :now, 0, :max_attempts, :now, uuid, concurrency_key
          FROM askr_failed_jobs WHERE id = :id
        """
    )
    dead_letter_forget = sa.text("DELETE FROM askr_failed_jobs WHERE id = :id")
    # Ids alone, oldest first: ``failed retry --all`` reads these, then the rows in batches.
    dead_letter_ids = sa.text("SELECT id FROM askr_failed_jobs ORDER BY id")
    dead_letter_ids_queue = sa.text(
        "SELECT id FROM askr_failed_jobs WHERE queue = :queue ORDER BY id"
    )
    dead_letter_sweep_queue = sa.text(
        "DELETE FROM askr_failed_jobs WHERE failed_at < :cutoff AND queue = :queue"
    )

    # Which database a connection is on: enlist (store/enlist.py) compares a caller's
    # connection with the store's before writing on it. Every engine names its own.
    database_identity: ClassVar[sa.TextClause]
    #: A connection stays on one database for its life: its identity is read once.
    identity_lasts: ClassVar[bool] = True

    @classmethod
    def identity_of(cls, tx: Tx) -> Hashable:
        """The identity of the database ``tx`` runs on (equal only for the same one)."""
        return tuple(tx.execute(cls.database_identity).fetchone())

    # -- one instance per store ---------------------------------------------------------

    def __init__(self) -> None:
        self.metadata, self.jobs, self.failed = build_metadata(self.now_sql)
        self.job_enqueue = sa.insert(self.jobs).values(
            {c: sa.bindparam(c) for c in ENQUEUE_COLUMNS}
        )
        # A message that never became a job (one a move could not copy): a dead letter at once.
        self.dead_letter_insert = sa.insert(self.failed).values(
            {c: sa.bindparam(c) for c in DEAD_LETTER_COLUMNS}
        )

    # -- contract v1: statements that differ by more than their text -------------------

    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        """Insert one job; return its id."""
        return int(tx.execute(self.job_enqueue, row).lastrowid)

    def insert_jobs(self, tx: Tx, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows with one multi-row INSERT; return their ids in insertion order."""
        cursor = self._insert_values(tx, rows, returning=True)
        # One statement's ids ascend in VALUES order; RETURNING's row order is unspecified.
        return sorted(int(r[0]) for r in cursor.fetchall())

    def _insert_values(self, tx: Tx, rows: list[dict[str, Any]], *, returning: bool) -> Any:
        n = len(rows)
        return tx.execute(
            partial(self.job_enqueue_values, n, returning=returning),
            enqueue_many_params(rows),
            key=("enqueue_many", returning, n),
        )

    def job_enqueue_values(self, count: int, *, returning: bool) -> sa.Executable:
        """One multi-row ``INSERT … VALUES (…), (…)`` for ``count`` rows (``RETURNING id``
        when ``returning``). Parameters are named ``<column>_<row>``; see
        :func:`enqueue_many_params`."""
        rows: list[dict[str, Any]] = [
            {c: sa.bindparam(f"{c}_{i}") for c in ENQUEUE_COLUMNS} for i in range(count)
        ]
        insert = sa.insert(self.jobs).values(rows)
        return insert.returning(self.jobs.c.id) if returning else insert

    # The lapsed half of job_claim, read first: UPDATE … RETURNING shows only new values,
    # and the claim's transaction is the only writer (SQLite), so the claim takes exactly
    # these lapsed rows among its top n.
    job_claim_lapsed_ids = sa.text(
        """
        SELECT id FROM askr_jobs
         WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now
         ORDER BY priority DESC, available_at, id LIMIT :n
        """
    )

    # Whether any row of the queue is ready for a claim (job_claim's two halves, each an
    # index probe): what a claim that peeks first reads before it writes.
    job_ready_any = sa.text(
        """
        SELECT EXISTS (SELECT 1 FROM askr_jobs
                        WHERE queue = :queue AND reserved_until IS NULL
                          AND available_at <= :now)
            OR EXISTS (SELECT 1 FROM askr_jobs
                        WHERE queue = :queue AND reserved_until <= :now
                          AND available_at <= :now)
        """
    )

    #: A claim first reads whether anything is ready (``job_ready_any``, a read that takes
    #: no lock) and writes only then: for an engine whose write lock is the whole database.
    claim_peeks_first: ClassVar[bool] = False
    #: The same, only for a queue whose last claim (by this store) came back empty: an idle
    #: consumer's poll is the cheap read, a draining one's claim is not preceded by it.
    claim_peeks_when_idle: ClassVar[bool] = False

    #: ``claim_rows`` is one statement, so a claim can run as that statement alone
    #: (autocommit on a server engine: one round trip instead of BEGIN, claim, COMMIT).
    claim_in_one_statement: ClassVar[bool] = False

    #: ``ack_rows`` is one statement (an ack batch of one claim token runs alone).
    ack_rows_in_one_statement: ClassVar[bool] = True

    def ack_rows(self, tx: Tx, token: str, ids: Sequence[int]) -> list[int]:
        """Delete those of ``ids`` that ``token`` still holds; return their ids."""
        found = tx.execute_bound(self.job_ack_many_returning, {"token": token, "ids": ids})
        return [int(r[0]) for r in found.fetchall()]

    #: ``ack_and_claim_rows`` is one statement (a consumer's held acks of one claim token
    #: and its next claim run alone: one round trip, one commit).
    ack_and_claim_in_one_statement: ClassVar[bool] = False

    def ack_and_claim_rows(
        self, tx: Tx, token: str, ids: Sequence[int], params: dict[str, Any]
    ) -> tuple[list[int], list[ClaimedRow]]:
        """:meth:`ack_rows` then :meth:`claim_rows` (the acks first: the claim cannot meet
        a row they delete); the acked ids and the claimed rows."""
        return self.ack_rows(tx, token, ids), self.claim_rows(tx, params)

    def announce_ready(self, tx: Tx, queue: str) -> None:
        """Tell idle consumers of ``queue`` it may have jobs for them (at commit), where
        the engine's wake-ups need telling (PostgreSQL's NOTIFY; SQLite's listener sees
        every commit); a resumed queue."""

    def claim_keyed_rows(self, tx: Tx, params: dict[str, Any], per_key: int) -> list[ClaimedRow]:
        """Reserve up to ``params["n"]`` ready rows under a per-key limit of ``per_key``
        (no key with more held than that, counting these) and read them back. The queue's
        claims are one at a time (its controls row is locked), so the candidates read are
        the ones to choose from; a round takes what a window of candidates allows — one
        statement set, not one per row — and the store claims again while rows come."""
        held: dict[str, int] = {
            str(key): int(count) for key, count in tx.execute(self.job_held_by_key, params)
        }
        window = {**params, "n": params["n"] * KEYED_WINDOW, "per_key": per_key}
        candidates = sorted(
            tx.execute(self.job_keyed_candidates, window).fetchall(),
            key=lambda r: (-int(r[1]), int(r[2]), int(r[0])),
        )
        picked: dict[int, bool] = {}
        for job_id, _priority, _available_at, key, lapsed in candidates:
            if len(picked) >= params["n"]:
                break
            if key is not None:
                if held.get(key, 0) >= per_key:
                    continue
                held[key] = held.get(key, 0) + 1
            picked[int(job_id)] = bool(lapsed)
        if not picked:
            return []
        ids = list(picked)
        tx.execute_bound(self.job_claim_picked, {**params, "ids": ids})
        read = tx.execute_bound(self.job_claimed_read, {"ids": ids, "token": params["token"]})
        return [ClaimedRow.read(r, picked[int(r[0])]) for r in read]

    def claim_statement(self, controlled: bool) -> sa.TextClause:
        """The claim of a queue without controls, or of one whose row was read first."""
        return self.job_claim_controlled if controlled else self.job_claim

    def claim_rows(
        self, tx: Tx, params: dict[str, Any], controlled: bool = False
    ) -> list[ClaimedRow]:
        """Reserve up to ``params["n"]`` ready rows (:meth:`ClaimParams.binds
        <..claiming.ClaimParams.binds>`) and read them back, in no particular order."""
        lapsed = {int(r[0]) for r in tx.execute(self.job_claim_lapsed_ids, params).fetchall()}
        claimed = tx.execute(self.claim_statement(controlled), params)
        return [ClaimedRow.read(r, int(r[0]) in lapsed) for r in claimed]


def enqueue_many_params(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Flatten ``rows`` into the parameters of :meth:`Queries.job_enqueue_values`."""
    return {f"{c}_{i}": row[c] for i, row in enumerate(rows) for c in ENQUEUE_COLUMNS}


def check_choice(
    option: str, value: object, allowed: Sequence[str], given: object | None = None
) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is one of ``allowed`` (the message
    shows ``given``, the value as the user wrote it, when ``value`` was normalized)."""
    if value not in allowed:
        shown = value if given is None else given
        raise ConfigurationError(f"{option} must be one of {', '.join(allowed)}, got {shown!r}")


class BaseEngine:
    """One database engine's connection, transaction and error hooks (what the
    :class:`~..executor.Executor` calls: its ``ConnectionHooks``), its options, its
    limits, and the class of its statements. Subclasses override with a why-comment.

    ("Engine" here is ours; SQLAlchemy's pool-owning ``sa.Engine`` is called ``db``.)
    """

    #: URL scheme this engine serves (``sqlite``, ``postgresql`` …).
    name: ClassVar[str] = "base"
    #: The SQLAlchemy driver to use when the URL names none.
    default_driver: ClassVar[str] = ""
    #: This engine's statements (both layouts).
    queries: ClassVar[type[Queries]] = Queries
    #: One writer at a time for the whole database: a write on the store's own connection
    #: waits for any other open write transaction — an application's a publish is enlisted
    #: in, too (``JobStore.topology_in``).
    single_writer: ClassVar[bool] = False
    #: The top-level modules of the DB-API drivers whose connections may be on this
    #: engine's databases: an enlisted connection of any other is another database.
    dbapi_modules: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_options(cls, options: Any) -> None:
        """Raise :class:`~kombu_sqlqueue.exceptions.ConfigurationError` for a bad value of
        an option this engine reads (``StoreOptions`` asks every engine, so a typo fails
        whichever URL it goes with)."""

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        """Serialize schema creation between processes (inside its transaction)."""
        yield

    def listener(self, url: URL, options: Any) -> Listener | None:
        """A wake-up channel for idle consumers, or None: this engine is polled."""
        return None

    def normalize_url(self, url: URL) -> URL:
        """Fill in the default driver and check what this engine cannot use."""
        if "+" not in url.drivername and self.default_driver:
            url = url.set(drivername=f"{url.drivername}+{self.default_driver}")
        return url

    def create_engine(self, url: URL, options: Any) -> sa.Engine:
        """Create the SQLAlchemy engine; subclasses add connection setup."""
        return sa.create_engine(url)

    # -- transactions on a DBAPI connection (see store/executor.py) --------------------

    def prepare_connection(self, conn: Any) -> None:
        """Set up a DBAPI connection the executor is about to use for the first time."""

    def make_room(self, conn: Any, cursor: Any) -> None:
        """A write on this connection was refused for want of space (``StoreFullError``,
        its transaction rolled back): give back what the engine itself holds on disk.
        Server engines manage their own files: nothing to do."""

    def begin(self, conn: Any, cursor: Any, write: bool, single: bool) -> None:
        """Open a transaction (``single``: the work is one statement)."""
        cursor.execute("BEGIN")

    def commit(self, conn: Any, cursor: Any, single: bool) -> None:
        cursor.execute("COMMIT")

    def rollback(self, conn: Any, cursor: Any, single: bool) -> None:
        cursor.execute("ROLLBACK")

    # -- limits -----------------------------------------------------------------------

    #: The largest payload one statement may carry, in bytes (learnt from the server by
    #: engines whose limit is a server setting); see ``docs/semantics.md``, "Bad rows".
    max_payload_bytes: int = 1_000_000_000

    def payload_limit_hint(self) -> str:
        """What an operator can do about :attr:`max_payload_bytes`."""
        return "the engine's own limit"

    # -- error classification ---------------------------------------------------------

    def condition_error(self, exc: BaseException) -> type[StoreConditionError] | None:
        """The named condition ``exc`` (a driver error) reports — a full disk, a read-only
        database, a refused permission, an oversized message — or None.

        Checked before busy and connection errors: reconnecting cures none of these.
        """
        return None

    def is_busy_error(self, exc: BaseException) -> bool:
        """True when ``exc`` (a driver error) means "another writer holds the lock; try again"."""
        return False

    def is_connection_error(self, exc: BaseException) -> bool:
        """True when ``exc`` (a driver error) means the connection is unusable."""
        return type(exc).__name__ in ("OperationalError", "InterfaceError")


class ServerEngine(BaseEngine):
    """A database over the network: each round trip costs ~100 µs, so spend few.

    Connections run in autocommit mode; work that is one statement (publish,
    ack, release …) runs as that statement alone — one round trip instead of
    BEGIN, statement, COMMIT — and only multi-statement work (claim,
    dead-letter, bulk enqueue) opens a transaction.
    """

    def begin(self, conn: Any, cursor: Any, write: bool, single: bool) -> None:
        if not single:
            cursor.execute("BEGIN")

    def commit(self, conn: Any, cursor: Any, single: bool) -> None:
        if not single:
            cursor.execute("COMMIT")

    def rollback(self, conn: Any, cursor: Any, single: bool) -> None:
        if not single:
            cursor.execute("ROLLBACK")
