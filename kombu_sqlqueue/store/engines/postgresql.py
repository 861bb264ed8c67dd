"""PostgreSQL (psycopg 3): row locks with ``FOR UPDATE SKIP LOCKED``, ``RETURNING`` everywhere.

Overrides, each for a reason:

* the claim locks the rows it considers with ``SKIP LOCKED``, so concurrent
  claimers pass each other instead of queueing on one row; PostgreSQL refuses
  ``FOR UPDATE`` inside a ``UNION``, so the two index-ordered halves of the
  ready predicate are CTEs. The never-reserved half orders by
  ``reserved_until`` first (all NULL there, so the order is unchanged): without
  it PostgreSQL does not see that the claim index already gives that order and
  sorts the whole queue (109 ms per claim at 100 000 waiting; 0.5 ms with it);
* an enqueue and its NOTIFY are one statement (one round trip fewer); so are a
  consumer's held acks (of one claim) and its next claim (``job_ack_and_claim``), the
  claim leaving the acked ids out;
* enqueue uses ``RETURNING id``: psycopg has no ``lastrowid``; a layout's bulk
  insert is one JSON parameter (see ``rows_insert``);
* the dead-letter copy casts its parameters: in a ``SELECT`` list PostgreSQL
  cannot infer a parameter's type;
* wake-ups: an enqueue of a ready job NOTIFYs its queue's channel in its
  transaction (delivered at commit), and one idle consumer per queue set at a
  time ``LISTEN``s on a connection of its own (``PgListener``: the others wait
  their turn on an advisory lock), so a new job reaches a consumer in
  milliseconds instead of a polling interval, without waking them all.
  Polling stays the fallback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
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
from .base import UNCONTROLLED, Listener, Queries, RowsInsert, ServerEngine, check_choice

logger = logging.getLogger(__name__)

#: NOTIFY channels are this prefix and a digest of the queue name (:func:`channel_of`);
#: the payload is the queue name.
CHANNEL_PREFIX = "askr_q_"
#: Values PostgreSQL accepts for ``synchronous_commit``.
SYNCHRONOUS_COMMIT_MODES = ("on", "off", "local", "remote_write", "remote_apply")

if TYPE_CHECKING:
    from ..executor import Tx


#: SQLSTATEs that are a condition of the server, not a lost connection.
_CONDITIONS: dict[str, type[StoreConditionError]] = {
    "53100": StoreFullError,  # disk_full
    "25006": StoreReadOnlyError,  # read_only_sql_transaction (a standby, or read-only default)
    "42501": StorePermissionError,  # insufficient_privilege
    "54000": MessageTooLarge,  # program_limit_exceeded (a value past 1 GB)
}


# The claim's two halves (see the module docstring), then the pick of the first ``n``;
# ``not_acked``: what job_ack_and_claim adds to keep its own acked rows out;
# ``uncontrolled``: base.UNCONTROLLED in the plain claim (see Queries.job_claim).
_CLAIM_PICKED = """
        fresh AS (
                 SELECT id, priority, available_at, FALSE AS lapsed FROM askr_jobs
                  WHERE queue = :queue AND reserved_until IS NULL AND available_at <= :now
                        {not_acked} {uncontrolled}
                  ORDER BY reserved_until, priority DESC, available_at, id
                  LIMIT :n FOR UPDATE SKIP LOCKED),
             lapsed AS (
                 SELECT id, priority, available_at, TRUE AS lapsed FROM askr_jobs
                  WHERE queue = :queue AND reserved_until <= :now AND available_at <= :now
                        {not_acked} {uncontrolled}
                  ORDER BY priority DESC, available_at, id
                  LIMIT :n FOR UPDATE SKIP LOCKED),
             picked AS (
                 SELECT id, lapsed FROM (SELECT * FROM fresh UNION ALL SELECT * FROM lapsed)
                     AS ready
                  ORDER BY priority DESC, available_at, id LIMIT :n)"""
# The acked ids are left out; and the claim's candidates wait for the DELETE to finish (an
# uncorrelated subquery on it: run once, before the scan hands a row to FOR UPDATE), so the
# statement takes its claim's row locks only after its acks' — the order of the
# multi-statement path, which cannot deadlock with a renewal or another consumer's takeover.
_NOT_ACKED = "AND id <> ALL(CAST(:ack_ids AS BIGINT[])) AND (SELECT count(*) FROM acked) >= 0"
_CLAIM_RESERVE = """
        UPDATE askr_jobs AS j
           SET reserved_until = :until, attempts = j.attempts + 1, reserved_token = :token,
               reserved_by = :holder, reserved_instance = :instance
          FROM picked WHERE j.id = picked.id
        RETURNING j.id, j.queue, j.payload, j.priority, j.available_at, j.attempts,
                  j.max_attempts, j.uuid, j.expires_at, picked.lapsed"""


class PostgreSQLQueries(Queries):
    now_sql: ClassVar[str] = "(CAST(extract(epoch FROM now()) AS BIGINT))"
    # clock_timestamp(): the time now, not the transaction's start.
    clock_us = sa.text("SELECT CAST(extract(epoch FROM clock_timestamp()) * 1000000 AS BIGINT)")

    # The database by name and oid, on the cluster that started at that moment on that
    # port (data_directory would say it best, but only a superuser may read it), and the
    # schema our unqualified table names resolve to (another search_path, other tables).
    database_identity = sa.text(
        """
        SELECT current_database(), CAST(pg_postmaster_start_time() AS TEXT),
               current_setting('port'),
               (SELECT CAST(oid AS TEXT) FROM pg_database WHERE datname = current_database()),
               current_schema()
        """
    )

    job_notify = sa.text("SELECT pg_notify(:channel, :queue)")
    job_enqueue_notify = sa.text(
        """
        WITH ins AS (
            INSERT INTO askr_jobs
                   (queue, payload, priority, available_at, attempts, max_attempts, created_at,
                    uuid, expires_at, concurrency_key)
            VALUES (:queue, :payload, :priority, :available_at, :attempts, :max_attempts,
                    :created_at, :uuid, :expires_at, :concurrency_key)
            RETURNING id)
        SELECT id, pg_notify(CAST(:channel AS TEXT), CAST(:queue AS TEXT)) FROM ins
        """
    )
    job_claim = sa.text(
        f"WITH {_CLAIM_PICKED.format(not_acked='', uncontrolled=UNCONTROLLED)} {_CLAIM_RESERVE}"
    )
    job_claim_controlled = sa.text(
        f"WITH {_CLAIM_PICKED.format(not_acked='', uncontrolled='')} {_CLAIM_RESERVE}"
    )

    # One statement: RETURNING reads the CTE's flag (no pre-read as on SQLite), so the
    # claim needs no transaction of its own (see JobStore.claim).
    claim_in_one_statement: ClassVar[bool] = True

    def claim_rows(
        self, tx: Tx, params: dict[str, Any], controlled: bool = False
    ) -> list[ClaimedRow]:
        claimed = tx.execute(self.claim_statement(controlled), params)
        return [ClaimedRow.read(r, r[9]) for r in claimed]

    # A consumer's held acks (of one claim token) and its next claim as one statement: one
    # round trip and one commit. PostgreSQL leaves a row changed by two parts of one
    # statement undefined, so the claim's candidates exclude the ids being acked (a row whose
    # reservation just lapsed would otherwise be one).
    job_ack_and_claim = sa.text(
        f"""
        WITH acked AS (
                 DELETE FROM askr_jobs
                  WHERE reserved_token = :ack_token AND id = ANY(CAST(:ack_ids AS BIGINT[]))
                 RETURNING id),
             {_CLAIM_PICKED.format(not_acked=_NOT_ACKED, uncontrolled=UNCONTROLLED)},
             claimed AS ({_CLAIM_RESERVE})
        SELECT id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
               expires_at, lapsed, FALSE AS acked FROM claimed
        UNION ALL
        SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, TRUE FROM acked
        """
    )
    ack_and_claim_in_one_statement: ClassVar[bool] = True

    def ack_and_claim_rows(
        self, tx: Tx, token: str, ids: Sequence[int], params: dict[str, Any]
    ) -> tuple[list[int], list[ClaimedRow]]:
        binds = {**params, "ack_token": token, "ack_ids": list(ids)}
        acked: list[int] = []
        claimed: list[ClaimedRow] = []
        for r in tx.execute(self.job_ack_and_claim, binds):
            if r[10]:
                acked.append(int(r[0]))
            else:
                claimed.append(ClaimedRow.read(r, r[9]))
        return acked, claimed

    binding_add = sa.text(
        """
        INSERT INTO askr_bindings (exchange, routing_key, queue, exchange_type, created_at)
        VALUES (:exchange, :routing_key, :queue, :exchange_type, :now)
        ON CONFLICT DO NOTHING
        """
    )
    queue_add = sa.text(
        """
        INSERT INTO askr_queues (name, expires_seconds, last_used_at, message_ttl_ms)
        VALUES (:name, :expires, :now, :message_ttl_ms) ON CONFLICT DO NOTHING
        """
    )
    job_dead_letter_copy = sa.text(
        """
        INSERT INTO askr_failed_jobs
               (uuid, queue, payload, exception, attempts, failed_at, concurrency_key)
        SELECT uuid, queue, payload, CAST(:exception AS TEXT),
               attempts - CAST(:uncounted AS INTEGER), CAST(:now AS BIGINT), concurrency_key
          FROM askr_jobs WHERE id = :id AND reserved_token = :token
        """
    )

    @staticmethod
    def ids_issued(table: str) -> sa.Executable:
        # The id column's sequence (serial or identity) — its last value, without
        # advancing it (nextval would), NULL before the first.
        return sa.text(
            "SELECT pg_sequence_last_value(CAST("
            "pg_get_serial_sequence(quote_ident(:table), 'id') AS regclass))"
        ).bindparams(table=table)

    @staticmethod
    def insert_or_nothing(table: sa.Table) -> Any:
        # The same ON CONFLICT DO NOTHING, as PostgreSQL's dialect renders it.
        return pg_insert(table).on_conflict_do_nothing()

    def __init__(self) -> None:
        super().__init__()
        self.job_enqueue_returning = self.job_enqueue.returning(self.jobs.c.id)

    def insert_job(self, tx: Tx, row: dict[str, Any]) -> int:
        if row["available_at"] <= row["created_at"]:  # ready now: wake idle consumers
            notify = {**row, "channel": channel_of(row["queue"])}
            return int(tx.execute(self.job_enqueue_notify, notify).fetchone()[0])
        return int(tx.execute(self.job_enqueue_returning, row).fetchone()[0])

    # The queue's row locked until the claim commits: claims of a controlled queue are one
    # at a time, so a concurrency limit's count of held jobs cannot be raced past.
    control_get = sa.text(
        """
        SELECT queue, paused, resume_at, concurrency, rate_count, rate_period_ms, rate_burst,
               rate_tat_us, key_concurrency
          FROM askr_queue_controls
         WHERE queue = :queue FOR UPDATE
        """
    )

    def announce_ready(self, tx: Tx, queue: str) -> None:
        tx.execute(self.job_notify, {"channel": channel_of(queue), "queue": queue})

    def insert_jobs(self, tx: Tx, rows: list[dict[str, Any]]) -> list[int]:
        ids = super().insert_jobs(tx, rows)
        for queue in {r["queue"] for r in rows if r["available_at"] <= r["created_at"]}:
            self.announce_ready(tx, queue)
        return ids

    @staticmethod
    def text_position(haystack: Any, needle: Any) -> Any:
        # PostgreSQL has no instr(); strpos() is the same function.
        return sa.func.strpos(haystack, needle)

    @staticmethod
    def rows_insert(table: sa.Table, columns: Sequence[str]) -> RowsInsert:
        # Many rows as ONE parameter, a JSON array of rows: psycopg re-parses the
        # placeholders of a long statement on every execute (its cache stops at 50
        # parameters) and escapes every element of a text[] array in Python (170 µs for
        # a payload full of quotes); json.dumps is C and PostgreSQL parses JSON fast.
        given = (
            sa.func.json_to_recordset(sa.cast(sa.bindparam("rows"), sa.JSON))
            .table_valued(*(sa.column(c, table.c[c].type) for c in columns))
            .render_derived(name="t", with_types=True)
        )
        insert = sa.insert(table).from_select(
            list(columns), sa.select(*(given.c[c] for c in columns))
        )

        def run(tx: Tx, rows: Sequence[dict[str, Any]]) -> None:
            tx.execute(insert, {"rows": json.dumps(rows, ensure_ascii=False)})

        return run


class PostgreSQLEngine(ServerEngine):
    """PostgreSQL 12+ through psycopg 3."""

    name: ClassVar[str] = "postgresql"
    default_driver: ClassVar[str] = "psycopg"
    queries: ClassVar[type[Queries]] = PostgreSQLQueries
    dbapi_modules: ClassVar[tuple[str, ...]] = ("psycopg", "psycopg2")

    @classmethod
    def check_options(cls, options: Any) -> None:
        if options.synchronous_commit is not None:
            mode = options.synchronous_commit
            check_choice("synchronous_commit", mode, SYNCHRONOUS_COMMIT_MODES)

    def prepare_connection(self, conn: Any) -> None:
        conn.driver_connection.autocommit = True  # see ServerEngine

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide on the row type's
        # name; a transaction-scoped advisory lock serializes them (freed at commit).
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7317501)")
        yield

    def listener(self, url: URL, options: Any) -> Listener | None:
        return PgListener(libpq_conninfo(url, SilenceBound(options.network_timeout)))

    def create_engine(self, url: sa.URL, options: Any) -> sa.Engine:
        engine = sa.create_engine(
            url,
            pool_size=4,
            max_overflow=-1,
            pool_pre_ping=False,
            connect_args=libpq_network_params(url, SilenceBound(options.network_timeout)),
        )
        mode = getattr(options, "synchronous_commit", None)
        if mode is not None:
            # Per connection, so only the queue's own writes trade durability for speed.
            @sa.event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                was = dbapi_conn.autocommit
                dbapi_conn.autocommit = True
                dbapi_conn.execute("SELECT set_config('synchronous_commit', %s, false)", (mode,))
                dbapi_conn.autocommit = was

        return engine

    # bytea and text hold at most 1 GB; a larger value fails inside the server.
    max_payload_bytes: int = (1 << 30) - 1024

    def payload_limit_hint(self) -> str:
        return "PostgreSQL's 1 GB limit on one bytea value"

    def condition_error(self, exc: BaseException) -> type[StoreConditionError] | None:
        return _CONDITIONS.get(getattr(exc, "sqlstate", None) or "")

    def is_busy_error(self, exc: BaseException) -> bool:
        # deadlock_detected, lock_not_available, serialization_failure: try again.
        return getattr(exc, "sqlstate", None) in ("40P01", "55P03", "40001")

    def is_connection_error(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def channel_of(queue: str) -> str:
    """The NOTIFY channel of ``queue``: one per queue, so a wake-up reaches only the
    consumers of that queue. A digest, because LISTEN takes an identifier of at most 63
    bytes and a queue name may be longer and hold any character."""
    return CHANNEL_PREFIX + hashlib.blake2b(queue.encode(), digest_size=8).hexdigest()


def turn_key(queues: Collection[str]) -> int:
    """The advisory-lock key of the consumers of exactly ``queues``: they take turns."""
    names = "\0".join(sorted(queues)).encode()
    digest = hashlib.blake2b(names, digest_size=8, person=b"askr-turn").digest()
    return int.from_bytes(digest, "big", signed=True)


def libpq_network_params(url: URL, bound: SilenceBound) -> dict[str, str]:
    """libpq's parameters that give up a silent server after ``bound`` (keepalives,
    ``tcp_user_timeout``, ``connect_timeout``; libpq ignores them on a unix socket), but
    none the URL sets itself: the user's own value wins."""
    params = {
        "connect_timeout": str(bound.connect_timeout),
        "keepalives": "1",
        "keepalives_idle": str(bound.keepalive_idle),
        "keepalives_interval": str(bound.keepalive_interval),
        "keepalives_count": str(bound.keepalive_count),
        "tcp_user_timeout": str(bound.user_timeout_ms),
    }
    return {k: v for k, v in params.items() if k not in url.query}


def libpq_conninfo(url: URL, bound: SilenceBound | None = None) -> str:
    """The libpq connection string that reaches where the engine's connections do.

    Built by SQLAlchemy's own psycopg dialect, as it builds the engine's: a multi-host
    URL's repeated ``host=h:p`` parameters become ``host=h1,h2 port=p1,p2`` (libpq read
    as a URI keeps only the last ``host`` and takes ``h:p`` for a host name), and
    ``service=``, a unix socket directory and libpq's query parameters
    (``target_session_attrs``, ``sslmode``…) pass through unchanged, so after a failover
    the listener follows the new primary as the engine does."""
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    dialect: Any = PGDialect_psycopg()  # type: ignore[no-untyped-call]  # untyped upstream
    _args, params = dialect.create_connect_args(url)
    if bound is not None:  # as create_engine's connect_args
        params.update(libpq_network_params(url, bound))
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


class _Session:
    """One listening connection, driven through libpq's asynchronous calls so that a
    request can be waiting in the server (for a lock) while this process selects."""

    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.pg = self.conn.pgconn
        #: A query was sent and not all of its results are read.
        self.busy = False
        #: SQLSTATE of the first failed statement of the query being read.
        self.error: str | None = None
        #: The first column of the last row the query returned (b"t" from an EXISTS).
        self.last_value: bytes | None = None

    def fileno(self) -> int:
        return int(self.pg.socket)

    def send(self, sql: str) -> None:
        self.pg.send_query(sql.encode())
        self.busy, self.error, self.last_value = True, None, None

    def read(self) -> bool:
        """Take in what arrived; True once every result of the query sent is in."""
        from psycopg import pq

        self.pg.consume_input()
        while self.busy and not self.pg.is_busy():
            result = self.pg.get_result()
            if result is None:
                self.busy = False
                if self.pg.transaction_status == pq.TransactionStatus.INERROR:
                    self.run("ROLLBACK")  # a failed explicit transaction (the lock timed out)
                break
            if result.status == pq.ExecStatus.FATAL_ERROR and self.error is None:
                field = result.error_field(pq.DiagnosticField.SQLSTATE)
                self.error = field.decode() if field else "?????"
            elif result.status == pq.ExecStatus.TUPLES_OK and result.ntuples:
                self.last_value = result.get_value(0, 0)
        return not self.busy

    def run(self, sql: str, timeout: float = 30.0) -> None:
        """Send ``sql`` and read all its results (raises on a failed statement)."""
        import psycopg

        self.send(sql)
        self.finish(timeout)
        if self.error is not None:
            raise psycopg.OperationalError(f"{sql[:40]!r} failed: SQLSTATE {self.error}")

    def finish(self, timeout: float = 30.0) -> None:
        """Read every result of the query sent (waiting for them)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while not self.read():
            left = deadline - time.monotonic()
            if left <= 0:
                raise psycopg.OperationalError(f"no answer in {timeout} s")
            select.select([self], [], [], left)

    def notified(self) -> set[str]:
        """The channels notified since the last call (what arrived is taken in first)."""
        self.pg.consume_input()
        channels = set()
        while (notice := self.pg.notifies()) is not None:
            channels.add(notice.relname.decode())
        return channels

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # already broken
            logger.debug("closing a LISTEN connection failed", exc_info=True)


class PgListener(Listener):
    """Wake-ups by LISTEN/NOTIFY, one idle consumer at a time per queue set.

    Every enqueue of a ready job NOTIFYs its queue's channel. Were every idle consumer
    listening, one enqueue would wake all of them and all would race to claim one job
    (measured: 32 idle consumers made 129 claims per message). Instead the idle
    consumers of the same queues take **turns**: each asks for a session advisory lock
    (:func:`turn_key` of its queues), and only the one holding it LISTENs; the others
    wait in the server's lock queue, which grants the lock to one waiter at a time. The
    holder keeps its turn while it stays idle and passes it on (unlock) as soon as a
    claim hands it work (:meth:`leave`), so the next idle consumer listens while it
    works. Taking the turn is one query: lock, LISTEN, commit, then a look for a job
    that became ready before the LISTEN took effect (a NOTIFY sent before then was not
    for us); if there is one, the turn is used at once.

    Queues that only this consumer reads (a Celery worker's broadcast ``pidbox`` queue,
    a reply queue: the transport passes its no-ack queues as ``private``) are LISTENed
    on a second connection all the time, since a consumer waiting for its turn cannot
    also receive notifications on the same connection.

    A wait that times out still returns to the caller, which polls, so a lost wake-up
    costs at most the polling interval; a lost connection falls back to polling until
    it is back.
    """

    def __init__(self, conninfo: str) -> None:
        #: Where to connect: :func:`libpq_conninfo` of the store's URL.
        self._conninfo = conninfo
        #: The connection that takes turns for the shared queues.
        self._turn: _Session | None = None
        #: The connection that LISTENs on the private queues.
        self._direct: _Session | None = None
        self._direct_channels: frozenset[str] = frozenset()
        #: The queues the turn is for, its lock key, and where we are: "none" (not in
        #: line), "asked" (in the server's lock queue), "held", or "leaving" (the unlock
        #: sent, its answer not read yet).
        self._shared: frozenset[str] = frozenset()
        self._key = 0
        self._state = "none"
        self._lock = threading.Lock()
        self._lost = False
        #: :meth:`interrupt` writes a byte here (from any thread); every wait selects on the
        #: other end, so the write ends a wait under way, or the next one at once.
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        #: Orders interrupt() against close(): no byte is written to a closed (and perhaps
        #: reused) descriptor. Not ``_lock``, which a wait holds.
        self._wake_lock = threading.Lock()
        self._wake_closed = False

    def wait(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        import psycopg

        started = time.monotonic()
        mine = frozenset(private)
        shared = frozenset(queues or ()) - mine
        with self._lock:
            try:
                if self._lost:
                    logger.warning("LISTEN connection is back; wake-ups resumed")
                    self._lost = False
                return self._wait(started + seconds, shared, mine)
            except psycopg.Error as exc:
                # Lost a listening connection (server restart…): poll until it is back.
                if not self._lost:
                    logger.warning("LISTEN connection lost (%s); polling until it reconnects", exc)
                self._lost = True
                self._close()
        left = max(0.0, seconds - (time.monotonic() - started))
        try:
            if select.select([self._wake_read], [], [], left)[0]:
                self._take_interrupt()
        except (OSError, ValueError):  # closed meanwhile (the store closing)
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        return False

    def interrupt(self) -> None:
        with self._wake_lock:
            if self._wake_closed:
                return
            with contextlib.suppress(OSError):  # a byte already waiting is enough
                self._wake_write.send(b"!")

    def _take_interrupt(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_read.recv(64):
                pass

    def _wait(self, deadline: float, shared: frozenset[str], mine: frozenset[str]) -> bool:
        self._listen_direct(mine)
        if shared != self._shared:
            self._leave_turn(reopen=True)
            self._shared, self._key = shared, turn_key(shared) if shared else 0
        channels = {channel_of(q) for q in shared}
        while True:
            turn = self._turn
            if turn is not None and self._state == "leaving" and turn.read():
                turn.notified()  # what came for the turn just passed on
                self._state = "none"
            if turn is not None and self._state == "asked" and turn.read():
                if turn.error is not None:  # the lock's wait timed out: ask again below
                    self._state = "none"
                else:
                    self._state = "held"
                    if turn.last_value == b"t":  # ready before the LISTEN took effect
                        return True
            if self._state == "held" and turn is not None and turn.notified() & channels:
                return True
            if self._direct is not None and self._direct.notified():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if shared and self._state == "none":
                self._ask_turn(left)
            sockets: list[Any] = [s for s in (self._turn, self._direct) if s is not None]
            if self._wake_read in select.select([*sockets, self._wake_read], [], [], left)[0]:
                self._take_interrupt()
                return False

    def _ask_turn(self, seconds: float) -> None:
        """Join the line for the turn; if granted within ``seconds``, LISTEN on the shared
        queues, commit (LISTEN counts from here), then look for a job already ready."""
        from psycopg import sql

        if self._turn is None:
            self._turn = _Session(self._conninfo)
        timeout_ms = max(1, int(seconds * 1000))
        listens = "".join(f"LISTEN {channel_of(q)}; " for q in sorted(self._shared))
        names = sql.SQL(", ").join(sql.Literal(q) for q in sorted(self._shared))
        ready = sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM askr_jobs WHERE queue IN ({}) AND available_at <= "
            "{} AND (reserved_until IS NULL OR reserved_until <= {}))"
        ).format(names, sql.SQL(PostgreSQLQueries.now_sql), sql.SQL(PostgreSQLQueries.now_sql))
        query = (
            f"BEGIN; SET LOCAL lock_timeout = {timeout_ms}; "
            f"SELECT pg_advisory_lock({self._key}); {listens}COMMIT; "
            + ready.as_string(self._turn.conn)
        )
        self._turn.send(query)
        self._state = "asked"

    def _listen_direct(self, mine: frozenset[str]) -> None:
        channels = frozenset(channel_of(q) for q in mine)
        if channels == self._direct_channels:
            return
        if self._direct is None:
            self._direct = _Session(self._conninfo)
        added = "".join(f"LISTEN {c}; " for c in sorted(channels - self._direct_channels))
        gone = "".join(f"UNLISTEN {c}; " for c in sorted(self._direct_channels - channels))
        self._direct.run(added + gone)
        self._direct_channels = channels

    def wakes(self) -> bool:
        # Every shared queue's enqueue reaches the turn's holder, or the next holder's
        # look for ready jobs; lost connections poll until they are back.
        return not self._lost

    def leave(self) -> None:
        """This consumer got work (or will not wait for a while): pass the turn on."""
        if not self._lock.acquire(blocking=False):
            return  # a wait is under way in another thread: this one is idle there
        try:
            self._leave_turn(reopen=False)
        except Exception as exc:  # the next wait reconnects
            logger.debug("passing the turn on failed: %s", exc)
            self._close()
        finally:
            self._lock.release()

    def _leave_turn(self, *, reopen: bool) -> None:
        turn = self._turn
        if turn is None or self._state == "none":
            return
        if self._state == "leaving":
            if reopen:
                turn.finish()
                turn.notified()
                self._state = "none"
            return
        if self._state == "asked":
            if not turn.read():  # still in line
                if reopen:  # for other queues' turn: a new connection beats a cancel
                    turn.close()
                    self._turn, self._state = None, "none"
                return  # else its lock wait ends by itself (lock_timeout)
            if turn.error is not None:
                self._state = "none"
                return
        # Held (or granted meanwhile): unlock, and stop listening for the shared queues.
        # Sent, not waited for: the next wait reads the answer (the consumer has work).
        turn.send(f"SELECT pg_advisory_unlock({self._key}); UNLISTEN *")
        self._state = "leaving"

    def _close(self) -> None:
        for session in (self._turn, self._direct):
            if session is not None:
                session.close()
        self._turn = self._direct = None
        self._direct_channels = frozenset()
        self._state = "none"

    def close(self) -> None:
        with self._lock:
            self._close()
            with self._wake_lock:
                self._wake_closed = True
                self._wake_read.close()
                self._wake_write.close()
