"""A snapshot held open on PostgreSQL while jobs flow: what it costs the queue, and what is
left at its release.

Usage::

    python bench/bench_snapshot_hold.py                        # 2 min, 10 min held, 2 min
    python bench/bench_snapshot_hold.py --before 30 --hold 60 --after 30 --rate 200

A publisher thread offers ``--rate`` jobs/s (one enqueue each, 200-byte payloads) to a
throwaway server (or ``--url``); ``--consumers`` threads, each with its own store, claim one
job at a time, waking on NOTIFY, and ack it. After ``--before`` seconds another connection
opens a ``REPEATABLE READ`` transaction and reads ``askr_jobs`` (an application's
forgotten transaction, a long report), holds it ``--hold`` seconds and commits; the run goes
on ``--after`` seconds. Every ``--report-every`` seconds and at the end of each phase it
prints: jobs acked per second, the claim's latency (p50/p99 of the claim call that got a
job), publish-to-ack latency (p99), the backlog, ``n_dead_tup`` and the table's and its
indexes' size. The phase table's last column is the ratio to the phase before the hold, in
one run (the machine is shared and noisy: compare ratios, not absolute figures).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from bench_common import code_version

from kombu_sqlqueue.store import JobStore, NewJob

TESTS = Path(__file__).resolve().parent.parent / "tests"
QUEUE = "held"
STATS = sa.text(
    """
    SELECT s.n_dead_tup, pg_total_relation_size('askr_jobs'), s.autovacuum_count
      FROM pg_stat_user_tables s WHERE s.relname = 'askr_jobs'
    """
)


@dataclass
class Window:
    """What the consumers measured since the last report."""

    acked: int = 0
    claim_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)


class Meter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.window = Window()

    def record(self, claim_ms: float, latency_ms: float) -> None:
        with self.lock:
            self.window.acked += 1
            self.window.claim_ms.append(claim_ms)
            self.window.latency_ms.append(latency_ms)

    def take(self) -> Window:
        with self.lock:
            taken, self.window = self.window, Window()
        return taken


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def publish(url: str, rate: float, stop: threading.Event) -> None:
    store = JobStore(url)
    try:
        n, t0 = 0, time.monotonic()
        while not stop.is_set():
            store.enqueue(NewJob(QUEUE, f"{time.time():.6f}".encode().ljust(200, b" ")))
            n += 1
            ahead = t0 + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    finally:
        store.close()


def consume(url: str, meter: Meter, stop: threading.Event) -> None:
    store = JobStore(url)
    try:
        while not stop.is_set():
            started = time.perf_counter()
            jobs = store.claim(QUEUE, 1, 60).jobs
            claim_ms = (time.perf_counter() - started) * 1000
            if not jobs:
                store.wait_for_jobs(0.5, {QUEUE})
                continue
            job = jobs[0]
            store.ack(job.receipt)
            latency_ms = (time.time() - float(job.payload.strip())) * 1000
            meter.record(claim_ms, latency_ms)
    finally:
        store.close()


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    if args.url:
        yield args.url
        return
    sys.path.insert(0, str(TESTS))
    import servers

    server = servers.start_postgresql()
    try:
        yield server.create_database("held")
    finally:
        server.stop()


@dataclass
class Phase:
    name: str
    acked: int = 0
    seconds: float = 0.0
    claim_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    dead_at_end: int = 0
    size_at_end: int = 0

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway server)")
    p.add_argument("--rate", type=float, default=200.0, help="jobs/s offered")
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--before", type=float, default=120.0)
    p.add_argument("--hold", type=float, default=600.0)
    p.add_argument("--after", type=float, default=120.0)
    p.add_argument("--report-every", type=float, default=30.0)
    args = p.parse_args()
    print(
        f"bench_snapshot_hold at {code_version()}: {args.rate:.0f} jobs/s offered, "
        f"{args.consumers} consumers; {args.before:.0f} s, {args.hold:.0f} s held, "
        f"{args.after:.0f} s",
        flush=True,
    )
    with database(args) as url:
        JobStore(url).ensure_ready()
        stats_db = sa.create_engine(JobStore(url).url, isolation_level="AUTOCOMMIT")
        meter, stop = Meter(), threading.Event()
        threads = [threading.Thread(target=publish, args=(url, args.rate, stop), daemon=True)]
        threads += [
            threading.Thread(target=consume, args=(url, meter, stop), daemon=True)
            for _ in range(args.consumers)
        ]
        for thread in threads:
            thread.start()
        phases = [Phase("before"), Phase("held"), Phase("after")]
        holder = stats_db.connect()
        try:
            for phase, seconds in zip(phases, (args.before, args.hold, args.after), strict=True):
                if phase.name == "held":
                    holder.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    holder.exec_driver_sql("SELECT count(*) FROM askr_jobs").scalar()
                elif phase.name == "after":
                    holder.exec_driver_sql("COMMIT")
                end = time.monotonic() + seconds
                while (left := end - time.monotonic()) > 0:
                    step = min(args.report_every, left)
                    time.sleep(step)
                    window = meter.take()
                    phase.acked += window.acked
                    phase.seconds += step
                    phase.claim_ms += window.claim_ms
                    phase.latency_ms += window.latency_ms
                    with stats_db.connect() as conn:
                        dead, size, autovac = conn.execute(STATS).one()
                        backlog = conn.exec_driver_sql("SELECT count(*) FROM askr_jobs").scalar()
                    phase.dead_at_end, phase.size_at_end = int(dead or 0), int(size or 0)
                    print(
                        f"[{phase.name:>6}] {window.acked / step:7.1f} acked/s  claim p50 "
                        f"{pct(window.claim_ms, 50):6.2f} p99 {pct(window.claim_ms, 99):6.2f} ms"
                        f"  publish-to-ack p99 {pct(window.latency_ms, 99):8.1f} ms  backlog "
                        f"{backlog:>6}  dead rows {dead:>8,}  table+indexes "
                        f"{size / 1048576:7.2f} MB  autovacuums {autovac}",
                        flush=True,
                    )
        finally:
            stop.set()
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                holder.close()
            for thread in threads:
                thread.join(timeout=30)
            stats_db.dispose()
    base = phases[0]
    print("\nphase    acked/s  claim p50  claim p99  publish-to-ack p99  dead rows at end  "
          "MB at end  (ratio to before: acked/s, claim p99)")  # fmt: skip
    for phase in phases:
        print(
            f"{phase.name:<7} {phase.rate:8.1f}  {pct(phase.claim_ms, 50):6.2f} ms  "
            f"{pct(phase.claim_ms, 99):6.2f} ms  {pct(phase.latency_ms, 99):13.1f} ms  "
            f"{phase.dead_at_end:>16,}  {phase.size_at_end / 1048576:9.2f}  "
            f"({phase.rate / base.rate:.2f}x, "
            f"{pct(phase.claim_ms, 99) / pct(base.claim_ms, 99):.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
