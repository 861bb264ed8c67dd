"""The contract-v1 tables as SQLAlchemy Core metadata, and their creation.

Column names, order and meaning are contract v1's (``../shared/seeds/000``).
Additive, nullable columns are ours, allowed by the contract's
compatibility rule:

* ``reserved_token`` — written afresh by every claim; every settlement matches
  it, so a late ack from a worker whose reservation was taken over changes
  nothing (fencing, seed 004).
* ``uuid`` — the caller's identity for the job (a Celery task id), so a
  dead-letter row carries it without the store parsing payloads.
* ``reserved_by``, ``reserved_instance`` — who holds a reservation (seed 001's consumer
  identity): the holder's name (a Celery node name, ``celery@host``) and the process
  (``host:pid``), written by every claim, cleared by a release; NULL when unheld or when
  the claimer gave no name. ``kombu-sqlqueue stats`` shows them; a worker restarted under
  a dead predecessor's name hands its holds back at once.
* ``expires_at`` — unix seconds after which the message is discarded unconsumed
  (AMQP's per-message and per-queue TTL); NULL for most jobs, which never expire.
  A runtime that ignores it just delivers late messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from .schedules import schedule_table

#: The durable queue contract these tables speak (``askr_jobs`` / ``askr_failed_jobs``).
CONTRACT_VERSION = 1
JOBS_TABLE = "askr_jobs"
FAILED_TABLE = "askr_failed_jobs"
#: Exchange bindings (ours, not contract v1's): every process routes by the same table.
BINDINGS_TABLE = "askr_bindings"
#: Queues with a lifetime (``x-expires``): deleted when nobody has used them for that long.
QUEUES_TABLE = "askr_queues"
#: Enqueue-once identities (ours): when each (queue, key) was first written.
DEDUPE_TABLE = "askr_dedupe"
#: Flow control (ours): one row per queue that has a control in force (a pause, a limit); a queue
#: without a row is claimed by the plain claim, which checks only that there is no row.
CONTROLS_TABLE = "askr_queue_controls"
CLAIM_INDEX = "askr_jobs_claim"
FAILED_QUEUE_INDEX = "askr_failed_jobs_queue"

#: Columns contract v1 defines; a table lacking one of them is not ours to use.
CONTRACT_JOB_COLUMNS = (
    "id",
    "queue",
    "payload",
    "priority",
    "available_at",
    "reserved_until",
    "attempts",
    "max_attempts",
    "created_at",
)
#: Columns this package adds; added in place to a contract-v1 table lacking them.
ADDITIVE_JOB_COLUMNS = (
    "reserved_token",
    "uuid",
    "expires_at",
    "reserved_by",
    "reserved_instance",
    "concurrency_key",
)
#: The statement adding each column of ours to a table created without it: the additive
#: job columns, and columns our own tables gained after their first release. Literal
#: DDL, portable to every engine (nullable, no default).
ADD_COLUMN: dict[tuple[str, str], sa.TextClause] = {
    (JOBS_TABLE, "reserved_token"): sa.text(
        "ALTER TABLE askr_jobs ADD COLUMN reserved_token VARCHAR(64) NULL"
    ),
    (JOBS_TABLE, "uuid"): sa.text("ALTER TABLE askr_jobs ADD COLUMN uuid VARCHAR(255) NULL"),
    (JOBS_TABLE, "expires_at"): sa.text("ALTER TABLE askr_jobs ADD COLUMN expires_at BIGINT NULL"),
    (JOBS_TABLE, "reserved_by"): sa.text(
        "ALTER TABLE askr_jobs ADD COLUMN reserved_by VARCHAR(255) NULL"
    ),
    (JOBS_TABLE, "reserved_instance"): sa.text(
        "ALTER TABLE askr_jobs ADD COLUMN reserved_instance VARCHAR(255) NULL"
    ),
    (JOBS_TABLE, "concurrency_key"): sa.text(
        "ALTER TABLE askr_jobs ADD COLUMN concurrency_key VARCHAR(255) NULL"
    ),
    (FAILED_TABLE, "concurrency_key"): sa.text(
        "ALTER TABLE askr_failed_jobs ADD COLUMN concurrency_key VARCHAR(255) NULL"
    ),
    (QUEUES_TABLE, "message_ttl_ms"): sa.text(
        "ALTER TABLE askr_queues ADD COLUMN message_ttl_ms BIGINT NULL"
    ),
    # Rate limits came a release after the controls table.
    **{
        (CONTROLS_TABLE, column): sa.text(
            f"ALTER TABLE askr_queue_controls ADD COLUMN {column} {kind} NULL"
        )
        for column, kind in (
            ("rate_count", "INTEGER"),
            ("rate_period_ms", "BIGINT"),
            ("rate_burst", "INTEGER"),
            ("rate_tat_us", "BIGINT"),
            ("key_concurrency", "INTEGER"),
        )
    },
}


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table a store needs, the columns it uses, and what to do when it is missing."""

    name: str
    columns: tuple[str, ...]
    create_hint: str


_CREATE_HINT = "create it with `kombu-sqlqueue create-tables URL` or set create_tables=True"

#: What the contract-v1 store verifies before use.
CONTRACT_TABLES = (
    TableSpec(JOBS_TABLE, (*CONTRACT_JOB_COLUMNS, *ADDITIVE_JOB_COLUMNS), _CREATE_HINT),
    TableSpec(
        FAILED_TABLE,
        ("id", "uuid", "queue", "payload", "exception", "attempts", "failed_at", "concurrency_key"),
        _CREATE_HINT,
    ),
    TableSpec(BINDINGS_TABLE, ("exchange", "routing_key", "queue", "exchange_type"), _CREATE_HINT),
    TableSpec(
        QUEUES_TABLE, ("name", "expires_seconds", "last_used_at", "message_ttl_ms"), _CREATE_HINT
    ),
    TableSpec(DEDUPE_TABLE, ("queue", "dedupe_key", "first_at"), _CREATE_HINT),
    TableSpec(
        CONTROLS_TABLE,
        (
            "queue",
            "paused",
            "resume_at",
            "concurrency",
            "updated_at",
            "rate_count",
            "rate_period_ms",
            "rate_burst",
            "rate_tat_us",
            "key_concurrency",
        ),
        _CREATE_HINT,
    ),
)

# MySQL cannot index TEXT without a prefix length, and its BLOB stops at 64 KiB.
_QueueName = sa.Text().with_variant(sa.String(255), "mysql", "mariadb")
_Payload = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


def build_metadata(now_sql: str) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    """Return fresh metadata with the two tables; ``now_sql`` is the engine's unix-seconds clock."""
    metadata = sa.MetaData()
    now_default = sa.text(now_sql)
    jobs = sa.Table(
        JOBS_TABLE,
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("queue", _QueueName, nullable=False, server_default="default"),
        sa.Column("payload", _Payload, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("available_at", sa.BigInteger, nullable=False),
        sa.Column("reserved_until", sa.BigInteger, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="25"),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default=now_default),
        sa.Column("reserved_token", sa.String(64), nullable=True),
        sa.Column("uuid", sa.String(255), nullable=True),
        sa.Column("expires_at", sa.BigInteger, nullable=True),
        sa.Column("reserved_by", sa.String(255), nullable=True),
        sa.Column("reserved_instance", sa.String(255), nullable=True),
        # Flow control's per-key limit: at most the queue's key_concurrency jobs of one key
        # held at once. No index: a keyed claim counts held rows, which the claim index finds.
        sa.Column("concurrency_key", sa.String(255), nullable=True),
        # Contract v1 says AUTOINCREMENT: ids are never reused after a delete.
        sqlite_autoincrement=True,
        # Queue names and tokens are matched exactly: a binary collation on MySQL,
        # whose default collation would match "Emails" to "emails".
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Index(
        CLAIM_INDEX,
        jobs.c.queue,
        jobs.c.reserved_until,
        jobs.c.priority.desc(),
        jobs.c.available_at,
        jobs.c.id,
    )
    failed = sa.Table(
        FAILED_TABLE,
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("uuid", sa.Text, nullable=True),
        sa.Column("queue", _QueueName, nullable=False),
        sa.Column("payload", _Payload, nullable=False),
        sa.Column("exception", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("failed_at", sa.BigInteger, nullable=False, server_default=now_default),
        # The job's per-key limit key, so a retried dead letter is limited as it was.
        sa.Column("concurrency_key", sa.String(255), nullable=True),
        sqlite_autoincrement=True,
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # Per-queue counts and lists of dead letters from the index alone: the dashboard's
    # overview counts them on every refresh (a scan of 100k rows with their tracebacks:
    # 0.68 s on MariaDB; 0.026 s from this index). Tables made before it lack it:
    # docs/operations.md says how to add it.
    sa.Index(FAILED_QUEUE_INDEX, failed.c.queue, failed.c.id)
    sa.Table(
        BINDINGS_TABLE,
        metadata,
        sa.Column("exchange", sa.String(255), primary_key=True),
        sa.Column("routing_key", sa.String(255), primary_key=True),
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("exchange_type", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False, server_default=now_default),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Table(
        QUEUES_TABLE,
        metadata,
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("expires_seconds", sa.BigInteger, nullable=True),
        sa.Column("last_used_at", sa.BigInteger, nullable=False),
        # x-message-ttl: a publisher that reads the queue's bindings stamps its messages.
        sa.Column("message_ttl_ms", sa.BigInteger, nullable=True),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Table(
        DEDUPE_TABLE,
        metadata,
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("dedupe_key", sa.String(255), primary_key=True),
        sa.Column("first_at", sa.BigInteger, nullable=False),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    sa.Table(
        CONTROLS_TABLE,
        metadata,
        sa.Column("queue", sa.String(255), primary_key=True),
        # 1 while the queue is paused; claims hand nothing out of it.
        sa.Column("paused", sa.SmallInteger, nullable=False, server_default="0"),
        # Unix seconds when a pause ends by itself (``pause --for``); NULL: until resumed.
        sa.Column("resume_at", sa.BigInteger, nullable=True),
        # At most this many jobs of the queue held at once, across every worker; NULL: no limit.
        sa.Column("concurrency", sa.Integer, nullable=True),
        # A rate limit: at most rate_count jobs handed out per rate_period_ms, up to
        # rate_burst at once; rate_tat_us: when (unix microseconds) the next claim conforms.
        sa.Column("rate_count", sa.Integer, nullable=True),
        sa.Column("rate_period_ms", sa.BigInteger, nullable=True),
        sa.Column("rate_burst", sa.Integer, nullable=True),
        sa.Column("rate_tat_us", sa.BigInteger, nullable=True),
        # At most this many jobs of one concurrency_key held at once; NULL: no per-key limit.
        sa.Column("key_concurrency", sa.Integer, nullable=True),
        sa.Column("updated_at", sa.BigInteger, nullable=False, server_default=now_default),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # Periodic tasks (kombu_sqlqueue.beat): made with the others, read only by beats.
    schedule_table(metadata)
    return metadata, jobs, failed
