"""What a metrics scrape costs, and what scraping every second costs the claims.

Usage::

    python bench/bench_metrics.py [--engines sqlite,postgresql,mysql] [--depth 1000000]
                                  [--seconds 8] [--rounds 2] [--json out.json]

Per engine (SQLite: a temp file; PostgreSQL, MariaDB: throwaway servers from
``tests/servers.py``), the job table is filled with ``--depth`` ready jobs over 10
queues (``bench_claim_depth.fill``'s way), plus 1,000 dead letters; then:

* **scrape**: the exporter's whole read (``QueueAdmin.stats``: one grouped query on
  ``askr_jobs``, one on ``askr_failed_jobs``), median of 7, in milliseconds — right after
  the load, and after what autovacuum does next (``vacuum``);
* **claims with and without a scraper**: one process claims 32 jobs and acks them
  (``claim`` + ``ack_many``), topping the queue up as it goes, for ``--seconds``; the
  same run with a second process scraping once a second (what Prometheus does at a
  1 s interval), alternated ``--rounds`` times. Printed: claims/s each way and the
  ratio (scraped / unscraped; 1.00 = no cost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import bench_claim_depth  # noqa: E402
import servers  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from kombu_sqlqueue.store import JobStore, NewJob  # noqa: E402

QUEUES = [f"q{i}" for i in range(10)]


@contextlib.contextmanager
def database(engine: str) -> Iterator[str]:
    if engine == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/metrics.db"
        return
    server = servers.STARTERS[engine]()
    try:
        yield server.create_database("bench_metrics")
    finally:
        server.stop()


def fill(url: str, depth: int) -> None:
    """``depth`` ready jobs spread over :data:`QUEUES`, and 1,000 dead letters."""
    store = JobStore(url)
    try:
        bench_claim_depth.fill(store, depth)  # queue "q"
        # Spread over ten queues, as a real database is (MariaDB's || is OR).
        spread = (
            "UPDATE askr_jobs SET queue = CONCAT('q', id % 10)"
            if store.url.get_backend_name() == "mysql"
            else "UPDATE askr_jobs SET queue = 'q' || (id % 10)"
        )
        db = sa.create_engine(store.url)
        with db.begin() as conn:
            conn.execute(sa.text(spread))
        db.dispose()
        store.enqueue_many([NewJob("dead", b"x") for _ in range(1000)])
        for job in store.claim("dead", 1000, 60).jobs:
            store.dead_letter(job.receipt, "bench")
    finally:
        store.close()


def vacuum(url: str) -> None:
    """What autovacuum does to the table after a bulk load (PostgreSQL: VACUUM ANALYZE,
    which also sets the visibility map, so the grouped count can read the claim index
    alone; MariaDB: ANALYZE TABLE; SQLite: ANALYZE)."""
    db = sa.create_engine(JobStore(url).url)
    try:
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            statement = {
                "postgresql": "VACUUM ANALYZE askr_jobs",
                "mysql": "ANALYZE TABLE askr_jobs",
            }.get(db.dialect.name, "ANALYZE")
            conn.exec_driver_sql(statement)
    finally:
        db.dispose()


def scrape_ms(url: str) -> float:
    store = JobStore(url)
    try:
        samples = []
        for _ in range(7):
            started = time.perf_counter()
            store.admin.stats()
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)
    finally:
        store.close()


def _scraper(url: str, stop: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    store = JobStore(url)
    while not stop.wait(1.0):
        store.admin.stats()
    store.close()


def claims_per_second(url: str, seconds: float) -> float:
    store = JobStore(url)
    try:
        claimed = 0
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        i = 0
        while time.perf_counter() < deadline:
            queue = QUEUES[i % len(QUEUES)]
            i += 1
            jobs = store.claim(queue, 32, 60).jobs
            store.ack_many([j.receipt for j in jobs])
            store.enqueue_many([NewJob(queue, j.payload) for j in jobs])  # hold the depth
            claimed += len(jobs)
        return claimed / (time.perf_counter() - started)
    finally:
        store.close()


def measure(engine: str, depth: int, seconds: float, rounds: int) -> dict[str, float]:
    with database(engine) as url:
        print(f"{engine}: filling {depth:,} jobs …", flush=True)
        fill(url, depth)
        result = {"scrape_ms_loaded": scrape_ms(url)}
        vacuum(url)
        result["scrape_ms"] = scrape_ms(url)
        plain: list[float] = []
        scraped: list[float] = []
        ctx = mp.get_context("spawn")
        for _ in range(rounds):
            plain.append(claims_per_second(url, seconds))
            stop = ctx.Event()
            scraper = ctx.Process(target=_scraper, args=(url, stop))
            scraper.start()
            try:
                scraped.append(claims_per_second(url, seconds))
            finally:
                stop.set()
                scraper.join(timeout=30)
        result["claims_per_s"] = statistics.median(plain)
        result["claims_per_s_scraped"] = statistics.median(scraped)
        result["ratio"] = result["claims_per_s_scraped"] / result["claims_per_s"]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--depth", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {
        engine: measure(engine, args.depth, args.seconds, args.rounds)
        for engine in args.engines.split(",")
    }
    print(f"\n{args.depth:,} jobs waiting over 10 queues, 1,000 dead letters")
    print(
        f"{'engine':12} {'scrape ms (loaded)':>18} {'scrape ms':>10} {'claims/s':>10} "
        f"{'scraped 1/s':>12} {'ratio':>6}"
    )
    for engine, r in results.items():
        print(
            f"{engine:12} {r['scrape_ms_loaded']:>18.1f} {r['scrape_ms']:>10.1f} "
            f"{r['claims_per_s']:>10.0f} {r['claims_per_s_scraped']:>12.0f} {r['ratio']:>6.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
