"""Claim rate against queue depth: does a claim slow down as the backlog grows?

Usage::

    python bench/bench_claim_depth.py [--depths 1000,200000] [--batch 32] [--claims 300]
    python bench/bench_claim_depth.py --engine postgresql --depths 1000,1000000
    python bench/bench_claim_depth.py --url postgresql://user@host/db --depths 1000,1000000

For each depth, a fresh queue is filled with that many ready jobs, then
``--claims`` rounds of ``claim(batch)`` + ``ack_many`` are timed; the backlog
is topped up between rounds so the depth holds. Prints jobs claimed per second
at each depth and the ratio to the smallest depth.

Engines: SQLite (default: a temp file per depth); ``--engine postgresql`` or
``--engine mariadb`` starts a throwaway server (``tests/servers.py``) and uses a
fresh database per depth; ``--url`` uses a store URL you give (the table is
emptied before each depth: use a scratch database). Filling uses the store's
``enqueue_many`` (500 rows a statement), except on PostgreSQL above 20,000
jobs, where one ``INSERT … SELECT generate_series`` writes the same columns the
store writes (queue, payload, priority, available_at, max_attempts,
created_at), followed by ``ANALYZE`` (what autovacuum would do shortly after
such a load).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from kombu_sqlqueue.store import JobStore, NewJob

TESTS = Path(__file__).resolve().parent.parent / "tests"
PAYLOAD = b"x" * 200
SQL_FILL_ABOVE = 20_000


def _fill_postgresql(store: JobStore, depth: int) -> None:
    now = int(time.time())
    engine = sa.create_engine(store.url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO askr_jobs"
                    " (queue, payload, priority, available_at, max_attempts, created_at)"
                    " SELECT 'q', :payload, g % 3, :now, 25, :now"
                    " FROM generate_series(0, :n - 1) AS g"
                ),
                {"payload": PAYLOAD, "now": now, "n": depth},
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE askr_jobs")
    finally:
        engine.dispose()


def fill(store: JobStore, depth: int) -> None:
    """Put ``depth`` ready jobs of queue ``q`` (priorities 0-2, 200-byte payloads) in the store."""
    store.ensure_ready()
    if store.url.get_backend_name() == "postgresql" and depth > SQL_FILL_ABOVE:
        _fill_postgresql(store, depth)
        return
    filler = [NewJob("q", PAYLOAD, priority=i % 3) for i in range(500)]
    for start in range(0, depth, len(filler)):
        store.enqueue_many(filler[: min(len(filler), depth - start)])


def claim_rate(url: str, depth: int, batch: int, claims: int) -> float:
    """Jobs claimed+acked per second with ``depth`` jobs waiting (store URL, no ``sqlqueue+``)."""
    store = JobStore(url)
    try:
        store.ensure_ready()
        store.purge("q")
        fill(store, depth)
        refill = [NewJob("q", PAYLOAD) for _ in range(batch)]
        spent = 0.0
        for _ in range(claims):
            started = time.perf_counter()
            jobs = store.claim("q", batch, 60).jobs
            store.ack_many([j.receipt for j in jobs])
            spent += time.perf_counter() - started
            store.enqueue_many(refill)  # keep the depth; not timed
        return claims * batch / spent
    finally:
        store.close()


@contextlib.contextmanager
def database_urls(engine: str | None, url: str | None, tmp: Path) -> Iterator[object]:
    """Yield a function depth -> fresh store URL for that depth."""
    if url is not None:
        yield lambda _depth: url
        return
    if engine in (None, "sqlite"):
        yield lambda depth: f"sqlite:///{tmp / f'depth-{depth}.db'}"
        return
    sys.path.insert(0, str(TESTS))
    import servers

    server = servers.start_postgresql() if engine == "postgresql" else servers.start_mariadb()
    try:
        yield lambda depth: server.create_database(f"depth_{depth}")
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> dict[int, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1000,200000")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "mariadb"], default=None)
    parser.add_argument("--url", help="store URL (no sqlqueue+ prefix) of a scratch database")
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    rates: dict[int, float] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        database_urls(args.engine, args.url, Path(tmp)) as url_for,
    ):
        for depth in depths:
            url = url_for(depth)  # type: ignore[operator]
            rates[depth] = claim_rate(url, depth, args.batch, args.claims)
            print(f"depth {depth:>9,}: {rates[depth]:>9,.0f} jobs claimed+acked/s", flush=True)
    base = rates[depths[0]]
    for depth in depths[1:]:
        print(f"rate at {depth:,} / rate at {depths[0]:,} = {rates[depth] / base:.2f}x")
    return rates


if __name__ == "__main__":
    main()
