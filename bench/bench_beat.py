"""What a periodic task's tick costs with ``kombu_sqlqueue.beat:DatabaseScheduler``, and that
a queue without beats pays nothing (issue 34).

Usage::

    python bench/bench_beat.py [--engines sqlite,postgresql,mariadb] [--ticks 300]

Per engine (a fresh database; PostgreSQL and MariaDB are tests/servers.py's throwaway
servers), in this process:

* **a tick, one beat**: ``DatabaseScheduler.reserve`` of a due entry — the compare-and-set
  of its last run and the task's message written in that transaction, then the commit —
  ``--ticks`` times: median and p95 milliseconds, and the statements one tick runs (counted
  at SQLAlchemy's cursor events for the take, and the store's statement log for the
  enlisted enqueue);
* **three beats on one entry**: three schedulers (threads, each its own pool) take the same
  ticks at once, ``--ticks`` rounds: how many each round sent (always one), and what a beat
  that lost pays (its take changed nothing; it reads the entry again);
* **a queue without beats**: 500 messages published and consumed through Kombu with the
  statement log on: how many statements name ``askr_beat_entries`` (0: no path of a worker
  or a producer reads the schedule).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_common import code_version, raise_on_sigterm  # noqa: E402

ENGINES = ("sqlite", "postgresql", "mariadb")
STARTER = {"postgresql": "postgresql", "mariadb": "mysql"}


class StatementLog(logging.Handler):
    """The store's ``SQL …`` debug lines (the executor logs each statement it runs)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("SQL "):
            self.lines.append(text)


@contextlib.contextmanager
def statement_log() -> Iterator[StatementLog]:
    handler = StatementLog()
    logger = logging.getLogger("kombu_sqlqueue.store.executor")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def make_app(broker_url: str) -> Any:
    from celery import Celery

    app = Celery("bench_beat", broker=broker_url, set_as_current=False)
    app.conf.update(
        beat_schedule={"tick": {"task": "bench.tick", "schedule": 0.001}},
        result_expires=None,
    )
    return app


def one_beat(broker_url: str, ticks: int) -> dict[str, float]:
    import sqlalchemy as sa

    from kombu_sqlqueue.beat import DatabaseScheduler

    app = make_app(broker_url)
    scheduler = DatabaseScheduler(app)
    taken: list[int] = []
    table = scheduler._table
    assert table is not None

    @sa.event.listens_for(table.db, "before_cursor_execute")
    def count(*_args: Any) -> None:
        taken.append(1)

    try:
        entry = scheduler.schedule["tick"]
        times = []
        statements = []
        with statement_log() as log:
            for _ in range(ticks):
                before_sa, before_store = len(taken), len(log.lines)
                started = time.perf_counter()
                scheduler.reserve(entry)
                times.append(time.perf_counter() - started)
                statements.append(len(taken) - before_sa + len(log.lines) - before_store)
        runs = next(r for r in table.entries() if r.name == "tick").total_run_count
        assert runs == ticks, (runs, ticks)
        times.sort()
        return {
            "median_ms": statistics.median(times) * 1000,
            "p95_ms": times[int(len(times) * 0.95)] * 1000,
            "statements": statistics.median(statements),
        }
    finally:
        sa.event.remove(table.db, "before_cursor_execute", count)
        scheduler.close()
        app.close()


def three_beats(broker_url: str, rounds: int) -> dict[str, float]:
    """Three schedulers take the same ticks at once: each round one sends."""
    from kombu_sqlqueue.beat import DatabaseScheduler

    apps = [make_app(broker_url) for _ in range(3)]
    schedulers = [DatabaseScheduler(app) for app in apps]
    barrier = threading.Barrier(3)
    lost_times: list[float] = []
    lock = threading.Lock()
    try:
        for s in schedulers:
            s._load(force=True)
        runs_before = schedulers[0].schedule["tick"].total_run_count

        def run(i: int) -> None:
            s = schedulers[i]
            for _ in range(rounds):
                entry = s.schedule["tick"]
                barrier.wait()
                sent_before = s.sent_ticks
                started = time.perf_counter()
                s.reserve(entry)
                took = time.perf_counter() - started
                if s.sent_ticks == sent_before:
                    with lock:
                        lost_times.append(took)
                barrier.wait()
                s._load(force=True)  # every beat reads the entry's last run again

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        table = schedulers[0]._table
        assert table is not None
        runs = next(r for r in table.entries() if r.name == "tick").total_run_count
        return {
            "rounds": rounds,
            "sent": runs - runs_before,
            "won_per_beat": [s.sent_ticks for s in schedulers],  # type: ignore[dict-item]
            "lost_median_ms": statistics.median(lost_times) * 1000 if lost_times else 0.0,
        }
    finally:
        for s in schedulers:
            s.close()
        for app in apps:
            app.close()


def without_beats(broker_url: str, messages: int = 500) -> int:
    """Statements naming the schedule's table while a queue is used without beats."""
    from kombu import Connection, Consumer, Producer, Queue

    queue = Queue("plain")
    with statement_log() as log, Connection(broker_url) as conn:
        producer = Producer(conn.channel(), routing_key="plain")
        for i in range(messages):
            producer.publish({"n": i}, serializer="json", declare=[queue])
        got = 0

        def on_message(body: Any, message: Any) -> None:
            nonlocal got
            got += 1
            message.ack()

        with Consumer(conn, [queue], callbacks=[on_message], accept=["json"]):
            deadline = time.monotonic() + 60
            while got < messages and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=1)
    assert got == messages, got
    return sum("askr_beat_entries" in line for line in log.lines)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--ticks", type=int, default=300)
    args = p.parse_args(argv)
    import servers  # tests/servers.py

    print(f"# bench_beat — code {code_version()}")
    started: list[Any] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for engine in args.engines.split(","):
                if engine == "sqlite":
                    url = f"sqlqueue+sqlite:///{Path(tmp) / 'beat.db'}"
                else:
                    server = servers.STARTERS[STARTER[engine]]()
                    started.append(server)
                    url = "sqlqueue+" + server.create_database("beat")
                one = one_beat(url, args.ticks)
                print(
                    f"{engine:10} one beat: a tick {one['median_ms']:.2f} ms median, "
                    f"{one['p95_ms']:.2f} ms p95, {one['statements']:.0f} statements",
                    flush=True,
                )
                three = three_beats(url, max(20, args.ticks // 5))
                print(
                    f"{engine:10} three beats, {three['rounds']} rounds: {three['sent']} sent "
                    f"(won per beat {three['won_per_beat']}), a lost take "
                    f"{three['lost_median_ms']:.2f} ms median",
                    flush=True,
                )
                print(
                    f"{engine:10} a queue without beats: {without_beats(url)} statements "
                    "name askr_beat_entries in 500 publishes and consumes",
                    flush=True,
                )
    finally:
        for server in started:
            with contextlib.suppress(Exception):
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
