"""One store call at a time on SQLite: enqueue, then claim+ack, per second — for an A/B of
two commits of the store.

Usage::

    python bench/bench_store_calls.py [--jobs 10000]
    # two commits side by side, interleaved (the machine is noisy: compare medians):
    git worktree add /tmp/a <commit-a>; git worktree add /tmp/b <commit-b>
    for r in 1 2 3; do for w in a b b a; do
      PYTHONPATH=/tmp/$w python bench/bench_store_calls.py; done; done

Prints which ``kombu_sqlqueue`` it imported (``PYTHONPATH`` decides), then jobs/s for
``--jobs`` single enqueues (200-byte payloads) into a fresh file and for draining them one
claim and one ack at a time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import kombu_sqlqueue
from kombu_sqlqueue.store import JobStore, NewJob


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=10000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = JobStore(f"sqlite:///{tmp}/q.db")
        try:
            store.ensure_ready()
            started = time.perf_counter()
            for _ in range(args.jobs):
                store.enqueue(NewJob("q", b"x" * 200))
            enqueue = args.jobs / (time.perf_counter() - started)
            started, drained = time.perf_counter(), 0
            while jobs := store.claim("q", 1, 60).jobs:
                store.ack(jobs[0].receipt)
                drained += 1
            drain = drained / (time.perf_counter() - started)
        finally:
            store.close()
    where = Path(kombu_sqlqueue.__file__).parent.parent
    print(f"{where}: enqueue {enqueue:,.0f}/s, claim+ack {drain:,.0f}/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
