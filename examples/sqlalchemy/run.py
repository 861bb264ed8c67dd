"""The SQLAlchemy example end to end: orders and their tasks committed together.

Creates the tables (the app's and the queue's), starts ``celery -A shop worker``, places three
orders — the second one fails after it enqueued, so its transaction rolls back with the task —
and waits for the receipts. Exits 1 unless exactly the two committed orders got a receipt and
the queue is empty.

    python examples/sqlalchemy/run.py
    DATABASE_URL=postgresql://app:secret@127.0.0.1/shop python examples/sqlalchemy/run.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.chdir(HERE)
sys.path.insert(0, str(HERE))

from kombu_sqlqueue.store import JobStore  # noqa: E402


def main() -> int:
    if "DATABASE_URL" not in os.environ:
        for stale in HERE.glob("shop.db*"):
            stale.unlink()
    from shop import DATABASE_URL, engine, metadata, orders, place_order

    metadata.create_all(engine)
    queue = JobStore(DATABASE_URL)
    queue.ensure_ready()  # the queue's tables, made before the first enlisted publish
    print(f"database and broker: {DATABASE_URL}")

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "shop", "worker", "-c", "1", "-l", "warning"],
        cwd=HERE,
    )
    try:
        first = place_order("ada@example.com", 1250)
        print(f"order {first}: committed with its receipt task")
        try:
            place_order("bob@example.com", 990, fail_after_enqueue=True)
        except RuntimeError as exc:
            print(f"second order: {exc} -> rolled back, and its receipt task with it")
        third = place_order("cy@example.com", 4200)
        print(f"order {third}: committed with its receipt task")

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                sent = conn.execute(
                    orders.select().where(orders.c.receipt_sent).order_by(orders.c.id)
                ).all()
            if len(sent) == 2 and queue.backlog("celery").total == 0:
                break
            time.sleep(0.2)
        with engine.connect() as conn:
            rows = conn.execute(orders.select().order_by(orders.c.id)).all()
        for row in rows:
            print(f"  order {row.id} {row.email}: receipt_sent={row.receipt_sent}")
        waiting = queue.backlog("celery").total
        if [r.id for r in rows] != [first, third] or not all(r.receipt_sent for r in rows):
            print("FAILED: expected exactly the two committed orders, each with its receipt")
            return 1
        if waiting or queue.dead_letters():
            print(f"FAILED: {waiting} task(s) left in the queue")
            return 1
        print("sqlalchemy example finished: each task committed with its order, or not at all.")
        return 0
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        queue.close()
        engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
