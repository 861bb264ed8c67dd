"""Claim rate against queue depth: does a claim slow down as the backlog grows?

Usage::

    python bench/bench_claim_depth.py [--depths 1000,200000] [--batch 32] [--claims 300]

For each depth, a fresh SQLite queue is filled with that many ready jobs
(bulk enqueue), then ``--claims`` rounds of ``claim(batch)`` + ``ack_many``
are timed; the backlog is topped up between rounds so the depth holds. Prints
jobs claimed per second at each depth and the ratio to the smallest depth.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kombu_sqlqueue.store import JobStore, NewJob


def claim_rate(path: Path, depth: int, batch: int, claims: int) -> float:
    store = JobStore(f"sqlite:///{path}")
    try:
        filler = [NewJob("q", b"x" * 200, priority=i % 3) for i in range(5000)]
        for start in range(0, depth, len(filler)):
            store.enqueue_many(filler[: min(len(filler), depth - start)])
        refill = [NewJob("q", b"x" * 200) for _ in range(batch)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1000,200000")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--claims", type=int, default=300)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            path = Path(tmp) / f"depth-{depth}.db"
            rates[depth] = claim_rate(path, depth, args.batch, args.claims)
            print(f"depth {depth:>9,}: {rates[depth]:>9,.0f} jobs claimed+acked/s", flush=True)
    base = rates[depths[0]]
    for depth in depths[1:]:
        print(f"rate at {depth:,} / rate at {depths[0]:,} = {rates[depth] / base:.2f}x")


if __name__ == "__main__":
    main()
