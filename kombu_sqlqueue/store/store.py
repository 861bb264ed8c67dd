"""The contract-v1 job store.

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
import time
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Self

import sqlalchemy as sa

from ..exceptions import InvalidControl, StoreError
from ..limits import fit_utf8
from .admin import ContractAdmin
from .claiming import MAX_CLAIM_ROUNDS, ClaimParams, Screened, exhausted_reason, screen
from .controls import (
    Allowance,
    QueueControl,
    Rate,
    check_concurrency,
    check_concurrency_key,
    check_pause,
    check_rate,
    claim_allowance,
    rate_charged,
    rate_overdue,
)
from .database import Database, StoreOptions, TableStore
from .enlist import Enlistment
from .executor import Tx
from .model import (
    DEDUPE_SWEEP_EVERY,
    Backlog,
    ClaimedJob,
    ClaimResult,
    DeadLetter,
    Holding,
    NewJob,
    Receipt,
    dedupe_key,
    job_times,
    ready_at,
    reservation_deadline,
)
from .names import validate_queue_name
from .schema import ADD_COLUMN, CONTRACT_TABLES, TableSpec
from .topology import Topology
from .waiting import IdleWaits

logger = logging.getLogger(__name__)

#: Seconds a store trusts what it last read of which queues have controls, once its plain
#: claims come back empty: a store that missed a new pause or limit claims nothing of that
#: queue meanwhile (the plain claim takes nothing from a controlled queue), and claims
#: under it from the next read on.
CONTROLS_RECHECK = 1.0

#: The claim tokens of limited queues' claims a store remembers (the oldest forgotten first:
#: a delivery held longer than this many claims later frees its slot without a wake-up).
SLOT_TOKENS_KEPT = 4096

#: Queues named in one read of :meth:`JobStore.holders`.
HOLDERS_PER_READ = 500
#: Rows per multi-row INSERT in :meth:`JobStore.enqueue_many` (well under
#: every engine's bind-parameter limit: 8 parameters a row).
ENQUEUE_CHUNK = 500


def insert_chunks(rows: list[dict[str, Any]], budget: int) -> Iterator[list[dict[str, Any]]]:
    """``rows`` in multi-row INSERTs of at most ENQUEUE_CHUNK rows, and of at most the
    engine's payload limit ``budget`` in bytes (MySQL refuses a statement past
    max_allowed_packet)."""
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


class JobStore(TableStore):
    """Contract-v1 job table operations over one database.

    Thread-safe. Every operation is one transaction, run by the database's
    :class:`~.executor.Executor` (the only code that executes SQL). Exchange
    bindings and queue lifetimes are :attr:`topology`'s.
    """

    def __init__(self, database: str | Database, options: StoreOptions | None = None) -> None:
        super().__init__(database, options)
        self.q = self.engine.queries()
        #: Bindings and queue records, on this store's database.
        self.topology = Topology(self)
        #: The operator's verbs (stats, peek, dead letters, purge), on this store.
        self.admin = ContractAdmin(self)
        #: Idle waits, on the engine's wake-up listener when it has one (waiting.py).
        self._waits = IdleWaits(lambda: self.engine.listener(self.url, self.options))
        #: The name this store's claims sign their reservations with (a Celery node name;
        #: seed 001's consumer identity); None signs nothing (the process is still recorded).
        self.holder: str | None = None
        self._dedupe_calls = 0
        #: The queues this store last saw with controls (a row of askr_queue_controls):
        #: their claims read the row first. The plain claim of any other queue takes
        #: nothing from one that has a row, so a stale set never lets a claim past a
        #: control: an empty plain claim reads the set again (:meth:`_see_controls`).
        self._controlled: frozenset[str] = frozenset()
        #: Claim token → queue, for this store's claims made under a concurrency limit:
        #: settling one of their deliveries frees a slot, and says so (_slots_freed_in).
        self._slot_tokens: OrderedDict[str, str] = OrderedDict()
        #: Queues whose last claim here came back empty (an engine that peeks when idle
        #: reads whether anything is ready before its next claim of them: _peeks_first).
        self._idle_queues: set[str] = set()
        #: When :meth:`_see_controls` last read them (monotonic seconds).
        self._controls_read_at = -CONTROLS_RECHECK

    # -- schema -------------------------------------------------------------------

    def table_specs(self) -> Sequence[TableSpec]:
        return CONTRACT_TABLES

    def create_schema(self) -> None:
        """Create the tables and claim index if absent; add our additive columns if missing.

        Idempotent and safe to run from many processes at once.
        """

        def work(conn: sa.Connection) -> None:
            self.q.metadata.create_all(conn, checkfirst=True)
            inspector = sa.inspect(conn)
            present: dict[str, set[str]] = {}
            for (table, column), add in ADD_COLUMN.items():
                if table not in present:
                    present[table] = {c["name"] for c in inspector.get_columns(table)}
                if column not in present[table]:
                    conn.execute(add)

        self._exec.run_schema(work)
        self.verify_schema()

    def joined(self, enlistment: Enlistment) -> Self | None:
        view = super().joined(enlistment)
        if view is not None:
            view.topology = Topology(view)
        return view

    @property
    def single_writer(self) -> bool:
        return self.engine.single_writer

    def topology_in(self, enlistment: Enlistment | None) -> Topology:
        """Where a binding made now is stored: on the store's own connection — except,
        inside an enlistment, on an engine with one writer at a time (SQLite), where that
        write would wait for the very transaction it runs in: then in the caller's
        transaction (a binding it rolls back is stored again by the next publish that
        needs it, see the transport's ``_lookup``)."""
        if enlistment is not None and self.engine.single_writer:
            view = self.joined(enlistment)
            if view is not None:
                return view.topology
        return self.topology

    # -- operations ---------------------------------------------------------------

    def _job_row(self, job: NewJob, now: float) -> dict[str, Any]:
        available_at, expires_at = job_times(job, now)
        self.check_payload_size(len(job.payload))
        return {
            "queue": job.queue,
            "payload": job.payload,
            "priority": int(job.priority),
            "available_at": available_at,
            "attempts": int(job.attempts),
            "max_attempts": int(job.max_attempts),
            "created_at": int(now),
            "uuid": job.uuid,
            "expires_at": expires_at,
            "concurrency_key": check_concurrency_key(job.concurrency_key),
        }

    def enqueue(self, job: NewJob) -> int:
        """Store one job; return its id. The job is committed when this returns."""
        row = self._job_row(job, self.clock())

        def work(tx: Tx) -> int:
            return self.q.insert_job(tx, row)

        return self._run(work, single=True)

    def enqueue_once(self, job: NewJob, key: str, window: float) -> int | None:
        """Store ``job`` unless its identity ``key`` was first written to its queue less
        than ``window`` seconds ago — whether that job is still queued, held or done —
        and return its id; None when it wrote nothing (seed 001's deduplication window).
        The window counts from the first write; a repeat does not stretch it. Of publishers
        racing one key, exactly one writes."""
        now = self.clock()
        row = self._job_row(job, now)
        params = {
            "queue": job.queue,
            "key": dedupe_key(key, window),
            "now": int(now),
            "cutoff": int(now - window),
        }
        self._dedupe_calls += 1
        # Never in the caller's transaction (a joined view, whose count is a copy's): the
        # sweep's DELETE would hold its locks until the caller commits.
        sweep = not self.joined_view and self._dedupe_calls % DEDUPE_SWEEP_EVERY == 1

        def work(tx: Tx) -> int | None:
            if sweep:  # identities past the window: nothing reads them again
                tx.execute(self.q.dedupe_sweep, params)
            first = tx.execute(self.q.dedupe_add, params).rowcount == 1
            if not first and tx.execute(self.q.dedupe_renew, params).rowcount != 1:
                return None
            return self.q.insert_job(tx, row)

        return self._run(work)

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Store many jobs in one transaction with multi-row INSERTs; return their ids in order."""
        now = self.clock()
        rows = [self._job_row(job, now) for job in jobs]
        if not rows:
            return []

        def work(tx: Tx) -> list[int]:
            ids: list[int] = []
            for chunk in insert_chunks(rows, self.engine.max_payload_bytes):
                ids.extend(self.q.insert_jobs(tx, chunk))
            return ids

        return self._run(work)

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
        params = ClaimParams.of(queue, n, visibility, self.clock(), self.holder)
        if n <= 0 or (self._peeks_first(queue) and not self._any_ready(params)):
            return ClaimResult([])
        controlled = queue in self._controlled
        if self.q.claim_in_one_statement and not controlled:
            # The claim statement alone (one round trip); only rows that must not be
            # handed out (past their TTL or attempts) need a transaction after it, fenced
            # by the claim's token like any settlement.
            binds = params.binds()
            rows = self._run(lambda tx: self.q.claim_rows(tx, binds), single=True)
            first = screen(rows, params.now, params.token, max_attempts)
            if first.plain:
                result = ClaimResult(first.jobs)
            else:
                result = self._run(lambda tx: self._claim_in(tx, params, max_attempts, first))
        else:
            result = self._run(
                lambda tx: self._claim_in(tx, params, max_attempts, controlled=controlled)
            )
        if not result.jobs and not controlled and self._see_controls(queue):
            # The plain claim met a control this store did not know of: claim under it now.
            result = self._run(lambda tx: self._claim_in(tx, params, max_attempts, controlled=True))
        result.log(logger, queue)
        self._claimed(queue, result)
        return result

    def _peeks_first(self, queue: str) -> bool:
        """Whether a claim of ``queue`` reads first whether anything is ready (the
        engine's ``claim_peeks_first``, or ``claim_peeks_when_idle`` after an empty claim
        of an uncontrolled queue, whose empty claims are what an idle consumer repeats)."""
        if self.q.claim_peeks_first:
            return True
        return (
            self.q.claim_peeks_when_idle
            and queue in self._idle_queues
            and queue not in self._controlled
        )

    def _claimed(self, queue: str, result: ClaimResult) -> None:
        """Note what a claim of ``queue`` found (an empty one makes the queue idle)."""
        if result.jobs:
            self._idle_queues.discard(queue)
            self.stop_waiting()
        elif self.q.claim_peeks_when_idle:
            self._idle_queues.add(queue)

    def _any_ready(self, params: ClaimParams) -> bool:
        """Whether a claim of ``params`` would find a row (read only: no write lock)."""
        binds = {"queue": params.queue, "now": params.now}
        return self._run(
            lambda tx: bool(tx.execute(self.q.job_ready_any, binds).fetchone()[0]),
            read_only=True,
            single=True,
        )

    def _claim_in(
        self,
        tx: Tx,
        params: ClaimParams,
        max_attempts: int | None,
        first: Screened | None = None,
        *,
        controlled: bool = False,
    ) -> ClaimResult:
        """Claim in ``tx``, settling what :func:`.claiming.screen` says must not be handed
        out; ``first``: a first round already claimed and screened (by ``claim``'s one
        statement); ``controlled``: the queue has controls, read first (they may let the
        claim take fewer rows, or none)."""
        allowance: Allowance | None = None
        control: QueueControl | None = None
        if controlled:
            control = self._control_in(tx, params)
            # A rate limit spaces claims by when they hold the queue's row lock, not by
            # when they began waiting for it (a claim that waited would hand out its job
            # right behind the one before it).
            params = params.at_us(self.clock())
            # No row (any more): the plain claim, whose NOT EXISTS still refuses the queue
            # if a pause or limit commits between that read and this claim.
            controlled = control is not None
            if control is not None:
                allowance = self._allowance_in(tx, params, control)
                if allowance.rows <= 0:
                    self._spend_rate_in(tx, params, control, 0)
                    return ClaimResult([], retry_in=allowance.retry_in)
                params = params.more(min(params.n, allowance.rows))
        token, now = params.token, params.now
        jobs: list[ClaimedJob] = []
        dead = expired = 0
        # A round that met expired rows and came up short claims again: the queue may hold
        # live ones behind them. Each round is an ordinary claim (SKIP LOCKED where the
        # engine has it), so passing expired rows never blocks or deadlocks other claimers.
        # Under a per-key limit a round takes what its window of candidates allows, and the
        # next round (counting those) goes on while rounds take rows.
        key_limit = None if control is None else control.key_concurrency
        rounds = MAX_CLAIM_ROUNDS + (params.n if key_limit is not None else 0)
        for round_ in range(rounds):
            if round_ == 0 and first is not None:
                screened = first
            else:
                binds = params.more(params.n - len(jobs)).binds()
                if key_limit is None:
                    rows = self.q.claim_rows(tx, binds, controlled)
                else:
                    rows = self.q.claim_keyed_rows(tx, binds, key_limit)
                screened = screen(rows, now, token, max_attempts)
            jobs += screened.jobs
            for row, limit in screened.exhausted:
                reason = exhausted_reason(limit)
                self._dead_letter_in(tx, Receipt(row.id, token), reason, now, uncounted=1)
            dead += len(screened.exhausted)
            if screened.past_ttl:
                # Past their TTL: discarded unconsumed, as AMQP does (not a failure).
                ids = [row.id for row in screened.past_ttl]
                tx.execute_bound(self.q.job_ack_many, {"token": token, "ids": ids})
                expired += len(ids)
            if len(jobs) >= params.n:
                break
            if key_limit is not None:
                if not (screened.jobs or screened.exhausted or screened.past_ttl):
                    break  # nothing left this claim may take
                continue
            if not screened.past_ttl:
                break
        if allowance is None:
            return ClaimResult(jobs, dead, expired)
        if allowance.limited and jobs:
            # Settling these frees the limited queue's slots: say so then (_slots_freed_in).
            self._slot_tokens[token] = params.queue
            while len(self._slot_tokens) > SLOT_TOKENS_KEPT:
                self._slot_tokens.popitem(last=False)
        if control is not None:
            self._spend_rate_in(tx, params, control, len(jobs))
        # Held back only when the rate cut the claim and the queue had more to give.
        held_back = allowance.retry_in if len(jobs) + dead + expired >= params.n else None
        return ClaimResult(jobs, dead, expired, held_back)

    def _control_in(self, tx: Tx, params: ClaimParams) -> QueueControl | None:
        """The claimed queue's controls, read (and locked, on the server engines) in the
        claim's transaction; a pause whose time ran out is ended here. None: the queue has
        none (any more), and is claimed plainly from then on."""
        binds = {"queue": params.queue, "now": params.now}
        control = read_control(tx.execute(self.q.control_get, binds).fetchone())
        if control is not None and control.paused and not control.paused_at(params.now):
            tx.execute(self.q.control_unpause_lapsed, binds)
            if tx.execute(self.q.control_drop_idle, binds).rowcount:
                control = None
        if control is None:
            self._controlled = self._controlled - {params.queue}
        return control

    def _allowance_in(self, tx: Tx, params: ClaimParams, control: QueueControl) -> Allowance:
        """What a claim of a controlled queue may take (:mod:`.controls` decides)."""
        held = 0
        if control.concurrency is not None and not control.paused_at(params.now):
            binds = {"queue": params.queue, "now": params.now}
            held = int(tx.execute(self.q.control_held, binds).fetchone()[0])
        return claim_allowance(control, params.now, params.n, held, params.now_us)

    def _spend_rate_in(
        self, tx: Tx, params: ClaimParams, control: QueueControl, taken: int
    ) -> None:
        """Spend ``taken`` claims of the queue's rate limit, if it has one: its next due
        time, written under the row's lock. Rows handed out spend it (dead-lettered and
        expired ones were not work); a claim that took none writes only a due time it
        found beyond any this rate sets (:func:`.controls.rate_overdue`)."""
        rate = control.rate
        if rate is None or not (taken or rate_overdue(rate, control.rate_tat_us, params.now_us)):
            return
        tat = rate_charged(rate, control.rate_tat_us, params.now_us, taken)
        tx.execute(self.q.control_rate_spend, {"queue": params.queue, "tat": tat})

    def _frees_slots(self, tokens: Collection[str]) -> bool:
        """Whether settling deliveries of these claim tokens frees a limited queue's slot
        (their claim was made under a concurrency limit)."""
        return any(token in self._slot_tokens for token in tokens)

    def _slots_freed_in(self, tx: Tx, tokens: Collection[str]) -> None:
        """Tell the idle consumers of the limited queues these tokens' settlements freed a
        slot of (at commit; PostgreSQL's NOTIFY), so the slot is claimed at once."""
        for queue in {q for t in tokens if (q := self._slot_tokens.get(t)) is not None}:
            self.q.announce_ready(tx, queue)

    def _see_controls(self, queue: str) -> bool:
        """Read which queues have controls (after a plain claim came back empty: it may
        have met a row this store did not know of), at most every
        :data:`CONTROLS_RECHECK` seconds (an idle consumer's empty claims would otherwise
        pay a second round trip each); whether ``queue`` has controls. A read that fails
        changes nothing: the claim's answer stands, a later empty one reads again."""
        now = time.monotonic()
        if now - self._controls_read_at < CONTROLS_RECHECK:
            return False
        self._controls_read_at = now
        try:
            self._controlled = frozenset(c.queue for c in self.controls())
        except StoreError as exc:
            logger.debug("could not read the queues' controls: %s", exc)
            return False
        return queue in self._controlled

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
        if any(queue in self._controlled for queue in queues):
            # A controlled queue's claim locks its row until commit: two workers locking
            # two queues' rows in their own orders would deadlock. So the ack first, then
            # each queue's claim in a transaction of its own (two commits, not one).
            acked = self.ack_and_enqueue(receipt, then)
            for queue in queues:
                claimed = self.claim(queue, 1, visibility, max_attempts).jobs
                if claimed:
                    return acked, claimed[0]
            return acked, None
        now = self.clock()
        rows = [self._job_row(job, now) for job in then]
        claims = [ClaimParams.of(q, 1, visibility, self.clock(), self.holder) for q in queues]
        ack = {"id": receipt.job_id, "token": receipt.token}
        dead: list[tuple[ClaimResult, str]] = []

        def work(tx: Tx) -> tuple[bool, ClaimedJob | None]:
            dead.clear()
            acked = tx.execute(self.q.job_ack, ack).rowcount == 1
            if acked:
                for row in rows:
                    self.q.insert_job(tx, row)
                if self._frees_slots([receipt.token]):
                    self._slots_freed_in(tx, [receipt.token])
            for params in claims:
                controlled = params.queue in self._controlled
                result = self._claim_in(tx, params, max_attempts, controlled=controlled)
                dead.append((result, params.queue))
                if result.jobs:
                    return acked, result.jobs[0]
            return acked, None

        outcome = self._run(work)
        for result, queue in dead:
            result.log(logger, queue)
        if outcome[1] is not None:
            self.stop_waiting()
        elif claims:
            self._see_controls(claims[0].queue)
        return outcome

    def ack(self, receipt: Receipt) -> bool:
        """Delete the job if ``receipt`` still holds it; ``False`` means stale (nothing written)."""
        params = {"id": receipt.job_id, "token": receipt.token}
        if self._frees_slots([receipt.token]):
            return self.ack_many([receipt]) == {receipt}
        return self._run(
            lambda tx: bool(tx.execute(self.q.job_ack, params).rowcount == 1), single=True
        )

    def ack_and_enqueue(self, receipt: Receipt, jobs: Sequence[NewJob]) -> bool:
        """Ack a delivery and store ``jobs`` in one transaction (the next job of a chain);
        when the delivery is stale nothing is written and ``False`` is returned."""
        now = self.clock()
        rows = [self._job_row(job, now) for job in jobs]
        params = {"id": receipt.job_id, "token": receipt.token}

        tokens = [receipt.token]
        frees = self._frees_slots(tokens)

        def work(tx: Tx) -> bool:
            if tx.execute(self.q.job_ack, params).rowcount != 1:
                return False
            for row in rows:
                self.q.insert_job(tx, row)
            if frees:
                self._slots_freed_in(tx, tokens)
            return True

        return self._run(work, single=not rows and not frees)

    def ack_many(self, receipts: Sequence[Receipt]) -> set[Receipt]:
        """Ack several deliveries in one transaction, each fenced by its own reservation;
        return those that were still held (one statement per claim token among them)."""
        by_token = ids_by_token(receipts)
        if not by_token:
            return set()
        return self._run(
            lambda tx: self._ack_rows_in(tx, by_token),
            single=len(by_token) == 1
            and self.q.ack_rows_in_one_statement
            and not self._frees_slots(by_token),
        )

    def _ack_rows_in(self, tx: Tx, by_token: dict[str, list[int]]) -> set[Receipt]:
        """Delete the rows each token still holds (one statement per token); those acked.
        A limited queue's idle consumers are told of the slots freed."""
        acked = {
            Receipt(job_id, token)
            for token, ids in by_token.items()
            for job_id in self.q.ack_rows(tx, token, ids)
        }
        if acked and self._frees_slots(by_token):
            self._slots_freed_in(tx, {r.token for r in acked})
        return acked

    def ack_many_and_claim(
        self,
        receipts: Sequence[Receipt],
        queue: str,
        n: int,
        visibility: float,
        max_attempts: int | None = None,
    ) -> tuple[set[Receipt], ClaimResult]:
        """:meth:`ack_many` then :meth:`claim`, in one transaction: a consumer draining a
        backlog pays one commit for its last round's acks and its next round's claim.

        The acks are written first, so the claim cannot meet a row they delete; where the
        engine makes both one statement (PostgreSQL, acks of one claim token), the claim
        leaves the acked ids out. Nothing ready (an empty peek, where the engine peeks
        first): only the acks are written."""
        if not receipts:
            return set(), self.claim(queue, n, visibility, max_attempts)
        params = ClaimParams.of(queue, n, visibility, self.clock(), self.holder)
        if n <= 0 or (self._peeks_first(queue) and not self._any_ready(params)):
            return self.ack_many(receipts), ClaimResult([])
        by_token = ids_by_token(receipts)
        controlled = queue in self._controlled
        if (
            len(by_token) == 1
            and self.q.ack_and_claim_in_one_statement
            and not controlled
            and not self._frees_slots(by_token)
        ):
            # One statement (one round trip); only rows that must not be handed out need
            # a transaction after it, as in claim().
            ((token, ids),) = by_token.items()
            binds = params.binds()
            acked_ids, rows = self._run(
                lambda tx: self.q.ack_and_claim_rows(tx, token, ids, binds), single=True
            )
            acked = {Receipt(job_id, token) for job_id in acked_ids}
            first = screen(rows, params.now, params.token, max_attempts)
            if first.plain:
                result = ClaimResult(first.jobs)
            else:
                try:
                    result = self._run(lambda tx: self._claim_in(tx, params, max_attempts, first))
                except StoreError as exc:
                    # The acks and the claim are committed: raising would have the caller
                    # keep acks already written. The rows that must not be handed out stay
                    # reserved by this claim and are screened again once it lapses.
                    logger.warning(
                        "claim on queue %r: could not settle %d row(s) past their attempts "
                        "or time to live (%s); they are screened again when their "
                        "reservation lapses",
                        queue,
                        len(first.exhausted) + len(first.past_ttl),
                        exc,
                    )
                    result = ClaimResult(first.jobs)
        else:

            def work(tx: Tx) -> tuple[set[Receipt], ClaimResult]:
                acked = self._ack_rows_in(tx, by_token)
                return acked, self._claim_in(tx, params, max_attempts, controlled=controlled)

            acked, result = self._run(work)
        if not result.jobs and not controlled and self._see_controls(queue):
            # The plain claim met a control this store did not know of: claim under it now
            # (the acks are committed).
            result = self._run(lambda tx: self._claim_in(tx, params, max_attempts, controlled=True))
        result.log(logger, queue)
        self._claimed(queue, result)
        return acked, result

    def release(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Make the job ready again after ``delay`` seconds (attempts unchanged); fenced."""
        return self._make_ready(self.q.job_release, receipt, delay)

    def return_job(self, receipt: Receipt, delay: float = 0.0) -> bool:
        """Hand back a delivery that never started: ready after ``delay`` seconds, its
        attempt refunded; fenced."""
        return self._make_ready(self.q.job_return, receipt, delay)

    def _make_ready(self, query: sa.TextClause, receipt: Receipt, delay: float) -> bool:
        now = self.clock()
        params = {
            "id": receipt.job_id,
            "token": receipt.token,
            "available_at": ready_at(now, delay),
        }
        tokens = [receipt.token]

        def work(tx: Tx) -> bool:
            settled = bool(tx.execute(query, params).rowcount == 1)
            if settled and self._frees_slots(tokens):
                self._slots_freed_in(tx, tokens)
            return settled

        return self._run(work, single=not self._frees_slots(tokens))

    def renew(self, receipts: Sequence[Receipt], visibility: float) -> set[Receipt]:
        """Extend the reservations still held; return the receipts that were.

        A receipt missing from the result was acked already or taken over.
        """
        if not receipts:
            return set()
        tokens = sorted({r.token for r in receipts})
        ids = sorted({r.job_id for r in receipts})
        until = reservation_deadline(self.clock(), visibility)

        def work(tx: Tx) -> set[Receipt]:
            renew = {"until": until, "tokens": tokens, "ids": ids}
            if tx.execute_bound(self.q.job_renew, renew).rowcount == len(receipts):
                return set(receipts)
            held = tx.execute_bound(self.q.job_held, {"tokens": tokens, "ids": ids}).fetchall()
            return {Receipt(int(job_id), token) for job_id, token in held} & set(receipts)

        return self._run(work)

    def gone(self, job_ids: Collection[int]) -> set[int]:
        """Which of ``job_ids`` have no row any more: settled (acked, dead-lettered, or
        completed in an application's transaction), not held by another consumer."""
        ids = sorted(set(job_ids))
        if not ids:
            return set()
        rows = self._run(
            lambda tx: tx.execute_bound(self.q.job_existing, {"ids": ids}).fetchall(),
            read_only=True,
            single=True,
        )
        return set(ids) - {int(r[0]) for r in rows}

    def holders(self, queues: Sequence[str] | None = None) -> list[Holding]:
        """Who holds live reservations, per queue: holder name, process, how many jobs;
        of ``queues`` alone when given (read from the claim index: cheap on a big table;
        what ``stats()`` says has held jobs)."""
        wanted = sorted(set(queues)) if queues is not None else None
        if wanted == []:
            return []

        def work(tx: Tx) -> list[Any]:
            if wanted is None:
                return list(tx.execute(self.q.job_holders, {"now": now}).fetchall())
            found: list[Any] = []
            for i in range(0, len(wanted), HOLDERS_PER_READ):
                params = {"now": now, "queues": wanted[i : i + HOLDERS_PER_READ]}
                found += tx.execute_bound(self.q.job_holders_of, params).fetchall()
            return found

        now = self._now()
        rows = self._run(work, read_only=True, single=True)
        return sorted(
            (Holding(str(q), by, inst, int(n)) for q, by, inst, n in rows),
            key=lambda h: (h.queue, h.holder or "", h.instance or ""),
        )

    def release_holder(
        self, holder: str, *, queue: str | None = None, instance: str | None = None
    ) -> int:
        """Hand back the live reservations signed ``holder`` (of ``queue``; of the process
        ``instance``) as if their visibility timeout ran out now: the next claim takes them
        as lapsed (redelivered, attempts counted) and the old holder's settlements are stale
        from then on. Live holders too: the caller decides the holder is gone. How many."""
        params: dict[str, Any] = {"holder": holder, "now": self._now()}
        query = self.q.job_release_holder
        if queue is not None:
            validate_queue_name(queue)
            params["queue"], query = queue, self.q.job_release_holder_queue
        elif instance is not None:
            params["instance"], query = instance, self.q.job_release_instance
        return int(self._run(lambda tx: tx.execute(query, params).rowcount, single=True))

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
        if self._frees_slots([receipt.token]):
            self._slots_freed_in(tx, [receipt.token])
        return True

    def dead_letter(self, receipt: Receipt, reason: str) -> bool:
        """Move the held job to ``askr_failed_jobs`` with ``reason``, in one transaction; fenced."""
        now = self._now()
        return self._run(lambda tx: self._dead_letter_in(tx, receipt, reason, now))

    def dead_letter_message(self, job: NewJob, reason: str) -> None:
        """Keep a message that never became a job — one ``kombu-sqlqueue move`` could not
        copy from another broker — as a dead letter of ``job.queue``: its bytes as they
        came, ``reason``, ``job.attempts`` (0: it never ran), and ``job.uuid``."""
        validate_queue_name(job.queue)
        self.check_payload_size(len(job.payload))
        params = {
            "uuid": job.uuid,
            "queue": job.queue,
            "payload": bytes(job.payload),
            "exception": fit_utf8(reason),
            "attempts": job.attempts,
            "failed_at": self._now(),
        }
        self._run(lambda tx: tx.execute(self.q.dead_letter_insert, params), single=True)

    # -- flow control (store/controls.py) ----------------------------------------------

    def pause(self, queue: str, for_seconds: float | None = None) -> int | None:
        """Pause ``queue``: no claim hands a job of it out until :meth:`resume` (or for
        ``for_seconds``). Held jobs still settle, publishes are still stored; a queue no
        one has used yet may be paused. Takes effect at every store's next claim. Returns
        when the pause ends by itself (unix seconds), None when it lasts until resumed."""
        now = self.clock()
        resume_at = check_pause(queue, for_seconds, now)
        params = {"queue": queue, "resume_at": resume_at, "now": int(now)}
        self._run(lambda tx: tx.execute(self.q.control_pause, params), single=True)
        self._controlled = self._controlled | {queue}
        return resume_at

    def limit(self, queue: str, concurrency: int | None) -> None:
        """At most ``concurrency`` jobs of ``queue`` held at once, across every worker
        (None: no limit). Jobs past it wait, uncharged, for a held one to settle; a
        change takes effect at every store's next claim."""
        params: dict[str, Any] = {"queue": queue, "now": self._now()}
        if concurrency is None:
            validate_queue_name(queue)

            def work(tx: Tx) -> None:
                tx.execute(self.q.control_unlimit, params)
                tx.execute(self.q.control_drop_idle, params)
                self.q.announce_ready(tx, queue)

            self._run(work)
            return
        params["concurrency"] = check_concurrency(queue, concurrency)
        self._run(lambda tx: tx.execute(self.q.control_limit, params), single=True)
        self._controlled = self._controlled | {queue}

    def key_limit(self, queue: str, per_key: int | None) -> None:
        """At most ``per_key`` jobs of one ``concurrency_key`` of ``queue`` held at once,
        across every worker (None: no such limit). Jobs of a key at its limit wait,
        uncharged, and the queue's other jobs are claimed past them; a change takes effect
        at every store's next claim."""
        params: dict[str, Any] = {"queue": queue, "now": self._now()}
        if per_key is None:
            validate_queue_name(queue)

            def work(tx: Tx) -> None:
                tx.execute(self.q.control_key_unlimit, params)
                tx.execute(self.q.control_drop_idle, params)
                self.q.announce_ready(tx, queue)

            self._run(work)
            return
        params["key_concurrency"] = check_concurrency(queue, per_key)
        self._run(lambda tx: tx.execute(self.q.control_key_limit, params), single=True)
        self._controlled = self._controlled | {queue}

    def rate_limit(self, queue: str, rate: Rate | None) -> None:
        """At most ``rate`` jobs of ``queue`` handed out, across every worker, spaced
        evenly (None: no rate limit). Jobs past it wait, uncharged; a change takes effect
        at every store's next claim (the spacing already earned is kept)."""
        params: dict[str, Any] = {"queue": queue, "now": self._now()}
        validate_queue_name(queue)
        if rate is None:

            def work(tx: Tx) -> None:
                tx.execute(self.q.control_unrate, params)
                tx.execute(self.q.control_drop_idle, params)
                self.q.announce_ready(tx, queue)

            self._run(work)
            return
        rate = check_rate(rate)
        params.update(count=rate.count, period_ms=round(rate.period * 1000), burst=rate.burst)
        self._run(lambda tx: tx.execute(self.q.control_rate, params), single=True)
        self._controlled = self._controlled | {queue}

    def resume(self, queue: str) -> bool:
        """End a pause of ``queue`` (idle consumers are told where the engine can); False
        when it was not paused."""
        validate_queue_name(queue)
        params = {"queue": queue, "now": self._now()}

        def work(tx: Tx) -> bool:
            resumed = bool(tx.execute(self.q.control_unpause, params).rowcount)
            tx.execute(self.q.control_drop_idle, params)
            if resumed:
                self.q.announce_ready(tx, queue)
            return resumed

        return self._run(work)

    def controls(self) -> list[QueueControl]:
        """Every queue's controls as stored (a pause whose time ran out included, until a
        claim ends it), by queue name."""
        rows = self._run(
            lambda tx: tx.execute(self.q.control_all, {}).fetchall(), read_only=True, single=True
        )
        return [control for control in map(read_control, rows) if control is not None]

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

    def get_job(self, job_id: int) -> dict[str, Any] | None:
        """The raw row of one job, for inspection and tests; None if it is gone."""

        def work(tx: Tx) -> dict[str, Any] | None:
            tx.execute(self.q.job_get, {"id": job_id})
            rows = tx.rows()
            return rows[0] if rows else None

        return self._run(work, read_only=True, single=True)

    def wait_for_jobs(
        self, seconds: float, queues: Collection[str] | None = None, private: Collection[str] = ()
    ) -> bool:
        """Idle wait: up to ``seconds``, returning early (True) when a job becomes ready on
        one of ``queues``. ``private``: those of ``queues`` only this consumer reads (a reply
        or broadcast queue), whose every enqueue wakes it.

        PostgreSQL wakes on NOTIFY (``PgListener``); other engines sleep (waiting.py).
        """
        return self._waits.wait(seconds, queues, private)

    def wakes_on_enqueue(self) -> bool:
        """True when an enqueue is sure to end some idle consumer's ``wait_for_jobs``
        (PostgreSQL's listener, connected): a consumer that found its queue drained may
        then wait without polling it again first."""
        return self._waits.wakes()

    def stop_waiting(self) -> None:
        """This consumer will not wait for jobs for a while (it has work, or no room for
        more): another idle consumer of its queues is woken meanwhile."""
        self._waits.leave()

    def interrupt_wait(self) -> None:
        """End the idle wait under way (or the next one) early: see ``JobContract``."""
        self._waits.interrupt()

    def close(self) -> None:
        """Close every pooled connection (and the wake-up listener)."""
        self._waits.close()
        super().close()


def read_control(row: Sequence[Any] | None) -> QueueControl | None:
    """A row of ``control_get`` / ``control_all`` (queue, paused, resume_at, concurrency,
    rate_count, rate_period_ms, rate_burst, rate_tat_us)."""
    if row is None:
        return None
    queue, paused, resume_at, concurrency, rate_count, rate_period_ms, rate_burst, tat, per_key = (
        row
    )
    rate = None
    if rate_count is not None and rate_period_ms is not None:
        try:
            rate = check_rate(
                Rate(int(rate_count), int(rate_period_ms) / 1000.0, int(rate_burst or 1))
            )
        except InvalidControl as exc:  # a row written by hand: no rate rather than no claims
            logger.warning("queue %r: ignoring its stored rate limit: %s", queue, exc)
    return QueueControl(
        str(queue),
        bool(paused),
        None if resume_at is None else int(resume_at),
        None if concurrency is None else int(concurrency),
        rate,
        int(tat or 0),
        _stored_key_limit(str(queue), per_key),
    )


def _stored_key_limit(queue: str, value: Any) -> int | None:
    """A stored per-key limit; one that is not a whole number from 1 (a row written by
    hand) is ignored with a warning — a limit of 0 would otherwise claim without one."""
    if value is None:
        return None
    if int(value) >= 1:
        return int(value)
    logger.warning("queue %r: ignoring its stored per-key limit %r", queue, value)
    return None


def ids_by_token(receipts: Sequence[Receipt]) -> dict[str, list[int]]:
    """Receipts grouped by claim token (each token's rows are acked by one statement)."""
    by_token: dict[str, list[int]] = {}
    for r in receipts:
        by_token.setdefault(r.token, []).append(r.job_id)
    return by_token
