"""Where does the time go per message in sqlqueue's publish and consume+ack paths?

Usage::

    python bench/profile_sqlqueue.py [--messages N] [--top 30] [--no-profile]

1. Runs publish and consume+ack (the same code as ``bench_transports.py``) under
   cProfile, printing the top functions and a per-message µs breakdown of the
   layers (Kombu, the transport, JobStore, SQLAlchemy, sqlite3).
2. Floors for comparison: raw ``sqlite3`` INSERT / claim / DELETE with a
   commit each (same PRAGMAs), and the same statements through a SQLAlchemy
   ``Connection`` (connect + BEGIN IMMEDIATE per call, like ``JobStore._run``).
3. The claim query's plan and cost as the backlog grows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import secrets
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu.connection import Connection

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_transports import body, consume_n, publish_n

from kombu_sqlqueue.store import JobStore, NewJob
from kombu_sqlqueue.store.engines.base import Queries

# (label, substring of "file:line(function)" keys in pstats) → cumulative time.
LAYERS: list[tuple[str, str]] = [
    ("kombu Producer.publish (total)", "messaging.py:*(publish)"),
    ("  kombu serialization.dumps (body json)", "serialization.py:*(dumps)"),
    ("  virtual Channel.basic_publish", "virtual/base.py:*(basic_publish)"),
    ("  transport Channel._put", "transport.py:*(_put)"),
    ("    envelope.new_job (json.dumps, eta...)", "envelope.py:*(new_job)"),
    ("    JobStore.enqueue", "store.py:*(enqueue)"),
    ("kombu drain_events (total)", "connection.py:*(drain_events)"),
    ("  transport Channel._get_and_deliver", "transport.py:*(_get_and_deliver)"),
    ("  transport Channel._claim", "transport.py:*(_claim)"),
    ("    JobStore.claim", "store.py:*(claim)"),
    ("    Channel._decode (json.loads)", "transport.py:*(_decode)"),
    ("  kombu Consumer._receive_callback", "messaging.py:*(_receive_callback)"),
    ("    kombu Message.decode (body json)", "message.py:*(decode)"),
    ("    kombu Message.ack", "message.py:*(ack)"),
    ("      virtual QoS ack / sqlqueue QoS.ack", "qos.py:*(ack)"),
    ("        JobStore.ack", "store.py:*(ack)"),
    ("JobStore._run (all store calls)", "store.py:*(_run)"),
    ("  Executor._run_once", "executor.py:*(_run_once)"),
    ("    Executor._checkout", "executor.py:*(_checkout)"),
    ("    Executor._checkin", "executor.py:*(_checkin)"),
    ("    engine begin (BEGIN IMMEDIATE)", "sqlite.py:*(begin)"),
    ("    engine commit (COMMIT)", "sqlite.py:*(commit)"),
    ("    Tx.execute (the statement)", "executor.py:*(execute)"),
    ("  sqlite3 Cursor.execute (all)", "~:0(<method 'execute' of 'sqlite3.Cursor'"),
    ("  SQLAlchemy Connection.execute (legacy path)", "engine/base.py:*(execute)"),
]


def _match(key: tuple[str, int, str], pattern: str) -> bool:
    filename, _line, func = key
    want_file, _, want_func = pattern.partition(":*(")
    if want_func:
        return filename.endswith(want_file) and func == want_func[:-1]
    return pattern.split("~:0(")[-1] in func


def breakdown(stats: pstats.Stats, n: int) -> None:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    print(f"{'layer':<48} {'calls':>8} {'µs/msg cum':>11}")
    for label, pattern in LAYERS:
        calls = 0
        cum = 0.0
        for key, (_cc, nc, _tt, ct, _callers) in raw.items():
            if _match(key, pattern):
                calls += nc
                cum += ct
        if calls:
            print(f"{label:<48} {calls:>8} {cum / n * 1e6:>11.1f}")


def profiled(label: str, n: int, top: int, fn: Callable[[], Any], profile: bool) -> float:
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    fn()
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t0
    print(
        f"\n=== {label}: {n} msgs in {elapsed:.2f}s = {n / elapsed:,.0f} msg/s "
        f"({elapsed / n * 1e6:.0f} µs/msg{' under cProfile' if profile else ''}) ==="
    )
    if prof:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        breakdown(stats, n)
        stats.sort_stats("tottime").print_stats(top)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[-6000:])
    return elapsed


# -- floors ----------------------------------------------------------------------------------


def raw_sqlite_floor(path: Path, n: int) -> None:
    """The same statements with sqlite3 directly: one transaction (commit) per statement."""
    store = JobStore(f"sqlite:///{path}")
    store.enqueue(NewJob(queue="warm", payload=b"{}"))  # creates the schema
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    payload = b"x" * 400
    insert = (
        "INSERT INTO askr_jobs (queue, payload, priority, available_at, max_attempts, "
        "created_at, uuid) VALUES (?, ?, 0, ?, 25, ?, NULL)"
    )
    t0 = time.perf_counter()
    now = int(time.time())
    for _ in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute(insert, ("raw", payload, now, now))
        db.execute("COMMIT")
    t_insert = time.perf_counter() - t0
    # The transport's claim statement, spelled out here so this floor does not
    # follow edits of the package's query text.
    claim_sql = """
        UPDATE askr_jobs SET reserved_until = :until, attempts = attempts + 1,
               reserved_token = :token
         WHERE id IN (SELECT id FROM askr_jobs
                       WHERE queue = :queue AND available_at <= :now
                         AND (reserved_until IS NULL OR reserved_until <= :now)
                       ORDER BY priority DESC, available_at, id LIMIT :n)
        RETURNING id, queue, payload, priority, available_at, attempts, max_attempts, uuid
    """
    ids: list[tuple[int, str]] = []
    t0 = time.perf_counter()
    claimed = 0
    while claimed < n:
        token = secrets.token_hex(16)
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute(
            claim_sql,
            {
                "queue": "raw",
                "n": 32,
                "now": int(time.time()),
                "until": int(time.time()) + 60,
                "token": token,
            },
        ).fetchall()
        db.execute("COMMIT")
        claimed += len(rows)
        ids.extend((r[0], token) for r in rows)
        if not rows:
            break
    t_claim = time.perf_counter() - t0
    t0 = time.perf_counter()
    for job_id, token in ids:
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM askr_jobs WHERE id = ? AND reserved_token = ?", (job_id, token))
        db.execute("COMMIT")
    t_ack = time.perf_counter() - t0
    db.close()
    print(f"\n=== floor: raw sqlite3, one transaction per statement, N={n} ===")
    print(f"  INSERT+COMMIT        {t_insert / n * 1e6:7.1f} µs/msg")
    print(f"  claim 32 + COMMIT    {t_claim / n * 1e6:7.1f} µs/msg  ({claimed} claimed)")
    print(f"  DELETE+COMMIT (ack)  {t_ack / n * 1e6:7.1f} µs/msg")


def store_floor(path: Path, n: int) -> None:
    """JobStore directly (no Kombu): enqueue, claim(32), ack — and enqueue_many/ack_many."""
    store = JobStore(f"sqlite:///{path}")
    payload = b"x" * 400
    store.enqueue(NewJob(queue="warm", payload=payload))
    t0 = time.perf_counter()
    for _ in range(n):
        store.enqueue(NewJob(queue="st", payload=payload))
    t_enqueue = time.perf_counter() - t0
    t0 = time.perf_counter()
    receipts: list[Any] = []
    while True:
        jobs = store.claim("st", 32, 60).jobs
        if not jobs:
            break
        receipts.extend(j.receipt for j in jobs)
    t_claim = time.perf_counter() - t0
    t0 = time.perf_counter()
    for r in receipts:
        store.ack(r)
    t_ack = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, n, 32):
        store.enqueue_many([NewJob(queue="st2", payload=payload)] * min(32, n - i))
    t_many = time.perf_counter() - t0
    receipts = []
    while True:
        jobs = store.claim("st2", 32, 60).jobs
        if not jobs:
            break
        receipts.extend(j.receipt for j in jobs)
    t0 = time.perf_counter()
    for i in range(0, len(receipts), 32):
        store.ack_many(receipts[i : i + 32])
    t_ack_many = time.perf_counter() - t0
    store.close()
    print(f"\n=== floor: JobStore alone (no Kombu), N={n} ===")
    print(f"  enqueue              {t_enqueue / n * 1e6:7.1f} µs/msg")
    print(f"  claim(32)            {t_claim / n * 1e6:7.1f} µs/msg")
    print(f"  ack                  {t_ack / n * 1e6:7.1f} µs/msg")
    print(f"  enqueue_many(32)     {t_many / n * 1e6:7.1f} µs/msg")
    print(f"  ack_many(32)         {t_ack_many / n * 1e6:7.1f} µs/msg")


def sqlalchemy_overhead(path: Path, n: int) -> None:
    """Cost of one empty unit of work through JobStore._run vs raw sqlite3."""
    store = JobStore(f"sqlite:///{path}")
    store.size("x")

    def noop(tx: Any) -> None:
        return None

    t0 = time.perf_counter()
    for _ in range(n):
        store._run(noop)
    t_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n):
        store._run(noop, read_only=True)
    t_ro = time.perf_counter() - t0
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    t0 = time.perf_counter()
    for _ in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("COMMIT")
    t_raw = time.perf_counter() - t0
    db.close()
    print(f"\n=== empty transaction cost, N={n} ===")
    print(f"  JobStore._run(noop)            {t_run / n * 1e6:7.1f} µs")
    print(f"  JobStore._run(noop, read_only) {t_ro / n * 1e6:7.1f} µs")
    print(f"  raw BEGIN IMMEDIATE; COMMIT    {t_raw / n * 1e6:7.1f} µs")


def claim_plan(path: Path, n: int) -> None:
    """EXPLAIN QUERY PLAN of the claim, and its cost at growing backlogs."""
    store = JobStore(f"sqlite:///{path}")
    store.enqueue(NewJob(queue="warm", payload=b"{}"))
    db = sqlite3.connect(path, isolation_level=None)
    plan_sql = str(Queries.job_claim)
    names = set(re.findall(r"(?<!:):([a-z_]+)", plan_sql))
    params = {name: ("p" if name in ("queue", "token") else 32) for name in names}
    print("\n=== claim query plan (package's current Queries.job_claim) ===")
    for row in db.execute("EXPLAIN QUERY PLAN " + plan_sql, params):
        print("  ", row)
    print("\n=== claim(32) cost vs backlog (rows of the queue) ===")
    payload = b"x" * 400
    total = 0
    for backlog in (100, 1000, 10000, max(n, 20000)):
        add = backlog - total
        for i in range(0, add, 500):
            store.enqueue_many([NewJob(queue="p", payload=payload)] * min(500, add - i))
        total = backlog
        t0 = time.perf_counter()
        receipts: list[Any] = []
        for _ in range(3):
            receipts.extend(j.receipt for j in store.claim("p", 32, 60).jobs)
        dt = (time.perf_counter() - t0) / 3
        store.ack_many(receipts)
        total -= len(receipts)
        print(f"  backlog {backlog:>6}: claim(32) {dt * 1e3:7.2f} ms")
    store.close()
    db.close()


def _scratch_db(path: Path) -> sqlite3.Connection:
    store = JobStore(f"sqlite:///{path}")
    store.enqueue(NewJob(queue="warm", payload=b"{}"))  # the package's schema
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def what_if(workdir: Path, n: int) -> None:
    """Raw-sqlite3 experiments on scratch databases: what would the proposals buy?"""
    payload = b"x" * 400
    insert = (
        "INSERT INTO askr_jobs (queue, payload, priority, available_at, max_attempts, "
        "created_at, uuid) VALUES (?, ?, 0, ?, 25, ?, NULL)"
    )
    now = int(time.time())
    print(f"\n=== what-if (raw sqlite3, scratch DBs), N={n} ===")

    # (a) a one-statement write needs no BEGIN IMMEDIATE/COMMIT: autocommit is atomic.
    db = _scratch_db(workdir / "wa.db")
    t0 = time.perf_counter()
    for _ in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute(insert, ("a", payload, now, now))
        db.execute("COMMIT")
    t_tx = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n):
        db.execute(insert, ("b", payload, now, now))
    t_auto = time.perf_counter() - t0
    print(
        f"  INSERT in BEGIN IMMEDIATE..COMMIT {t_tx / n * 1e6:7.1f} µs; "
        f"autocommit INSERT {t_auto / n * 1e6:7.1f} µs"
    )
    ids = [r[0] for r in db.execute("SELECT id FROM askr_jobs WHERE queue = 'b'")]
    t0 = time.perf_counter()
    for job_id in ids:
        db.execute("DELETE FROM askr_jobs WHERE id = ? AND reserved_token IS NULL", (job_id,))
    t_del = time.perf_counter() - t0
    print(f"  autocommit DELETE (ack)           {t_del / len(ids) * 1e6:7.1f} µs")

    # (b) acks folded into the next claim's transaction: one commit per batch of 32.
    t0 = time.perf_counter()
    pending: list[int] = []
    done = 0
    while True:
        db.execute("BEGIN IMMEDIATE")
        if pending:
            marks = ",".join("?" * len(pending))
            db.execute(f"DELETE FROM askr_jobs WHERE id IN ({marks})", pending)
            done += len(pending)
        rows = db.execute(
            "UPDATE askr_jobs SET reserved_until = ?, attempts = attempts + 1, "
            "reserved_token = 't' WHERE id IN (SELECT id FROM askr_jobs WHERE queue = 'a' "
            "AND available_at <= ? AND (reserved_until IS NULL OR reserved_until <= ?) "
            "ORDER BY priority DESC, available_at, id LIMIT 32) RETURNING id, payload",
            (now + 60, now, now),
        ).fetchall()
        db.execute("COMMIT")
        pending = [r[0] for r in rows]
        if not rows:
            break
    t_fold = time.perf_counter() - t0
    print(
        f"  claim(32)+DELETE of previous batch, 1 commit: {t_fold / max(done, 1) * 1e6:7.1f} "
        f"µs/msg ({done} acked)"
    )
    db.close()

    # (c) claim cost with the current index vs one ordered like the claim's ORDER BY.
    claim = (
        "SELECT id FROM askr_jobs WHERE queue = ? AND available_at <= ? "
        "AND (reserved_until IS NULL OR reserved_until <= ?) "
        "ORDER BY priority DESC, available_at, id LIMIT 32"
    )
    for variant in ("current", "ordered"):
        db = _scratch_db(workdir / f"idx-{variant}.db")
        if variant == "ordered":
            db.execute("DROP INDEX askr_jobs_claim")
            db.execute(
                "CREATE INDEX askr_jobs_claim2 ON askr_jobs "
                "(queue, priority DESC, available_at, id, reserved_until)"
            )
        db.execute("BEGIN")
        db.executemany(insert, [("c", payload, now, now)] * 20000)
        db.execute("COMMIT")
        plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + claim, ("c", now, now))]
        t0 = time.perf_counter()
        for _ in range(200):
            db.execute(claim, ("c", now, now)).fetchall()
        dt = (time.perf_counter() - t0) / 200
        print(f"  claim SELECT at 20k backlog, {variant:<7} index: {dt * 1e3:6.3f} ms  {plan}")
        db.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--messages", "-n", type=int, default=5000)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--prefetch", type=int, default=32)
    p.add_argument("--no-profile", action="store_true", help="time only, no cProfile")
    args = p.parse_args(argv)
    n = args.messages
    workdir = Path(tempfile.mkdtemp(prefix="sqlqueue-prof-"))
    try:
        url = f"sqlqueue+sqlite:///{workdir / 'q.db'}"
        with Connection(url) as conn:
            conn.ensure_connection(max_retries=1)
            publish_n(conn, "warm", 10)
            print(f"message body {len(repr(body(0)))} chars")
            profiled(
                "publish",
                n,
                args.top,
                lambda: publish_n(conn, "consume_ack", n),
                not args.no_profile,
            )
        with Connection(url) as conn:
            profiled(
                "consume+ack",
                n,
                args.top,
                lambda: consume_n(conn, "consume_ack", n, args.prefetch, 120),
                not args.no_profile,
            )
        raw_sqlite_floor(workdir / "raw.db", n)
        store_floor(workdir / "store.db", n)
        sqlalchemy_overhead(workdir / "empty.db", n)
        claim_plan(workdir / "plan.db", n)
        what_if(workdir, n)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
