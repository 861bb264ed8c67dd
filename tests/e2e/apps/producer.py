"""Publish ``--count`` JSON messages ``{"id": "<prefix>-<n>"}`` to a queue, then exit.

Prints ``{"event": "done", "count": N}`` when every publish has returned. With
``--pause-until-delivered DIR`` it stops after publishing half and goes on only once a
consumer has written a delivery to a ``delivered-*.txt`` file in DIR, so publishing and
consuming overlap by construction rather than by timing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from kombu import Connection, Queue

from apps.consumer import transport_options


def wait_for_a_delivery(directory: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(f.stat().st_size > 0 for f in directory.glob("delivered-*.txt")):
        if time.monotonic() > deadline:
            raise SystemExit(f"no consumer delivered anything within {timeout:.0f} s")
        time.sleep(0.02)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--broker", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--pause-until-delivered", type=Path, default=None)
    p.add_argument("--interval", type=float, default=0.0, help="seconds between publishes")
    p.add_argument("--out", type=Path, help="append each id once its publish has returned")
    p.add_argument("--option", action="append", default=[], help="a transport option: KEY=JSON")
    p.add_argument("--log-times", action="store_true", help="log lines start with time.time()")
    args = p.parse_args()
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=(
            "%(created).3f %(levelname)s %(name)s: %(message)s"
            if args.log_times
            else "%(levelname)s:%(name)s:%(message)s"  # logging's own
        ),
    )
    options: dict[str, object] = transport_options(args.option)
    out = args.out.open("a", encoding="utf-8") if args.out else None
    if args.max_attempts is not None:
        options["queue_options"] = {args.queue: {"max_attempts": args.max_attempts}}
    start = time.monotonic()
    with Connection(args.broker, transport_options=options) as conn:
        producer = conn.Producer(serializer="json")
        queue = Queue(args.queue)
        for n in range(args.count):
            if args.pause_until_delivered is not None and n == args.count // 2:
                wait_for_a_delivery(args.pause_until_delivered)
            producer.publish(
                {"id": f"{args.prefix}-{n}"},
                routing_key=args.queue,
                declare=[queue] if n == 0 else [],
            )
            if out is not None:
                out.write(f"{args.prefix}-{n}\n")
                out.flush()
            if args.interval:
                time.sleep(args.interval)
    print(
        json.dumps(
            {
                "event": "done",
                "count": args.count,
                "secs": time.monotonic() - start,
                "t": time.time(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
