"""A task exists exactly when the order it is about does — ``kombu_sqlqueue.enlist`` with a
real ``celery worker`` whose task reads the order from the database, on every engine.

* 1,000 orders, each inserted and its task enlisted in one transaction; two thirds commit,
  one third roll back: every committed order's task runs and finds its row, no rolled-back
  order's task runs, nothing is left in the queue.
* The same loop with a plain ``delay()`` inside the transaction — what an app gets without
  ``enlist``: on PostgreSQL and MariaDB the rolled-back orders' tasks run anyway (and a fast
  worker may run a committed order's task before its commit); on SQLite the publish cannot
  get the write lock the app's transaction holds and fails.
* A producer killed with SIGKILL between its enlisted enqueue and its commit: neither the
  order nor its task.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from apps.orders_app import ORDERS, QUEUE, app_engine, create_app
from e2e_harness import Proc, celery_worker_args, wait_until

from kombu_sqlqueue import enlist
from kombu_sqlqueue.store import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROUNDS = 1000
PLAIN_ROUNDS = 150


def prepared(broker_url: str) -> sa.Engine:
    """The app's engine, its orders table and the queue's tables made (as at deploy)."""
    engine = app_engine(broker_url)
    ORDERS.metadata.create_all(engine)
    store = JobStore(broker_url.removeprefix("sqlqueue+"))
    store.ensure_ready()
    store.close()
    return engine


def ran(out_file: Path) -> list[dict[str, Any]]:
    if not out_file.exists():
        return []
    return [json.loads(line) for line in out_file.read_text().splitlines()]


def backlog(broker_url: str) -> int:
    store = JobStore(broker_url.removeprefix("sqlqueue+"))
    try:
        return store.backlog(QUEUE).total
    finally:
        store.close()


def start_worker(spawn: Callable[..., Proc], broker_url: str, out_file: Path) -> Proc:
    worker = spawn(
        "worker",
        celery_worker_args("orders", "-Q", QUEUE, app="apps.orders_app"),
        E2E_BROKER_URL=broker_url,
        E2E_OUT=str(out_file),
    )  # fmt: skip
    worker.wait_text("ready.", timeout=60)
    return worker


def test_enlisted_tasks_exist_exactly_when_their_orders_do(
    broker_url: str, spawn: Callable[..., Proc], out_file: Path
) -> None:
    engine = prepared(broker_url)
    app = create_app(broker_url)
    check = app.tasks["orders.check"]
    start_worker(spawn, broker_url, out_file)
    committed: list[int] = []
    try:
        for order in range(ROUNDS):
            with engine.connect() as conn:
                conn.begin()
                conn.execute(ORDERS.insert().values(id=order, note="enlisted"))
                with enlist(conn):
                    check.delay(order)
                if order % 3 == 2:
                    conn.rollback()
                else:
                    conn.commit()
                    committed.append(order)
        wait_until(lambda: len(ran(out_file)) >= len(committed), timeout=150, what="the tasks")
        wait_until(lambda: backlog(broker_url) == 0, timeout=30, what="an empty queue")
    finally:
        app.close()
        engine.dispose()
    results = ran(out_file)
    assert sorted(r["order"] for r in results) == committed  # each once, no rolled-back one
    assert [r for r in results if not r["found"]] == []  # every task found its order


def test_a_plain_delay_inside_the_transaction_is_what_enlist_fixes(
    engine_name: str, broker_url: str, spawn: Callable[..., Proc], out_file: Path
) -> None:
    engine = prepared(broker_url)
    if engine_name == "sqlite":
        # One writer: the app's transaction holds the lock the broker's own connection needs.
        app = create_app(broker_url, busy_timeout=0.2, reconnect_timeout=0.5)
        try:
            with engine.connect() as conn:
                conn.begin()
                conn.execute(ORDERS.insert().values(id=1, note="plain"))
                with pytest.raises(Exception, match="locked"):
                    app.tasks["orders.check"].apply_async((1,), retry=False)
                conn.rollback()
        finally:
            app.close()
            engine.dispose()
        return
    app = create_app(broker_url)
    check = app.tasks["orders.check"]
    start_worker(spawn, broker_url, out_file)
    rolled_back = 0
    try:
        for order in range(PLAIN_ROUNDS):
            with engine.connect() as conn:
                conn.begin()
                conn.execute(ORDERS.insert().values(id=order, note="plain"))
                check.delay(order)  # on the broker's own connection: committed at once
                if order % 3 == 2:
                    conn.rollback()
                    rolled_back += 1
                else:
                    conn.commit()
        wait_until(lambda: len(ran(out_file)) >= PLAIN_ROUNDS, timeout=120, what="the tasks")
    finally:
        app.close()
        engine.dispose()
    missing = [r["order"] for r in ran(out_file) if not r["found"]]
    print(f"{engine_name}: {len(missing)} of {PLAIN_ROUNDS} tasks found no order "
          f"({rolled_back} orders rolled back)")  # fmt: skip
    assert len(ran(out_file)) == PLAIN_ROUNDS  # every task ran, the rolled-back ones too
    assert len(missing) >= rolled_back


def test_a_producer_killed_before_its_commit_leaves_neither_order_nor_task(
    broker_url: str, spawn: Callable[..., Proc]
) -> None:
    engine = prepared(broker_url)
    producer = spawn(
        "producer",
        [sys.executable, "-m", "apps.orders_producer", "--broker", broker_url, "--order", "7"],
    )
    producer.wait_text("enqueued, not committed", timeout=60)
    producer.send_signal(signal.SIGKILL)
    producer.wait(timeout=30)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(ORDERS)).scalar() == 0
    finally:
        engine.dispose()
    store = JobStore(broker_url.removeprefix("sqlqueue+"))
    try:
        assert store.backlog(QUEUE).total == 0
        assert store.claim(QUEUE, 10, 30).jobs == []
    finally:
        store.close()
