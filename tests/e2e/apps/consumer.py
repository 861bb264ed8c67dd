"""A plain Kombu consumer for the e2e tests, run as a real process.

Prints one JSON line per event on stdout (flushed), so a test can follow it:
``ready``, ``received`` (job id, attempts, redelivered, body), ``acked``, ``idle``.
Log records (e.g. kombu-sqlqueue's "stale ack" warning) go to stderr.

Modes:

* ``hold`` — take one message, hold it unacked until ``--ack-file`` exists,
  then ack it and exit 0.
* ``ack`` — ack every message (``--sleep`` seconds each), appending its body's ``id`` to ``--out``;
  exit 0 once ``--stop-file`` exists and a poll came back empty.
* ``die`` — on the first message, ``os._exit(1)`` without settling it (a
  consumer that crashes on every delivery of a poison message).

In every mode the process exits 0 after ``--idle-exit`` seconds without a message.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from kombu import Connection, Consumer, Queue


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **fields}), flush=True)


def transport_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=JSON`` pairs (``network_timeout=3``) as transport options."""
    return {key: json.loads(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--broker", required=True)
    p.add_argument("--queue", required=True)
    # ack-after: each message is recorded in its callback and acked after drain_events
    # returns (as a Celery worker's acks come: outside the delivery round), so the acks are
    # held and written with the next claim.
    p.add_argument("--mode", choices=("hold", "ack", "ack-after", "die"), required=True)
    p.add_argument("--visibility", type=float, default=2.0)
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--prefetch", type=int, default=1)
    p.add_argument("--ack-file")
    p.add_argument("--out")
    p.add_argument("--stop-file")
    p.add_argument("--start-file", help="after 'ready', wait for this file before consuming")
    p.add_argument("--idle-exit", type=float, default=30.0)
    p.add_argument("--sleep", type=float, default=0.0, help="ack mode: seconds per message")
    p.add_argument(
        "--no-recover-holds",
        action="store_true",
        help="leave a killed consumer's holds to lapse (transport option recover_holds=False)",
    )
    p.add_argument(
        "--redelivered-sleep",
        type=float,
        default=None,
        help="ack mode: seconds per message delivered before (instead of --sleep)",
    )
    p.add_argument(
        "--option", action="append", default=[], help="a transport option: KEY=JSON (repeatable)"
    )
    p.add_argument("--log-times", action="store_true", help="log lines start with time.time()")
    args = p.parse_args()

    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format=("%(created).3f " if args.log_times else "") + "%(levelname)s %(name)s: %(message)s",
    )
    options: dict[str, Any] = {"visibility_timeout": args.visibility, "polling_interval": 0.05}
    options.update(transport_options(args.option))
    if args.no_recover_holds:
        options["recover_holds"] = False
    if args.max_attempts is not None:
        options["queue_options"] = {args.queue: {"max_attempts": args.max_attempts}}

    received: list[Any] = []
    out = open(args.out, "a", encoding="utf-8") if args.out else None  # noqa: SIM115

    def on_message(body: Any, message: Any) -> None:
        tag = message.delivery_tag
        job_id = int(str(tag).split(":", 1)[0])
        held = message.channel.connection.held.snapshot().get(tag)
        emit(
            "received",
            job_id=job_id,
            attempts=held.attempts if held else None,
            redelivered=bool(message.delivery_info.get("redelivered")),
            body=body,
        )
        if args.mode == "die":
            os._exit(1)
        if args.mode in ("ack", "ack-after"):
            assert out is not None
            again = held is not None and held.attempts > 1
            time.sleep(args.redelivered_sleep if again and args.redelivered_sleep else args.sleep)
            out.write(f"{body['id']}\n")
            out.flush()
            if args.mode == "ack":
                message.ack()
            else:
                received.append(message)
        else:
            received.append(message)

    try:
        with Connection(args.broker, transport_options=options) as conn:
            queue = Queue(args.queue)
            with Consumer(
                conn, [queue], callbacks=[on_message], accept=["json"], prefetch_count=args.prefetch
            ):
                emit("ready")
                if args.start_file:  # so that every consumer competes from the start
                    gate = time.monotonic() + 60
                    while not os.path.exists(args.start_file) and time.monotonic() < gate:
                        time.sleep(0.02)
                last = time.monotonic()
                while True:
                    try:
                        conn.drain_events(timeout=0.25)
                        last = time.monotonic()
                    except TimeoutError:
                        if args.stop_file and os.path.exists(args.stop_file):
                            emit("stopped")
                            return 0
                        if time.monotonic() - last > args.idle_exit:
                            emit("idle")
                            return 0
                    if args.mode == "hold" and received:
                        break
                    if args.mode == "ack-after":
                        for message in received:
                            message.ack()
                        received.clear()
                message = received[0]
                assert args.ack_file
                while not os.path.exists(args.ack_file):
                    time.sleep(0.05)
                message.ack()
                emit("acked", job_id=int(str(message.delivery_tag).split(":", 1)[0]))
                return 0
    finally:
        if out is not None:
            out.close()


if __name__ == "__main__":
    sys.exit(main())
