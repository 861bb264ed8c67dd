"""Laravel's tables and every statement the bridge runs on them: the ``laravel`` layout's SQL.

The tables are Laravel 8's migrations' (``queue:table``, ``queue:failed-table``,
``queue:batches-table``, ``cache:table``), under the names an app configures; the
statements are built from them with SQLAlchemy Core, on the primitives every engine of
the store provides (``kombu_sqlqueue.store.engines.base.Queries``: insert-or-nothing,
text position, a text column read back, an insert handing back its id, a multi-row
insert). So no engine knows Laravel, and a new engine serves this layout by providing
those primitives. Each statement has one name here, the same on every engine; the
store's ``Executor`` compiles it once per database. Bind parameters only.

The rules the statements follow are ``Illuminate\\Queue\\DatabaseQueue``'s (Laravel
8.83); see :mod:`laravel_bridge.laravel_tables` for what runs them, and its one
difference on purpose (every settlement is fenced by the attempts its reservation wrote).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from kombu_sqlqueue.store.schema import TableSpec

if TYPE_CHECKING:
    from kombu_sqlqueue.store.engines.base import Queries
    from kombu_sqlqueue.store.executor import Tx

__all__ = [
    "MAX_LARAVEL_ATTEMPTS",
    "BatchQueries",
    "CacheLockQueries",
    "CacheQueries",
    "ExceptionCountQueries",
    "LaravelQueries",
    "laravel_table_specs",
    "laravel_tables",
    "laravel_timestamp",
]

# -- Laravel's queue tables ---------------------------------------------------------------

#: Laravel's ``jobs.attempts`` is ``unsignedTinyInteger``: 255 is the most it holds.
MAX_LARAVEL_ATTEMPTS = 255

# Laravel's longText: TEXT elsewhere, LONGTEXT on MySQL (its TEXT stops at 64 KiB).
_LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Unsigned = sa.Integer().with_variant(mysql.INTEGER(unsigned=True), "mysql", "mariadb")
_Attempts = sa.SmallInteger().with_variant(mysql.TINYINT(unsigned=True), "mysql", "mariadb")


def laravel_tables(jobs: str = "jobs", failed: str = "failed_jobs") -> tuple[sa.Table, sa.Table]:
    """The two tables as Laravel 8's queue migrations create them (``queue:table``,
    ``queue:failed-table``)."""
    metadata = sa.MetaData()
    mysql_opts: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_unicode_ci"}
    jobs_table = sa.Table(
        jobs,
        metadata,
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(255), nullable=False, index=True),
        sa.Column("payload", _LongText, nullable=False),
        sa.Column("attempts", _Attempts, nullable=False),
        sa.Column("reserved_at", _Unsigned, nullable=True),
        sa.Column("available_at", _Unsigned, nullable=False),
        sa.Column("created_at", _Unsigned, nullable=False),
        sqlite_autoincrement=True,
        **mysql_opts,
    )
    failed_table = sa.Table(
        failed,
        metadata,
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(255), nullable=False, unique=True),
        sa.Column("connection", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", _LongText, nullable=False),
        sa.Column("exception", _LongText, nullable=False),
        sa.Column(
            "failed_at", sa.TIMESTAMP, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sqlite_autoincrement=True,
        **mysql_opts,
    )
    return jobs_table, failed_table


def laravel_table_specs(jobs: sa.Table, failed: sa.Table) -> tuple[TableSpec, TableSpec]:
    """What the Laravel table store verifies before use."""
    hint = (
        "run Laravel's migrations (php artisan queue:table / queue:failed-table) "
        "or create_tables=True"
    )
    return tuple(  # type: ignore[return-value]
        TableSpec(t.name, tuple(c.name for c in t.columns), hint) for t in (jobs, failed)
    )


def laravel_timestamp(unix: float) -> str:
    """``failed_at`` as Laravel writes ``Date::now()`` with the default UTC app timezone."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


#: The columns a push writes (``reserved_at`` stays NULL).
PUSH_COLUMNS = ("queue", "payload", "attempts", "available_at", "created_at")


class LaravelQueries:
    """Every statement on one ``jobs``/``failed_jobs`` pair, by Laravel 8.83's rules
    (``Illuminate\\Queue\\DatabaseQueue``), built on ``engine``'s primitives.

    One instance per store (the table names are the app's).
    """

    #: Where the class filter looks: a ``displayName`` / ``commandName`` key counts only
    #: within the payload's first HEAD characters (Laravel writes ``uuid``,
    #: ``displayName``, ``job`` … then ``data.commandName`` first: a few hundred), and a
    #: class name is at most NAME characters.
    HEAD = 2048
    NAME = 512
    #: How many of the oldest ready rows a pop by class looks at first (then all of them).
    WINDOW = 16

    def __init__(
        self, engine: type[Queries], jobs_table: str = "jobs", failed_table: str = "failed_jobs"
    ) -> None:
        self.engine = engine
        self.jobs, self.failed = laravel_tables(jobs_table, failed_table)
        self._build_queue(self.jobs, self.failed)
        self._build_admin(self.jobs, self.failed, self.ready)

    def names_claimable(self, payload: Any) -> Any:
        """The class filter of :attr:`pop_lock_named`: the payload names a class in
        ``:names`` (``|``-separated, JSON-escaped as the payload writes them) as its
        ``displayName`` or ``data.commandName``, or has no ``displayName`` at all (not a
        Laravel payload: a bad row, settled by whoever claims it).

        Cheap per row on purpose (it runs on every row a pop looks at): each search stops
        at the key, which Laravel writes within the first few hundred characters, and the
        value is cut from a short slice; the usual case (our ``displayName``) comes first.
        """
        names = sa.bindparam("names", type_=sa.String)
        position = self.engine.text_position

        def listed(key: str) -> Any:
            at = position(payload, sa.literal(key))
            rest = sa.func.substr(payload, at + len(key), self.NAME)
            length = position(rest, sa.literal('"')) - 1
            # length > 0 first: substr with a negative length reads backwards (SQLite) or
            # raises (PostgreSQL), and a name longer than the slice is not a class name.
            return sa.and_(
                at > 0,
                at < self.HEAD,
                length > 0,
                position(names, sa.literal("|", sa.String) + sa.func.substr(rest, 1, length) + "|")
                > 0,
            )

        return sa.or_(
            listed('"displayName":"'),
            listed('"commandName":"'),
            position(payload, sa.literal('"displayName":"')) == 0,
        )

    def named_pop(self, pop: Any, jobs: sa.Table, ready: Any) -> Any:
        """``pop`` (the FOR UPDATE SKIP LOCKED read of :attr:`pop_lock`) by class: only
        among the ``:window`` oldest ready rows, so the class filter runs on a few rows
        rather than the whole queue (PostgreSQL filters every row of the queue before it
        sorts). The oldest ids come from a derived table: MySQL refuses a LIMIT directly
        inside IN (…)."""
        j = jobs.c
        oldest = (
            sa.select(j.id)
            .where(j.queue == sa.bindparam("queue"), ready)
            .order_by(j.id)
            .limit(sa.bindparam("window"))
            .subquery("oldest")
        )
        return pop.where(j.id.in_(sa.select(oldest.c.id)), self.names_claimable(j.payload))

    def _build_queue(self, jobs: sa.Table, failed: sa.Table) -> None:
        j = jobs.c
        read_payload = self.engine.text_read
        self.ready = sa.or_(
            sa.and_(j.reserved_at.is_(None), j.available_at <= sa.bindparam("now")),
            j.reserved_at <= sa.bindparam("expired"),
        )
        # DatabaseQueue::getNextAvailableJob. SQLAlchemy renders FOR UPDATE SKIP
        # LOCKED on PostgreSQL and MySQL and nothing on SQLite, where BEGIN IMMEDIATE
        # already makes the claim transaction the only writer.
        self.pop_lock: sa.Select[Any] = (
            sa.select(j.id, j.attempts, *read_payload(j.payload))
            .where(j.queue == sa.bindparam("queue"), self.ready)
            .order_by(j.id)
            .limit(sa.bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        # The same, for a worker that claims only the classes it has handlers for.
        self.pop_lock_named = self.named_pop(self.pop_lock, jobs, self.ready)
        self.pop_mark = (
            sa.update(jobs)
            .where(j.id == sa.bindparam("job_id"))
            # :cap is what the attempts column holds (255 in Laravel 8-12's TINYINT on
            # MySQL, 65535 in 13's SMALLINT): a row Laravel left there stays there (not an
            # error that would block every later pop of the queue).
            .values(
                reserved_at=sa.bindparam("now"),
                attempts=sa.case(
                    (j.attempts < sa.bindparam("cap"), j.attempts + 1),
                    else_=sa.bindparam("cap"),
                ),
            )
        )
        # Fenced by the attempts value the reservation wrote (see laravel_tables.py).
        fence = sa.and_(j.id == sa.bindparam("job_id"), j.attempts == sa.bindparam("held"))
        self.delete = sa.delete(jobs).where(fence)
        # A reservation's row read back (its payload, to release or fail it by id alone:
        # the Kombu transport holds only the receipt), locked for the settlement after it.
        self.held = sa.select(j.queue, *read_payload(j.payload)).where(fence).with_for_update()
        # A reservation renewed: Laravel's workers take a row back once reserved_at is
        # older than their retry_after, so a long job's holder keeps it fresh.
        self.touch = (
            sa.update(jobs)
            .where(fence, j.reserved_at.is_not(None))
            .values(reserved_at=sa.bindparam("now"))
        )
        # Kombu's purge: the rows no one holds (seed 004's clear); Laravel's own
        # DatabaseQueue::clear deletes every row of the queue (clear).
        by_queue = j.queue == sa.bindparam("queue")
        self.purge = sa.delete(jobs).where(by_queue, j.reserved_at.is_(None))
        self.clear = sa.delete(jobs).where(by_queue)
        self.insert = sa.insert(jobs).values({c: sa.bindparam(c) for c in PUSH_COLUMNS})
        self.insert_id = self.engine.returning_id(self.insert, j.id)
        self.insert_rows = self.engine.rows_insert(jobs, PUSH_COLUMNS)
        self.failed_insert = sa.insert(failed).values(
            uuid=sa.bindparam("uuid"),
            connection=sa.bindparam("connection"),
            queue=sa.bindparam("queue"),
            payload=sa.bindparam("payload"),
            exception=sa.bindparam("exception"),
            failed_at=sa.bindparam("failed_at"),
        )
        # DatabaseQueue::size counts every row of the queue, reserved ones too.
        self.size = (
            sa.select(sa.func.count()).select_from(jobs).where(j.queue == sa.bindparam("queue"))
        )
        self.failed_forget = sa.delete(failed).where(failed.c.uuid == sa.bindparam("uuid"))
        self.failed_list = sa.select(failed).order_by(failed.c.id.desc())

    def _build_admin(self, jobs: sa.Table, failed: sa.Table, ready: Any) -> None:
        """What operators read and steer on Laravel's tables (``LaravelAdmin``): the same
        verbs as contract v1's ``queue_stats`` … ``dead_letter_*``, by Laravel's rules
        (a reservation older than ``:expired``, now − retry_after, is ready again)."""
        j, f = jobs.c, failed.c
        read_payload = self.engine.text_read
        now: Any = sa.bindparam("now")
        expired: Any = sa.bindparam("expired")
        held = j.reserved_at > expired
        delayed = sa.and_(j.reserved_at.is_(None), j.available_at > now)
        # Every row is read: grouped as the engine scans fastest (not through the queue
        # index row by row: 65 s at 1M jobs on MariaDB).
        by_queue_scan = self.engine.grouped_by_scan(j.queue)
        self.stats = sa.select(
            by_queue_scan,
            sa.func.count(),
            sa.func.count(sa.case((ready, 1))),
            sa.func.count(sa.case((held, 1))),
            sa.func.count(sa.case((delayed, 1))),
            sa.func.min(sa.case((ready, j.available_at))),
        ).group_by(by_queue_scan)
        self.attempts = sa.select(j.queue, j.attempts, sa.func.count()).group_by(
            j.queue, j.attempts
        )
        # Laravel's claim order is the id among ready rows; delayed ones by when they wake.
        # Two statements (LaravelAdmin.peek): the ready ones past an id (0: from the first)
        # in id order, which the queue index gives (InnoDB's and SQLite's carry the id),
        # stopping at the page; the delayed ones only when fewer are ready. (One statement
        # ordering every unheld row by "ready, else when" sorted the whole queue: 3.0 s for
        # 400k jobs on MariaDB.) A next page (``after``, a keyset): past a ready job, the
        # ready ones past its id, then the delayed ones from the first; past a delayed
        # one, the delayed ones past it.
        peeked = sa.select(
            j.id, j.queue, j.attempts, j.available_at, j.created_at, *read_payload(j.payload)
        ).where(
            j.queue == sa.bindparam("queue"),
            sa.or_(j.reserved_at.is_(None), j.reserved_at <= expired),
        )
        self.peek_ready_after = (
            peeked.where(j.available_at <= now, j.id > sa.bindparam("id"))
            .order_by(j.id)
            .limit(sa.bindparam("n"))
        )
        self.peek_delayed = (
            peeked.where(j.available_at > now)
            .order_by(j.available_at, j.id)
            .limit(sa.bindparam("n"))
        )
        since: Any = sa.bindparam("available_at")
        self.peek_delayed_after = self.peek_delayed.where(
            sa.or_(
                j.available_at > since, sa.and_(j.available_at == since, j.id > sa.bindparam("id"))
            )
        )
        # One job of a queue by id, held or not (a job's page: reserved_at says which).
        self.job = sa.select(
            j.id,
            j.queue,
            j.attempts,
            j.available_at,
            j.created_at,
            j.reserved_at,
            *read_payload(j.payload),
        ).where(j.id == sa.bindparam("id"), j.queue == sa.bindparam("queue"))
        by_queue = j.queue == sa.bindparam("queue")
        self.known = sa.select(
            sa.case(
                (
                    sa.or_(
                        sa.exists().where(by_queue),
                        sa.exists().where(f.queue == sa.bindparam("queue")),
                    ),
                    1,
                ),
                else_=0,
            )
        )
        self.failed_counts = sa.select(f.queue, sa.func.count()).group_by(f.queue)
        listed = sa.select(
            f.id, f.uuid, f.queue, f.exception, f.failed_at, f.connection, *read_payload(f.payload)
        )
        # Newest first; a later page starts below the last id shown (keyset, no OFFSET).
        self.failed_recent = (
            listed.where(f.id < sa.bindparam("before"))
            .order_by(f.id.desc())
            .limit(sa.bindparam("limit"))
        )
        self.failed_recent_queue = self.failed_recent.where(f.queue == sa.bindparam("queue"))
        # By row id or by uuid (what queue:failed shows as the ID).
        self.failed_find = listed.where(
            sa.or_(f.id == sa.bindparam("id"), f.uuid == sa.bindparam("uuid"))
        ).order_by(f.id)
        self.failed_delete = sa.delete(failed).where(f.id == sa.bindparam("id"))
        # Ids alone, oldest first (``failed retry --all``: ids, then the rows in batches).
        self.failed_ids = sa.select(f.id).order_by(f.id)
        self.failed_ids_queue = self.failed_ids.where(f.queue == sa.bindparam("queue"))
        before = f.failed_at < sa.bindparam("before", type_=sa.DateTime)
        self.failed_flush = sa.delete(failed).where(before)
        self.failed_flush_queue = sa.delete(failed).where(before, f.queue == sa.bindparam("queue"))

    def existing(self, ids: Sequence[int]) -> Any:
        """Which of rows ``ids`` still exist, their values bound in (``gone``: a row deleted
        is settled; one another worker took over is still there)."""
        return sa.select(self.jobs.c.id).where(self.jobs.c.id.in_(ids))

    def stored_payload(self, found: Sequence[Any]) -> str | bytes:
        """The payload from the columns a statement here reads it with (the engine's
        ``text_read``): after id and attempts in :attr:`pop_lock`, after queue in
        :attr:`held`, last in :attr:`peek` and the failed-job lists."""
        return self.engine.text_value(found)

    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        """Insert one row of ``jobs`` (:data:`PUSH_COLUMNS`); return its id."""
        return self.engine.inserted_id(tx, self.insert_id, row)

    def insert_jobs(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows of ``jobs`` with one statement."""
        self.insert_rows(tx, rows)


class ExceptionCountQueries:
    """The bridge's own table of ``maxExceptions`` counts (Laravel keeps them in its cache):
    uuid, count, when the count lapses."""

    def __init__(self, table: str) -> None:
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("uuid", sa.String(255), primary_key=True),
            sa.Column("exceptions", sa.Integer, nullable=False),
            sa.Column("expires_at", sa.BigInteger, nullable=False),
        )
        c = self.table.c
        self.bump = (
            sa.update(self.table)
            .where(c.uuid == sa.bindparam("id"), c.expires_at > sa.bindparam("now"))
            .values(exceptions=c.exceptions + 1)
        )
        self.expire = sa.delete(self.table).where(
            sa.or_(c.uuid == sa.bindparam("id"), c.expires_at <= sa.bindparam("now"))
        )
        self.insert = sa.insert(self.table).values(
            uuid=sa.bindparam("id"), exceptions=1, expires_at=sa.bindparam("expires_at")
        )
        self.read = sa.select(c.exceptions).where(c.uuid == sa.bindparam("id"))
        self.forget = sa.delete(self.table).where(c.uuid == sa.bindparam("id"))


class CacheLockQueries:
    """The lock table of Laravel's ``database`` cache store (``cache_locks``), as
    ``Illuminate\\Cache\\DatabaseLock`` acquires and force-releases a lock."""

    def __init__(self, engine: type[Queries], table: str) -> None:
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("key", sa.String(255), primary_key=True),
            sa.Column("owner", sa.String(255), nullable=False),
            sa.Column("expiration", sa.Integer, nullable=False),
        )
        c = self.table.c
        self.release = sa.delete(self.table).where(c.key == sa.bindparam("key"))
        self.insert = engine.insert_or_nothing(self.table).values(
            key=sa.bindparam("key"),
            owner=sa.bindparam("owner"),
            expiration=sa.bindparam("expiration"),
        )
        self.take_over = (
            sa.update(self.table)
            .where(
                c.key == sa.bindparam("key"),
                sa.or_(c.owner == sa.bindparam("owner"), c.expiration <= sa.bindparam("now")),
            )
            .values(owner=sa.bindparam("owner"), expiration=sa.bindparam("expiration"))
        )


class CacheQueries:
    """The table of Laravel's ``database`` cache store (``cache``: key, value, expiration),
    as ``Illuminate\\Cache\\DatabaseStore`` reads and writes it, for the keys a queue
    worker reads there (``queue:pause``'s)."""

    def __init__(self, engine: type[Queries], table: str) -> None:
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("key", sa.String(255), primary_key=True),
            sa.Column("value", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")),
            sa.Column("expiration", sa.Integer, nullable=False),
        )
        c = self.table.c
        # DatabaseStore::many: the keys given, unexpired (an expired row counts as absent).
        self.live = sa.select(c.key, c.expiration).where(
            c.key.in_(sa.bindparam("keys", expanding=True)), c.expiration > sa.bindparam("now")
        )
        # Every unexpired key that starts with :start (a position, not LIKE: no wildcards).
        self.live_from = sa.select(c.key, c.expiration).where(
            engine.text_position(c.key, sa.bindparam("start")) == 1,
            c.expiration > sa.bindparam("now"),
        )
        # DatabaseStore::put (Laravel 8: insert, else update; 11+: upsert): one key's row
        # replaced in one transaction.
        self.forget = sa.delete(self.table).where(c.key == sa.bindparam("key"))
        self.put = sa.insert(self.table).values(
            key=sa.bindparam("key"),
            value=sa.bindparam("value"),
            expiration=sa.bindparam("expiration"),
        )
        # The row as DatabaseStore::forget finds it: present and unexpired.
        self.forget_live = sa.delete(self.table).where(
            c.key == sa.bindparam("key"), c.expiration > sa.bindparam("now")
        )


class BatchQueries:
    """Laravel's ``job_batches`` as ``Illuminate\\Bus\\DatabaseBatchRepository`` writes it
    when a batched job is recorded."""

    def __init__(self, table: str) -> None:
        self.table = sa.Table(
            table,
            sa.MetaData(),
            sa.Column("id", sa.String(255), primary_key=True),
            sa.Column("name", sa.String(255), nullable=False),
            sa.Column("total_jobs", sa.Integer, nullable=False),
            sa.Column("pending_jobs", sa.Integer, nullable=False),
            sa.Column("failed_jobs", sa.Integer, nullable=False),
            sa.Column("failed_job_ids", sa.Text, nullable=False),
            sa.Column("options", sa.Text, nullable=True),
            sa.Column("cancelled_at", sa.Integer, nullable=True),
            sa.Column("created_at", sa.Integer, nullable=False),
            sa.Column("finished_at", sa.Integer, nullable=True),
        )
        c = self.table.c
        by_id = c.id == sa.bindparam("id")
        self.find = sa.select(self.table).where(by_id)
        # DatabaseBatchRepository::updateAtomicValues: the row locked while it is rewritten
        # (FOR UPDATE on the server engines; SQLite's claim transaction is the only writer).
        self.lock = (
            sa.select(c.pending_jobs, c.failed_jobs, c.failed_job_ids)
            .where(by_id)
            .with_for_update()
        )
        self.counts = (
            sa.update(self.table)
            .where(by_id)
            .values(
                pending_jobs=sa.bindparam("pending"),
                failed_jobs=sa.bindparam("failed"),
                failed_job_ids=sa.bindparam("failed_ids"),
            )
        )
        self.finish = sa.update(self.table).where(by_id).values(finished_at=sa.bindparam("now"))
        self.cancel = (
            sa.update(self.table)
            .where(by_id)
            .values(cancelled_at=sa.bindparam("now"), finished_at=sa.bindparam("now"))
        )
