"""MariaDB ≥ 10.6 and MySQL ≥ 8.0 (PyMySQL): ``SELECT … FOR UPDATE SKIP LOCKED``, then ``UPDATE``.

Overrides, each for a reason:

* the claim: neither has ``UPDATE … RETURNING``, so it locks the ready rows
  with ``SELECT … FOR UPDATE SKIP LOCKED`` (each index-ordered half of the
  ready predicate separately), updates them by id and reads them back, all in
  one transaction;
* enqueue: MySQL has no ``INSERT … RETURNING``; one multi-row INSERT gets
  its ids from ``LAST_INSERT_ID()`` and ``@@auto_increment_increment`` (InnoDB gives a
  statement whose row count is known in advance consecutive auto-increment values, one
  increment apart: Galera sets the increment to the cluster's size);
* deadlocks (1213) and lock-wait timeouts (1205) are retried by the store.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL

from ...exceptions import (
    MessageTooLarge,
    StoreConditionError,
    StoreFullError,
    StorePermissionError,
    StoreReadOnlyError,
)
from ..claiming import ClaimedRow
from ..network import SilenceBound
from .base import UNCONTROLLED, Queries, ServerEngine

if TYPE_CHECKING:
    from ..executor import Tx

#: Server error codes that are a condition of the server, not a lost connection.
_CONDITIONS: dict[int, type[StoreConditionError]] = {
    1021: StoreFullError,  # ER_DISK_FULL
    1114: StoreFullError,  # ER_RECORD_FILE_FULL: "The table is full"
    1290: StoreReadOnlyError,  # ER_OPTION_PREVENTS_STATEMENT: --read-only
    1792: StoreReadOnlyError,  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    1836: StoreReadOnlyError,  # ER_READ_ONLY_MODE
    1874: StoreReadOnlyError,  # ER_INNODB_READ_ONLY
    1142: StorePermissionError,  # ER_TABLEACCESS_DENIED_ERROR
    1044: StorePermissionError,  # ER_DBACCESS_DENIED_ERROR
    1227: StorePermissionError,  # ER_SPECIFIC_ACCESS_DENIED_ERROR
    1153: MessageTooLarge,  # ER_NET_PACKET_TOO_LARGE: past max_allowed_packet
}


# The claim's read-and-lock half (see MySQLQueries.job_claim); {uncontrolled} as in base's.
_CLAIM = """
        (SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
                expires_at, 0 AS lapsed
           FROM askr_jobs
          WHERE queue = :queue AND reserved_until IS NULL AND available_at <= :now {uncontrolled}
          ORDER BY priority DESC, available_at, id
          LIMIT :n FOR UPDATE SKIP LOCKED)
        UNION ALL
        (SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
                expires_at, 1 AS lapsed
           FROM askr_jobs
          WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now {uncontrolled}
          ORDER BY priority DESC, available_at, id
          LIMIT :n FOR UPDATE SKIP LOCKED)
        """


class MySQLQueries(Queries):
    now_sql: ClassVar[str] = "(unix_timestamp())"
    # SYSDATE(6): the time now (NOW() is the statement's start), to the microsecond.
    clock_us = sa.text("SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)")

    # The schema, on the server of that host, port and data directory (MariaDB has no
    # @@server_uuid; every user may read these).
    database_identity = sa.text("SELECT DATABASE(), @@hostname, @@port, @@datadir")
    # ``USE other`` moves a connection to another schema: its identity is read again for
    # every enlist block.
    identity_lasts = False

    @staticmethod
    def grouped_by_scan(column: Any) -> Any:
        # Grouped by the column itself, MariaDB and MySQL walk an index on it for the order
        # and read every row by its key: Laravel's stats over 1M jobs took 65 s through
        # jobs_queue_index. By an expression, they scan the table (2.1 s) or an index
        # covering the query (0.6 s with jobs (queue, reserved_at, available_at)).
        return sa.func.concat(column, "")

    @staticmethod
    def ids_issued(table: str) -> sa.Executable:
        # The table's next AUTO_INCREMENT, less one, in ids this server issues: one
        # increment apart (Galera's wsrep_auto_increment_control sets the increment to the
        # cluster's size and gives each node its own offset), so the count is exact while
        # one node takes the writes. MariaDB reads AUTO_INCREMENT from InnoDB live; MySQL 8
        # caches it (information_schema_stats_expiry, 24 h by default).
        return sa.text(
            "SELECT (AUTO_INCREMENT - 1) DIV @@auto_increment_increment"
            " FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table"
        ).bindparams(table=table)

    # The spacing of one statement's auto-increment ids (1 but under Galera or a
    # multi-primary setup).
    auto_increment_step = sa.text("SELECT @@auto_increment_increment")

    queue_add = sa.text(
        """
        INSERT IGNORE INTO askr_queues (name, expires_seconds, last_used_at, message_ttl_ms)
        VALUES (:name, :expires, :now, :message_ttl_ms)
        """
    )

    @staticmethod
    def insert_or_nothing(table: sa.Table) -> Any:
        # MySQL has no ON CONFLICT: INSERT IGNORE is its insert-or-nothing.
        return sa.insert(table).prefix_with("IGNORE")

    # MySQL has no ON CONFLICT: INSERT IGNORE is its insert-or-nothing.
    # MySQL has no ON CONFLICT: ON DUPLICATE KEY UPDATE is its upsert.
    control_pause = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, resume_at, updated_at)
        VALUES (:queue, 1, :resume_at, :now)
        ON DUPLICATE KEY UPDATE paused = 1, resume_at = :resume_at, updated_at = :now
        """
    )
    control_key_limit = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, key_concurrency, updated_at)
        VALUES (:queue, 0, :key_concurrency, :now)
        ON DUPLICATE KEY UPDATE key_concurrency = :key_concurrency, updated_at = :now
        """
    )
    control_limit = sa.text(
        """
        INSERT INTO askr_queue_controls (queue, paused, concurrency, updated_at)
        VALUES (:queue, 0, :concurrency, :now)
        ON DUPLICATE KEY UPDATE concurrency = :concurrency, updated_at = :now
        """
    )
    # MySQL's assignments see the ones before them: the due time is decided first.
    control_rate = sa.text(
        """
        INSERT INTO askr_queue_controls
               (queue, paused, rate_count, rate_period_ms, rate_burst, rate_tat_us, updated_at)
        VALUES (:queue, 0, :count, :period_ms, :burst, 0, :now)
        ON DUPLICATE KEY UPDATE
           rate_tat_us = CASE WHEN rate_count = :count AND rate_period_ms = :period_ms
                               AND rate_burst = :burst THEN rate_tat_us ELSE 0 END,
           rate_count = :count, rate_period_ms = :period_ms, rate_burst = :burst,
           updated_at = :now
        """
    )
    # The queue's row locked until the claim commits (see PostgreSQLQueries.control_get).
    control_get = sa.text(
        """
        SELECT queue, paused, resume_at, concurrency, rate_count, rate_period_ms, rate_burst,
               rate_tat_us, key_concurrency
          FROM askr_queue_controls
         WHERE queue = :queue FOR UPDATE
        """
    )
    dedupe_add = sa.text(
        """
        INSERT IGNORE INTO askr_dedupe (queue, dedupe_key, first_at) VALUES (:queue, :key, :now)
        """
    )
    binding_add = sa.text(
        """
        INSERT IGNORE INTO askr_bindings (exchange, routing_key, queue, exchange_type, created_at)
        VALUES (:exchange, :routing_key, :queue, :exchange_type, :now)
        """
    )
    # Both halves of the ready predicate in one statement, each reading the claim index
    # in order and locking with SKIP LOCKED (MariaDB 10.4+ and MySQL 8.0.31+ take a
    # locking clause in a parenthesized UNION member), reading the columns handed out:
    # with the UPDATE, a claim is BEGIN, lock, mark, COMMIT (it was six statements, each
    # a round trip and PyMySQL parsing its result in Python). It keeps the claim's name:
    # neither MariaDB nor MySQL has UPDATE … RETURNING, so where the other engines' one
    # statement reserves and reads, this one reads and locks and job_claim_mark reserves.
    job_claim = sa.text(_CLAIM.format(uncontrolled=UNCONTROLLED))
    job_claim_controlled = sa.text(_CLAIM.format(uncontrolled=""))
    # An empty poll's claim is a locking read of the claim's two halves, each with the
    # plain claim's controls probe: measured 0.70 ms a poll against 0.56-0.66 before flow
    # control (docs/benchmarks.md). After an empty claim, a plain read of whether anything
    # is ready comes first, and the locking claim runs only when something is.
    claim_peeks_when_idle: ClassVar[bool] = True
    job_claim_mark = sa.text(
        """
        UPDATE askr_jobs
           SET reserved_until = :until, attempts = attempts + 1, reserved_token = :token,
               reserved_by = :holder, reserved_instance = :instance
         WHERE id IN :ids
        """
    ).bindparams(sa.bindparam("ids", expanding=True))

    # MySQL has no DELETE … RETURNING (MariaDB has, MySQL 8 not): the rows still held
    # are locked and read, then deleted, in one transaction.
    job_ack_many_locking = sa.text(
        "SELECT id FROM askr_jobs WHERE reserved_token = :token AND id IN :ids FOR UPDATE"
    ).bindparams(sa.bindparam("ids", expanding=True))
    ack_rows_in_one_statement: ClassVar[bool] = False

    def ack_rows(self, tx: Tx, token: str, ids: Sequence[int]) -> list[int]:
        locked = tx.execute_bound(self.job_ack_many_locking, {"token": token, "ids": ids})
        held = [int(r[0]) for r in locked.fetchall()]
        if held:
            tx.execute_bound(self.job_ack_many, {"token": token, "ids": held})
        return held

    def claim_rows(
        self, tx: Tx, params: dict[str, Any], controlled: bool = False
    ) -> list[ClaimedRow]:
        # Each half is in claim order; together they are not, and only n are taken.
        candidates = sorted(
            (
                ClaimedRow.read(r, r[9])
                for r in tx.execute(self.claim_statement(controlled), params)
            ),
            key=ClaimedRow.order,
        )
        picked = candidates[: params["n"]]
        if not picked:
            return []
        tx.execute_bound(
            self.job_claim_mark,
            {
                "ids": [r.id for r in picked],
                "until": params["until"],
                "token": params["token"],
                "holder": params["holder"],
                "instance": params["instance"],
            },
        )
        # The rows as marked: attempts counted (the rows are locked: no one else wrote).
        return [r._replace(attempts=r.attempts + 1) for r in picked]

    def insert_jobs(self, tx: Tx, rows: list[dict[str, Any]]) -> list[int]:
        first = int(self._insert_values(tx, rows, returning=False).lastrowid)
        if len(rows) == 1:
            return [first]
        (step,) = tx.execute(self.auto_increment_step).fetchone()
        return list(range(first, first + int(step) * len(rows), int(step)))

    # MySQL 8 has no INSERT … RETURNING (MariaDB has): the connection's insert id.
    # (rows_insert stays multi-row VALUES: a JSON_TABLE of one JSON parameter, measured,
    # took 1.5-2x as long on MariaDB 10.11.)
    @staticmethod
    def returning_id(insert: sa.Insert, id_column: Any) -> sa.Executable:
        return insert

    @staticmethod
    def inserted_id(tx: Tx, statement: sa.Executable, row: dict[str, Any]) -> int:
        return int(tx.execute(statement, row).lastrowid)


def _bound_silence(dbapi_conn: Any, bound: SilenceBound) -> None:
    """Set ``bound``'s options on the TCP socket under a driver's connection. PyMySQL
    keeps the socket as ``_sock`` (private, stable since 0.6); mysqlclient gives its
    descriptor (``fileno()``), borrowed by a socket object and given back."""
    sock = getattr(dbapi_conn, "_sock", None)
    if isinstance(sock, socket.socket):
        bound.apply(sock)
        return
    fileno = getattr(dbapi_conn, "fileno", None)
    if callable(fileno):
        borrowed = socket.socket(fileno=fileno())
        try:
            bound.apply(borrowed)
        finally:
            borrowed.detach()  # the descriptor stays the driver's


class MySQLEngine(ServerEngine):
    """MariaDB 10.6+ / MySQL 8.0+ through PyMySQL."""

    #: The server's max_allowed_packet, read on every new connection.
    max_allowed_packet: int = 16 * 1024 * 1024
    max_payload_bytes: int = 8 * 1024 * 1024 - 4096

    name: ClassVar[str] = "mysql"
    default_driver: ClassVar[str] = "pymysql"
    queries: ClassVar[type[Queries]] = MySQLQueries
    dbapi_modules: ClassVar[tuple[str, ...]] = ("pymysql", "MySQLdb")

    def normalize_url(self, url: URL) -> URL:
        url = super().normalize_url(url)
        if "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
        return url

    def create_engine(self, url: sa.URL, options: Any) -> sa.Engine:
        bound = SilenceBound(options.network_timeout)
        connect_args = {"connect_timeout": bound.connect_timeout}
        if "connect_timeout" in url.query:  # the user's own value wins
            connect_args = {}
        engine = sa.create_engine(url, pool_size=4, max_overflow=-1, connect_args=connect_args)

        # Neither driver takes keepalive settings, and their read timeouts would cut a
        # long statement on a live server (a lock wait): the socket gets them itself.
        # insert=True: before SQLAlchemy's own first-connect queries (dialect.initialize).
        @sa.event.listens_for(engine, "connect", insert=True)
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            _bound_silence(dbapi_conn, bound)

        return engine

    def prepare_connection(self, conn: Any) -> None:
        driver = conn.driver_connection
        driver.autocommit(True)  # see ServerEngine
        # With NO_BACKSLASH_ESCAPES a quote is the only character to escape, and PyMySQL
        # then escapes strings with one str.replace instead of a per-character translate
        # in Python: 40% of a bulk insert of PHP apps' JSON payloads (full of \ and "). Every
        # value is a bound parameter and no SQL text here holds a backslash.
        cursor = driver.cursor()
        cursor.execute("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')")
        # Under InnoDB's default REPEATABLE READ a claim's SELECT … FOR UPDATE SKIP LOCKED
        # keeps a lock on every row it read until commit, matching or not (and gap locks):
        # the other workers — another runtime's too, SKIP LOCKED as well — then pass over rows this
        # one only looked at (a claim by class reads past every job of the classes it
        # leaves alone). READ COMMITTED releases a row the WHERE refused at once.
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        # A statement longer than max_allowed_packet is refused (1153) and the connection
        # dropped. PyMySQL interpolates a payload into the statement's text, escaped: up
        # to twice its size. So a payload may be half the packet, less the statement.
        cursor.execute("SELECT @@max_allowed_packet")
        (packet,) = cursor.fetchone()
        cursor.close()
        self.max_allowed_packet = int(packet)
        self.max_payload_bytes = max(0, int(packet) // 2 - 4096)

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        # DDL commits implicitly in MySQL, so a named session lock (not a transaction)
        # keeps two processes from creating the tables at once; released right after.
        conn.exec_driver_sql("SELECT GET_LOCK('askr_jobs_schema', 60)")
        try:
            yield
        finally:
            conn.exec_driver_sql("SELECT RELEASE_LOCK('askr_jobs_schema')")

    def payload_limit_hint(self) -> str:
        return (
            f"half the server's max_allowed_packet ({self.max_allowed_packet} bytes): raise it "
            "on the server (SET GLOBAL max_allowed_packet, or [mysqld] max_allowed_packet)"
        )

    def condition_error(self, exc: BaseException) -> type[StoreConditionError] | None:
        code = exc.args[0] if getattr(exc, "args", None) else None
        if code == 1030 and "28" in str(exc):  # "Got error 28 (No space left) from engine"
            return StoreFullError
        return _CONDITIONS.get(code) if isinstance(code, int) else None

    def is_busy_error(self, exc: BaseException) -> bool:
        code = exc.args[0] if getattr(exc, "args", None) else None
        return code in (1205, 1213)  # lock wait timeout, deadlock

    def is_connection_error(self, exc: BaseException) -> bool:
        # By name: PyMySQL and mysqlclient (MySQLdb) raise same-named classes.
        return type(exc).__name__ in ("OperationalError", "InterfaceError")
