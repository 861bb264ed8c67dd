"""The job store: the one object that executes SQL and owns transactions.

Its verbs are the contract's operations (``enqueue``, ``claim``, ``ack`` …).
It knows nothing of Kombu: payloads are opaque bytes. Driver errors are
wrapped here, so callers only see :mod:`kombu_sqlqueue.exceptions`.

Settlements (``ack``, ``release``, ``return_job``, ``dead_letter``) are
fenced: each names a :class:`~.model.Receipt` (row id + reservation token)
and returns ``True`` when it settled that delivery, ``False`` when the
delivery is no longer the holder's (its reservation was taken over, or the
row is gone). A stale settlement writes nothing. That is an answer, not an
error, like an empty claim.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from ..exceptions import (
    ClaimLimitExceeded,
    ConfigurationError,
    InvalidURL,
    MessageTooLarge,
    SchemaMismatch,
)
from ..limits import fit_utf8
from .engines import ENGINES, BaseEngine
from .engines.base import Listener
from .engines.postgresql import SYNCHRONOUS_COMMIT_MODES
from .engines.sqlite import SYNCHRONOUS_MODES
from .executor import Executor, Tx
from .model import MAX_CLAIM, Backlog, ClaimedJob, DeadLetter, NewJob, Receipt, Route
from .names import validate_queue_name
from .schema import (
    ADDED_COLUMNS,
    ADDITIVE_JOB_COLUMNS,
    BINDINGS_TABLE,
    CONTRACT_JOB_COLUMNS,
    FAILED_TABLE,
    JOBS_TABLE,
    QUEUES_TABLE,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Claim rounds at most in one claim whose rows had expired (each round discards at
#: least one; a claim left short by more is followed by the consumer's next poll).
MAX_CLAIM_ROUNDS = 16

#: Rows per multi-row INSERT in :meth:`JobStore.enqueue_many` (well under
#: every engine's bind-parameter limit: 8 parameters a row).
ENQUEUE_CHUNK = 500


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Connection-level settings of a :class:`JobStore`."""

    #: Create the tables on first use (operators can switch this off and run
    #: ``python -m kombu_sqlqueue create-tables``).
    create_tables: bool = True
    #: SQLite ``PRAGMA synchronous``: NORMAL (default) or FULL; see docs/configuration.md.
    sqlite_synchronous: str = "NORMAL"
    #: Seconds a writer waits for another writer's lock before retrying.
    busy_timeout: float = 30.0
    #: Seconds to keep reconnecting after a working connection is lost (server restart).
    reconnect_timeout: float = 60.0
    #: PostgreSQL ``synchronous_commit`` for the queue's own connections (None: the
    #: server's setting); see docs/engines.md.
    synchronous_commit: str | None = None

    def __post_init__(self) -> None:
        if str(self.sqlite_synchronous).upper() not in SYNCHRONOUS_MODES:
            raise ConfigurationError(
                f"sqlite_synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, "
                f"got {self.sqlite_synchronous!r}"
            )
        if self.synchronous_commit is not None and self.synchronous_commit not in (
            SYNCHRONOUS_COMMIT_MODES
        ):
            raise ConfigurationError(
                f"synchronous_commit must be one of {', '.join(SYNCHRONOUS_COMMIT_MODES)}, "
                f"got {self.synchronous_commit!r}"
            )
        if self.busy_timeout <= 0:
            raise ConfigurationError(f"busy_timeout must be > 0 seconds, got {self.busy_timeout!r}")


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What a claim handed out, and how many exhausted rows it dead-lettered instead."""

    jobs: list[ClaimedJob]
    dead_lettered: int = 0
    #: Rows found past their ``expires_at`` and discarded instead of handed out.
    expired: int = 0


def parse_store_url(url: str) -> tuple[type[BaseEngine], URL]:
    """Split a store URL (``sqlite:///queue.db``) into its engine class and SQLAlchemy URL."""
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise InvalidURL(f"cannot parse database URL {url!r}: {exc}") from exc
    scheme = parsed.get_backend_name()
    engine_cls = ENGINES.get(scheme)
    if engine_cls is None:
        raise InvalidURL(
            f"database {scheme!r} in {url!r} is not supported; "
            f"supported: {', '.join(sorted(ENGINES))} (e.g. sqlqueue+sqlite:///queue.db)"
        )
    engine = engine_cls()
    return engine_cls, engine.normalize_url(parsed)


def open_database(url: str, options: StoreOptions) -> tuple[BaseEngine, URL, sa.Engine, Executor]:
    """The engine, SQLAlchemy URL and engine, and the one :class:`Executor` for ``url``."""
    engine_cls, sa_url = parse_store_url(url)
    engine = engine_cls()
    try:
        db = engine.create_engine(sa_url, options)
    except ImportError as exc:  # an optional driver is missing
        raise ConfigurationError(
            f"the driver for {sa_url.drivername} is not installed ({exc}); "
            f"install it with: pip install 'kombu-sqlqueue[{engine.name}]'"
        ) from exc
    executor = Executor(
        engine,
        db,
        sa_url.render_as_string(hide_password=True),
        reconnect_timeout=options.reconnect_timeout,
    )
    return engine, sa_url, db, executor


class JobStore:
    """Contract-v1 job table operations over one database.

    Thread-safe. Every operation is one transaction, run by the store's
    :class:`~.executor.Executor` (the only code that executes SQL).
    """

    def __init__(self, url: str, options: StoreOptions | None = None) -> None:
        self.options = options or StoreOptions()
        self.engine, self.url, self._db, self._exec = open_database(url, self.options)
        self.q = self.engine.queries
        #: Unix-seconds clock; every operation reads it once. Tests may replace it.
        self.clock: Callable[[], float] = time.time
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._listener: Listener | None = None
        self._listener_tried = False

    # -- plumbing -----------------------------------------------------------------

    def _run(self, work: Callable[[Tx], T], *, read_only: bool = False, single: bool = False) -> T:
        """Run ``work`` in one transaction (creating the tables first if needed).

        ``single``: ``work`` runs exactly one statement (see ``ServerEngine``).
        """
        if not self._schema_ready:
            self._ensure_schema()
        return self._exec.run(work, write=not read_only, single=single)

    def ensure_ready(self) -> None:
        """Connect, and create (or, with ``create_tables=False``, verify) the tables once."""
        if not self._schema_ready:
            self._ensure_schema()

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if self._schema_ready:
                return
            if self.options.create_tables:
                self.create_schema()
            else:
                self.verify_schema()
            self._schema_ready = True

    # -- schema -------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables and claim index if absent; add our additive columns if missing.

        Idempotent and safe to run from many processes at once.
        """

        def work(conn: sa.Connection) -> None:
            self.engine.metadata.create_all(conn, checkfirst=True)
            self._add_missing_columns(conn)

        self._exec.run_schema(work)
        self.verify_schema()

    def _add_missing_columns(self, conn: sa.Connection) -> None:
        inspector = sa.inspect(conn)
        for table, columns in ((JOBS_TABLE, ADDITIVE_JOB_COLUMNS), *ADDED_COLUMNS.items()):
            present = {c["name"] for c in inspector.get_columns(table)}
            for name, ddl_type in columns.items():
                if name not in present:
                    # Identifiers are constants of the schema module; no user text here.
                    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {name} {ddl_type} NULL")

    def verify_schema(self) -> None:
        """Raise :class:`SchemaMismatch` unless both tables have every column we use."""
        with self._exec.sa_errors(), self._db.connect() as conn:
            inspector = sa.inspect(conn)
            for table, needed in (
                (JOBS_TABLE, (*CONTRACT_JOB_COLUMNS, *ADDITIVE_JOB_COLUMNS)),
                (FAILED_TABLE, tuple(c.name for c in self.engine.failed.columns)),
                (BINDINGS_TABLE, ("exchange", "routing_key", "queue", "exchange_type")),
                (QUEUES_TABLE, ("name", "expires_seconds", "last_used_at", "message_ttl_ms")),
            ):
                if not inspector.has_table(table):
                    raise SchemaMismatch(
                        f"table {table} does not exist; create it with "
                        "`kombu-sqlqueue create-tables URL` or set create_tables=True"
                    )
                present = {c["name"] for c in inspector.get_columns(table)}
                missing = [c for c in needed if c not in present]
                if missing:
                    raise SchemaMismatch(f"table {table} lacks columns: {', '.join(missing)}")

    # -- operations ---------------------------------------------------------------

    def _now(self) -> int:
        return int(self.clock())

    @staticmethod
    def _deadline(clock: float, visibility: float) -> int:
        # Rounded up: a reservation lasts at least ``visibility`` seconds,
        # although the columns hold whole seconds.
        return math.ceil(clock + max(1.0, visibility))

    def check_payload_size(self, size: int) -> None:
        """Raise :class:`MessageTooLarge` for a payload of ``size`` bytes that the database
        would refuse (at once, naming the limit, instead of a failed statement)."""
        if not self._schema_ready:
            self._ensure_schema()  # a server engine learns its limit on connecting
        limit = self.engine.max_payload_bytes
        if size > limit:
            raise MessageTooLarge(
                f"a message of {size:,} bytes is larger than {limit:,} bytes, the most "
                f"database {self._exec.describe} takes in one message: "
                f"{self.engine.payload_limit_hint()}; nothing was stored"
            )

    def _job_row(self, job: NewJob, now: float) -> dict[str, Any]:
        validate_queue_name(job.queue)
        self.check_payload_size(len(job.payload))
        if job.delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {job.delay!r}")
        if job.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {job.max_attempts!r}")
        # A delayed job is rounded up, so it is never claimable early; an expiring one
        # too, so it lives at least its time to live.
        available_at = math.ceil(now + job.delay) if job.delay > 0 else int(now)
        expires_at = None if job.expires_in is None else math.ceil(now + max(0.0, job.expires_in))
        return {
            "queue": job.queue,
            "payload": job.payload,
            "priority": int(job.priority),
            "available_at": available_at,
            "max_attempts": int(job.max_attempts),
            "created_at": int(now),
            "uuid": job.uuid,
            "expires_at": expires_at,
        }

    def enqueue(self, job: NewJob) -> int:
        """Store one job; return its id. The job is committed when this returns."""
        row = self._job_row(job, self.clock())

        def work(tx: Tx) -> int:
            return self.engine.insert_job(tx, row)

        return self._run(work, single=True)

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Store many jobs in one transaction with multi-row INSERTs; return their ids in order."""
        now = self.clock()
        rows = [self._job_row(job, now) for job in jobs]
        if not rows:
            return []

        def work(tx: Tx) -> list[int]:
            ids: list[int] = []
            for chunk in self._chunks(rows):
                ids.extend(self.engine.insert_jobs(tx, chunk))
            return ids

        return self._run(work)

    def _chunks(self, rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
        """``rows`` in multi-row INSERTs of at most ENQUEUE_CHUNK rows, and of at most the
        engine's payload limit in bytes (MySQL refuses a statement past max_allowed_packet)."""
        budget = self.engine.max_payload_bytes
        chunk: list[dict[str, Any]] = []
        size = 0
        for row in rows:
            n = len(row["payload"])
            if chunk and (len(chunk) == ENQUEUE_CHUNK or size + n > budget):
                yield chunk
                chunk, size = [], 0
            chunk.append(row)
            size += n
        if chunk:
            yield chunk

    def claim(
        self, queue: str, n: int, visibility: float, max_attempts: int | None = None
    ) -> ClaimResult:
        """Reserve up to ``n`` ready jobs of ``queue`` for ``visibility`` seconds.

        ``n <= 0`` claims nothing; ``n > MAX_CLAIM`` raises
        :class:`ClaimLimitExceeded`. A row whose attempts would pass its limit
        — the row's ``max_attempts`` or the claimer's ``max_attempts``,
        whichever is lower — is dead-lettered in the same transaction instead
        of handed out. Jobs come back in claim order (priority, then age).
        """
        params = self._claim_params(queue, n, visibility)
        if n <= 0:
            return ClaimResult([])
        result = self._run(lambda tx: self._claim_in(tx, params, max_attempts))
        self._log_dead_lettered(result, queue)
        return result

    def _claim_params(self, queue: str, n: int, visibility: float) -> dict[str, Any]:
        validate_queue_name(queue)
        if n > MAX_CLAIM:
            raise ClaimLimitExceeded(
                f"a claim may hand out at most {MAX_CLAIM} jobs; {n} were asked for"
            )
        clock = self.clock()
        return {
            "queue": queue,
            "n": int(n),
            "now": int(clock),
            "until": self._deadline(clock, visibility),
            "token": secrets.token_hex(16),
        }

    def _claim_in(self, tx: Tx, params: dict[str, Any], max_attempts: int | None) -> ClaimResult:
        token, now, wanted = params["token"], params["now"], params["n"]
        jobs: list[ClaimedJob] = []
        dead = expired = 0
        # A round that met expired rows and came up short claims again: the queue may hold
        # live ones behind them. Each round is an ordinary claim (SKIP LOCKED where the
        # engine has it), so passing expired rows never blocks or deadlocks other claimers.
        for _round in range(MAX_CLAIM_ROUNDS):
            # id, queue, payload, priority, available_at, attempts, max_attempts, uuid,
            # expires_at
            rows = self.engine.claim_rows(tx, {**params, "n": wanted - len(jobs)})
            rows.sort(key=lambda r: (-r[3], r[4], r[0]))
            past_ttl: list[int] = []
            for job_id, q, payload, priority, _avail, attempts, row_limit, uuid, expires in rows:
                if expires is not None and expires <= now:
                    past_ttl.append(job_id)
                    continue
                limit = row_limit if max_attempts is None else min(row_limit, max_attempts)
                if attempts > limit:
                    reason = f"max attempts exceeded ({limit} of {limit} used)"
                    self._dead_letter_in(tx, Receipt(job_id, token), reason, now, uncounted=1)
                    dead += 1
                    continue
                jobs.append(
                    ClaimedJob(job_id, q, bytes(payload), priority, attempts, limit, token, uuid)
                )
            if past_ttl:
                # Past their TTL: discarded unconsumed, as AMQP does (not a failure).
                tx.execute_bound(self.q.job_ack_many.bindparams(token=token, ids=past_ttl))
                expired += len(past_ttl)
            if not past_ttl or len(jobs) >= wanted:
                break
        return ClaimResult(jobs, dead, expired)

    @staticmethod
    def _log_dead_lettered(result: ClaimResult, queue: str) -> None:
        if result.dead_lettered:
            logger.warning(
                "dead-lettered %d job(s) of queue %r: max attempts exceeded",
                result.dead_lettered,
                queue,
            )
        if result.expired:
            logger.info(
                "discarded %d expired message(s) of queue %r (past their TTL)",
                result.expired,
                queue,
            )

    def ack_and_claim(
        self,
        receipt: Receipt,
        then: Sequence[NewJob],
        queues: Sequence[str],
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[bool, ClaimedJob | None]:
        """Ack a delivery (storing ``then``, a chain's next job) and claim the next job of
        the first of ``queues`` that has one, in one transaction: a worker finishing a job
        and taking the next pays one commit instead of two. Returns (acked, next job)."""
        now = self.clock()
        rows = [self._job_row(job, now) for job in then]
        claims = [self._claim_params(q, 1, visibility) for q in queues]
        ack = {"id": receipt.job_id, "token": receipt.token}
        dead: list[tuple[ClaimResult, str]] = []

        def work(tx: Tx) -> tuple[bool, ClaimedJob | None]:
            dead.clear()
            acked = tx.execute(self.q.job_ack, ack).rowcount == 1
            if acked:
                for row in rows:
                    self.engine.insert_job(tx, row)
            for params in claims:
                result = self._claim_in(tx, params, max_attempts)
                dead.append((result, params["queue"]))
                if result.jobs:
                    return acked, result.jobs[0]
            return acked, None

        outcome = self._run(work)
        for result, queue in dead:
            self._log_dead_lettered(result, queue)
        return outcome

    def ack(self, receipt: Receipt) -> bool:
        """Delete the job if ``receipt`` still holds it; ``False`` means stale (nothing written)."""
        params = {"id": receipt.job_id, "token": receipt.token}
        return self._run(
            lambda tx: bool(tx.execute(self.q.job_ack, params).rowcount == 1), single=True
        )

    def ack_and_enqueue(self, receipt: Receipt, jobs: Sequence[NewJob]) -> bool:
        """Ack a delivery and store ``jobs`` in one transaction (the next job of a chain);
        when the delivery is stale nothing is written and ``False`` is returned."""
        now = self.clock()
        rows = [self._job_row(job, now) for job in jobs]
        params = {"id": receipt.job_id, "token": receipt.token}

        def work(tx: Tx) -> bool:
            if tx.execute(self.q.job_ack, params).rowcount != 1:
                return False
            for row in rows:
                self.engine.insert_job(tx, row)
            return True

        return self._run(work, single=not rows)

    def ack_many(self, receipts: Sequence[Receipt]) -> int:
        """Ack several deliveries in one transaction; return how many were still held."""
        by_token: dict[str, list[int]] = {}
        for r in receipts:
            by_token.setdefault(r.token, []).append(r.job_id)
        if not by_token:
            return 0

        def work(tx: Tx) -> int:
            return sum(
                tx.execute_bound(self.q.job_ack_many.bindparams(token=t, ids=ids)).rowcount
                for t, ids in by_token.items()
            )

        return self._run(work)

    def release(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Make the job ready again after ``delay`` seconds (attempts unchanged); fenced."""
        now = self.clock()
        params = {
            "id": receipt.job_id,
            "token": receipt.token,
            "available_at": math.ceil(now + delay) if delay > 0 else int(now),
        }
        return self._run(
            lambda tx: bool(tx.execute(self.q.job_release, params).rowcount == 1), single=True
        )

    def return_job(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Hand back a delivery that never started: ready after ``delay`` seconds, its
        attempt refunded; fenced."""
        now = self.clock()
        params = {
            "id": receipt.job_id,
            "token": receipt.token,
            "available_at": math.ceil(now + delay) if delay > 0 else int(now),
        }
        return self._run(
            lambda tx: bool(tx.execute(self.q.job_return, params).rowcount == 1), single=True
        )

    def renew(self, receipts: Sequence[Receipt], visibility: float) -> set[Receipt]:
        """Extend the reservations still held; return the receipts that were.

        A receipt missing from the result was acked already or taken over.
        """
        if not receipts:
            return set()
        tokens = sorted({r.token for r in receipts})
        ids = sorted({r.job_id for r in receipts})
        until = self._deadline(self.clock(), visibility)

        def work(tx: Tx) -> set[Receipt]:
            renew = self.q.job_renew.bindparams(until=until, tokens=tokens, ids=ids)
            if tx.execute_bound(renew).rowcount == len(receipts):
                return set(receipts)
            held = tx.execute_bound(self.q.job_held.bindparams(tokens=tokens, ids=ids)).fetchall()
            return {Receipt(int(job_id), token) for job_id, token in held} & set(receipts)

        return self._run(work)

    def _dead_letter_in(
        self, tx: Tx, receipt: Receipt, reason: str, now: int, uncounted: int = 0
    ) -> bool:
        params = {
            "id": receipt.job_id,
            "token": receipt.token,
            "exception": fit_utf8(reason),  # a handler's huge message must not fail the move
            "now": now,
            "uncounted": uncounted,
        }
        if tx.execute(self.q.job_dead_letter_copy, params).rowcount != 1:
            return False
        tx.execute(self.q.job_ack, params)
        return True

    def dead_letter(self, receipt: Receipt, reason: str) -> bool:
        """Move the held job to ``askr_failed_jobs`` with ``reason``, in one transaction; fenced."""
        now = self._now()
        return self._run(lambda tx: self._dead_letter_in(tx, receipt, reason, now))

    def backlog(self, queue: str) -> Backlog:
        """Contract v1's ``total``, ``ready`` and ``oldest_seconds`` for ``queue``."""
        validate_queue_name(queue)
        params = {"queue": queue, "now": self._now()}
        total, ready, oldest = self._run(
            lambda tx: tx.execute(self.q.queue_backlog, params).fetchone(),
            read_only=True,
            single=True,
        )
        return Backlog(queue, int(total), int(ready or 0), int(oldest or 0))

    def size(self, queue: str) -> int:
        """Jobs waiting on ``queue``: ready, delayed, or with a lapsed reservation."""
        validate_queue_name(queue)
        params = {"queue": queue, "now": self._now()}
        return int(
            self._run(
                lambda tx: tx.execute(self.q.queue_size, params).fetchone()[0],
                read_only=True,
                single=True,
            )
        )

    def purge(self, queue: str) -> int:
        """Delete the unreserved jobs of ``queue`` (delayed ones too); return how many."""
        validate_queue_name(queue)
        return int(
            self._run(
                lambda tx: tx.execute(self.q.queue_purge, {"queue": queue}).rowcount, single=True
            )
        )

    def delete_queue(self, queue: str) -> int:
        """Delete every job of ``queue``, held ones included; return how many."""
        validate_queue_name(queue)
        return int(self._run(lambda tx: tx.execute(self.q.queue_delete, {"queue": queue}).rowcount))

    def sweep_dead_letters(self, retention: float) -> int:
        """Delete dead letters older than ``retention`` seconds; return how many."""
        cutoff = self._now() - int(retention)
        return int(
            self._run(lambda tx: tx.execute(self.q.dead_letter_sweep, {"cutoff": cutoff}).rowcount)
        )

    def dead_letters(self, queue: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """Read dead letters, oldest first (all queues when ``queue`` is None)."""
        if queue is not None:
            validate_queue_name(queue)
        params = {"queue": queue, "limit": int(limit)}
        query = self.q.dead_letter_list if queue is None else self.q.dead_letter_list_queue
        rows = self._run(
            lambda tx: tx.execute(query, params).fetchall(), read_only=True, single=True
        )
        return [
            DeadLetter(int(i), u, q, bytes(p), e, int(a), int(f)) for i, u, q, p, e, a, f in rows
        ]

    # -- exchange bindings (stored, so a publish from any process reaches every queue) ----

    def bind(self, exchange: str, exchange_type: str, routing_key: str, queue: str) -> None:
        """Store the binding of ``queue`` to ``exchange`` (idempotent)."""
        validate_queue_name(queue)
        params = {
            "exchange": exchange,
            "routing_key": routing_key,
            "queue": queue,
            "exchange_type": exchange_type,
            "now": self._now(),
        }
        self._run(lambda tx: tx.execute(self.q.binding_add, params), single=True)

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        """Remove one stored binding."""
        params = {"exchange": exchange, "routing_key": routing_key, "queue": queue}
        self._run(lambda tx: tx.execute(self.q.binding_remove, params), single=True)

    def unbind_queue(self, queue: str) -> None:
        """Remove every stored binding of ``queue``."""
        self._run(lambda tx: tx.execute(self.q.binding_remove_queue, {"queue": queue}), single=True)

    def bindings(self, exchange: str) -> list[tuple[str, str, str]]:
        """``(routing_key, queue, exchange_type)`` of every queue bound to ``exchange``."""
        return [(r.routing_key, r.queue, r.exchange_type) for r in self.routes(exchange)]

    def routes(self, exchange: str) -> list[Route]:
        """Every binding of ``exchange``, with its queue's message TTL (one query)."""
        rows = self._run(
            lambda tx: tx.execute(self.q.binding_list, {"exchange": exchange}).fetchall(),
            read_only=True,
            single=True,
        )
        return [
            Route(str(rk), str(q), str(t), None if ttl is None else int(ttl) / 1000.0)
            for rk, q, t, ttl in rows
        ]

    # -- expiring queues (x-expires) ---------------------------------------------------

    def declare_queue(
        self, queue: str, expires: float | None, message_ttl: float | None = None
    ) -> None:
        """Record ``queue`` as used now, deleted after ``expires`` seconds unused (None:
        never); its messages live ``message_ttl`` seconds (None: until consumed)."""
        validate_queue_name(queue)
        params = {
            "name": queue,
            "expires": None if expires is None else max(1, math.ceil(expires)),
            "now": self._now(),
            "message_ttl_ms": None if message_ttl is None else max(0, round(message_ttl * 1000)),
        }

        def work(tx: Tx) -> None:
            tx.execute(self.q.queue_add, params)
            tx.execute(self.q.queue_set, params)

        self._run(work)

    def touch_queues(self, queues: Collection[str]) -> set[str]:
        """Mark ``queues`` as used now; return those that still exist (not swept)."""
        names = sorted(set(queues))
        if not names:
            return set()
        now = self._now()

        def work(tx: Tx) -> set[str]:
            touched = tx.execute_bound(self.q.queue_touch.bindparams(now=now, names=names))
            if touched.rowcount == len(names):
                return set(names)
            rows = tx.execute_bound(self.q.queue_present.bindparams(names=names)).fetchall()
            return {str(r[0]) for r in rows}

        return self._run(work)

    def expired_queues(self) -> list[str]:
        """Queues unused for longer than their ``expires``."""
        rows = self._run(
            lambda tx: tx.execute(self.q.queue_expired, {"now": self._now()}).fetchall(),
            read_only=True,
            single=True,
        )
        return [str(r[0]) for r in rows]

    def discard_expired(self) -> dict[str, int]:
        """Delete unclaimed messages past their TTL in every queue that has a message TTL;
        return how many went per queue. (A message with its own expiry in a queue without
        one is discarded when a consumer reaches it, as AMQP does.)"""
        now = self._now()
        queues = self._run(
            lambda tx: tx.execute(self.q.queue_with_message_ttl, {}).fetchall(),
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
                return int(tx.execute(self.q.queue_discard_expired, params).rowcount)

            count = self._run(work, single=True)
            if count:
                discarded[str(name)] = count
        return discarded

    def drop_queue(self, queue: str) -> int:
        """Delete ``queue``: its jobs (held ones too), its bindings and its record, in one
        transaction; return how many jobs went."""
        params = {"queue": queue, "name": queue}

        def work(tx: Tx) -> int:
            tx.execute(self.q.binding_remove_queue, params)
            tx.execute(self.q.queue_forget, params)
            return int(tx.execute(self.q.queue_delete, params).rowcount)

        return self._run(work)

    def get_job(self, job_id: int) -> dict[str, Any] | None:
        """The raw row of one job, for inspection and tests; None if it is gone."""

        def work(tx: Tx) -> dict[str, Any] | None:
            tx.execute(self.q.job_get, {"id": job_id})
            rows = tx.rows()
            return rows[0] if rows else None

        return self._run(work, read_only=True, single=True)

    def wait_for_jobs(self, seconds: float, queues: Collection[str] | None = None) -> bool:
        """Idle wait: up to ``seconds``, returning early (True) when a job becomes ready on
        one of ``queues`` (any queue if None).

        PostgreSQL wakes on NOTIFY; other engines just sleep (they are polled).
        """
        if seconds <= 0:
            return False
        if self._listener is None and not self._listener_tried:
            self._listener_tried = True
            self._listener = self.engine.listener(self.url)
        if self._listener is not None:
            return self._listener.wait(seconds, queues)
        time.sleep(seconds)
        return False

    def close(self) -> None:
        """Close every pooled connection (and the wake-up listener)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._exec.close()
