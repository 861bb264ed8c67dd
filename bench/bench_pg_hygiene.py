"""Hot-table hygiene on PostgreSQL: does askr_jobs bloat under a steady enqueue/ack churn?

Usage::

    python bench/bench_pg_hygiene.py [--cycles 1000000] [--modes default aggressive]
    python bench/bench_pg_hygiene.py --url postgresql://user@host/scratch_db

Runs ``--cycles`` enqueue -> claim -> ack cycles through the store, batched:
each round is ``enqueue_many(500)``, then claims of ``--claim-batch`` (100)
until 500 are held, then one ``ack_many`` — on top of a small standing backlog
(``--backlog``, 1,000 jobs), so the live table stays tiny while a million rows
pass through it. Every ``--report-every`` cycles it prints the sizes of
``askr_jobs`` (``pg_total_relation_size``, heap ``pg_relation_size``, each
index) and ``n_live_tup`` / ``n_dead_tup`` / autovacuum count from
``pg_stat_user_tables``.

Modes (each on a fresh database of the same throwaway server):

* ``default``    — the server's autovacuum settings (naptime 1 min,
  ``autovacuum_vacuum_scale_factor`` 0.2, threshold 50, cost delay 2 ms);
* ``aggressive`` — ``ALTER TABLE askr_jobs SET (autovacuum_vacuum_scale_factor
  = 0.0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)``.

``--naptime`` (seconds) sets the server-wide ``autovacuum_naptime`` of the
throwaway server (not possible per table); default: the server's 60 s.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from kombu_sqlqueue.store import JobStore, NewJob

TESTS = Path(__file__).resolve().parent.parent / "tests"
ROUND = 500
PAYLOAD = b"x" * 200
AGGRESSIVE = (
    "ALTER TABLE askr_jobs SET (autovacuum_vacuum_scale_factor = 0.0, "
    "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)"
)
STATS = sa.text(
    """
    SELECT pg_total_relation_size('askr_jobs'), pg_relation_size('askr_jobs'),
           pg_relation_size('askr_jobs_pkey'), pg_relation_size('askr_jobs_claim'),
           s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count
      FROM pg_stat_user_tables s WHERE s.relname = 'askr_jobs'
    """
)
COLUMNS = ("total", "heap", "pkey", "claim_idx", "live", "dead", "autovac", "autoanalyze")


def mb(n: int) -> str:
    return f"{n / 1048576:.2f}"


def snapshot(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        # pg_stat counters are per backend snapshot; a fresh transaction sees fresh ones.
        row = conn.execute(STATS).one()
    return dict(zip(COLUMNS, (int(v or 0) for v in row), strict=True))


def line(label: str, s: dict[str, int], rate: float | None = None) -> str:
    return (
        f"{label:>14}  total {mb(s['total']):>8} MB  heap {mb(s['heap']):>8} MB  "
        f"pkey {mb(s['pkey']):>7} MB  claim_idx {mb(s['claim_idx']):>7} MB  "
        f"live {s['live']:>7,}  dead {s['dead']:>9,}  autovacuums {s['autovac']:>3}"
        + (f"  {rate:,.0f} cycles/s" if rate else "")
    )


def run_mode(url: str, mode: str, args: argparse.Namespace) -> list[tuple[str, dict[str, int]]]:
    store = JobStore(url)
    engine = sa.create_engine(store.url)
    snaps: list[tuple[str, dict[str, int]]] = []
    try:
        store.ensure_ready()
        if mode == "aggressive":
            with engine.begin() as conn:
                conn.exec_driver_sql(AGGRESSIVE)
        jobs = [NewJob("q", PAYLOAD, priority=i % 3) for i in range(ROUND)]
        for start in range(0, args.backlog, ROUND):
            store.enqueue_many(jobs[: min(ROUND, args.backlog - start)])
        snaps.append(("start", snapshot(engine)))
        print(f"[{mode}] {line('start', snaps[-1][1])}", flush=True)
        done = 0
        t0 = last_t = time.perf_counter()
        last_done = 0
        while done < args.cycles:
            store.enqueue_many(jobs)
            receipts = []
            while len(receipts) < ROUND:
                got = store.claim("q", min(args.claim_batch, ROUND - len(receipts)), 300).jobs
                if not got:
                    raise RuntimeError("queue unexpectedly empty")
                receipts.extend(j.receipt for j in got)
            if len(store.ack_many(receipts)) != len(receipts):
                raise RuntimeError("an ack was stale")
            done += ROUND
            if done % args.report_every == 0 or done >= args.cycles:
                now = time.perf_counter()
                rate = (done - last_done) / (now - last_t)
                last_t, last_done = now, done
                label = f"{done:,}"
                snaps.append((label, snapshot(engine)))
                print(f"[{mode}] {line(label, snaps[-1][1], rate)}", flush=True)
            if time.perf_counter() - t0 > args.max_seconds:
                print(f"[{mode}] stopping at {done:,} cycles: --max-seconds reached", flush=True)
                snaps.append((f"{done:,} (cut)", snapshot(engine)))
                break
        if args.settle > 0:
            time.sleep(args.settle)
            snaps.append((f"+{args.settle:.0f}s idle", snapshot(engine)))
            print(f"[{mode}] {line(snaps[-1][0], snaps[-1][1])}", flush=True)
        return snaps
    finally:
        store.close()
        engine.dispose()


@contextlib.contextmanager
def databases(args: argparse.Namespace) -> Iterator[Any]:
    if args.url:
        yield lambda _mode: args.url
        return
    sys.path.insert(0, str(TESTS))
    import servers

    server = servers.start_postgresql()
    try:
        if args.naptime:
            admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f"ALTER SYSTEM SET autovacuum_naptime = {int(args.naptime)}")
                conn.exec_driver_sql("SELECT pg_reload_conf()")
            admin.dispose()
        yield lambda mode: server.create_database(f"hygiene_{mode}")
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cycles", type=int, default=1_000_000)
    p.add_argument("--modes", nargs="+", default=["default", "aggressive"])
    p.add_argument("--backlog", type=int, default=1000)
    p.add_argument("--claim-batch", type=int, default=100)
    p.add_argument("--report-every", type=int, default=100_000)
    p.add_argument("--max-seconds", type=float, default=280.0, help="bound per mode")
    p.add_argument("--settle", type=float, default=0.0, help="idle seconds, then a last snapshot")
    p.add_argument("--naptime", type=float, default=0.0, help="server autovacuum_naptime, s")
    p.add_argument("--url", help="store URL of a scratch PostgreSQL database (one mode only)")
    args = p.parse_args(argv)
    if args.cycles % ROUND or args.report_every % ROUND:
        p.error(f"--cycles and --report-every must be multiples of {ROUND}")
    results: dict[str, list[tuple[str, dict[str, int]]]] = {}
    started = time.perf_counter()
    with databases(args) as url_for:
        for mode in args.modes:
            results[mode] = run_mode(url_for(mode), mode, args)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")
    for mode, snaps in results.items():
        print(f"\n{mode}: sizes in MB")
        print(
            "| after cycles | total | heap | pkey | claim index "
            "| n_live_tup | n_dead_tup | autovacuums |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for label, s in snaps:
            print(
                f"| {label} | {mb(s['total'])} | {mb(s['heap'])} | {mb(s['pkey'])} | "
                f"{mb(s['claim_idx'])} | {s['live']:,} | {s['dead']:,} | {s['autovac']} |"
            )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
