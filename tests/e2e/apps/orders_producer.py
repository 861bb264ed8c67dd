"""Insert order ``--order`` and enlist its task in the same transaction, say so, then wait
for the kill -9 the test sends before anything commits."""

from __future__ import annotations

import argparse
import sys
import time

from apps.orders_app import ORDERS, app_engine, create_app
from kombu_sqlqueue import enlist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--broker", required=True)
    p.add_argument("--order", type=int, required=True)
    args = p.parse_args()
    app = create_app(args.broker)
    engine = app_engine(args.broker)
    with engine.connect() as conn:
        conn.begin()
        conn.execute(ORDERS.insert().values(id=args.order, note="never committed"))
        with enlist(conn):
            app.tasks["orders.check"].delay(args.order)
        print("enqueued, not committed", flush=True)
        time.sleep(600)  # killed here
    return 0


if __name__ == "__main__":
    sys.exit(main())
