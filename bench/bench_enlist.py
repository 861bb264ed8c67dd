"""What a task committed with its data costs: an enlisted publish against publishing after the
commit, on SQLite, PostgreSQL and MariaDB — and the same in Django's shape.

Usage::

    python bench/bench_enlist.py [--orders 2000] [--rounds 5] [--json out.json]

Each cell is one "order": an INSERT into the app's ``orders`` table and one Celery task
(``send_task``, a real Celery producer over ``sqlqueue+``), the two patterns interleaved round
by round (a shared machine is noisy; the median round is reported):

* ``after_commit`` — what ``delay_on_commit()`` / ``transaction.on_commit`` do: the app's
  transaction commits the order, then the broker's own connection writes the task in a
  transaction of its own (and a crash between the two loses the task);
* ``enlisted`` — ``kombu_sqlqueue.enlist``: the task is written on the app's connection, in its
  transaction; one commit for both.

``django_*`` is the same pair through Django: ``transaction.atomic()`` with the transport
option ``django_atomic`` against ``transaction.on_commit(lambda: task.delay(...))`` (SQLite and
PostgreSQL: the Django example's engines). A throwaway PostgreSQL and MariaDB are started
(``tests/servers.py``) and stopped; nothing consumes (the publish side only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import servers  # noqa: E402

DJANGO_RUNNER = r"""
import json, sys, time, statistics
import django
from django.conf import settings
url, orders, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from urllib.parse import urlsplit
p = urlsplit(url)
if p.scheme == "sqlite":
    db = {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///"),
          "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                      "init_command": "PRAGMA journal_mode=WAL"}}
else:
    db = {"ENGINE": "django.db.backends.postgresql", "NAME": p.path.lstrip("/"),
          "USER": p.username or "", "HOST": p.hostname, "PORT": str(p.port)}
settings.configure(DATABASES={"default": db}, INSTALLED_APPS=[], USE_TZ=True)
django.setup()
from celery import Celery
from django.db import connection, transaction
enlisting = Celery("b1", broker="sqlqueue+" + url, set_as_current=False)
enlisting.conf.broker_transport_options = {"django_atomic": "default"}
plain = Celery("b2", broker="sqlqueue+" + url, set_as_current=False)
for app in (enlisting, plain):
    app.connection_for_write().ensure_connection()
    app.send_task("t.warm", (0,))
with connection.cursor() as c:
    c.execute("CREATE TABLE IF NOT EXISTS dj_orders (id INTEGER PRIMARY KEY, note TEXT)")
next_id = [0]
def insert(c):
    next_id[0] += 1
    c.execute("INSERT INTO dj_orders (id, note) VALUES (%s, %s)", [next_id[0], "x"])
    return next_id[0]
def enlisted():
    with transaction.atomic():
        with connection.cursor() as c:
            order = insert(c)
        enlisting.send_task("t.total", (order,))
def after_commit():
    with transaction.atomic():
        with connection.cursor() as c:
            order = insert(c)
        transaction.on_commit(lambda: plain.send_task("t.total", (order,)))
out = {"django_enlisted": [], "django_after_commit": []}
for _ in range(rounds):
    for name, fn in (("django_after_commit", after_commit), ("django_enlisted", enlisted)):
        start = time.perf_counter()
        for _ in range(orders):
            fn()
        out[name].append(orders / (time.perf_counter() - start))
print(json.dumps(out))
"""


def sqlalchemy_cells(url: str, orders: int, rounds: int) -> dict[str, list[float]]:
    import sqlalchemy as sa
    from celery import Celery

    from kombu_sqlqueue import enlist
    from kombu_sqlqueue.store import parse_store_url

    engine = sa.create_engine(parse_store_url(url)[1])
    table = sa.Table(
        "orders",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("note", sa.Text),
    )
    table.metadata.create_all(engine)
    app = Celery("bench", broker="sqlqueue+" + url, set_as_current=False)
    app.send_task("t.warm", (0,))  # tables, bindings and the producer made before timing
    next_id = iter(range(1, 10**9))

    def after_commit() -> None:
        order = next(next_id)
        with engine.begin() as conn:
            conn.execute(table.insert().values(id=order, note="x"))
        app.send_task("t.total", (order,))

    def enlisted() -> None:
        order = next(next_id)
        with engine.begin() as conn:
            conn.execute(table.insert().values(id=order, note="x"))
            with enlist(conn):
                app.send_task("t.total", (order,))

    cells: dict[str, list[float]] = {"after_commit": [], "enlisted": []}
    patterns: list[tuple[str, Callable[[], None]]] = [
        ("after_commit", after_commit),
        ("enlisted", enlisted),
    ]
    for _ in range(rounds):
        for name, fn in patterns:
            start = time.perf_counter()
            for _ in range(orders):
                fn()
            cells[name].append(orders / (time.perf_counter() - start))
    app.close()
    engine.dispose()
    return cells


def django_cells(url: str, orders: int, rounds: int) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, "-c", DJANGO_RUNNER, url, str(orders), str(rounds)],
        capture_output=True, text=True, timeout=1800, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pg = servers.start_postgresql()
        maria = servers.start_mariadb()
        try:
            urls = {
                "sqlite": f"sqlite:///{tmp}/bench.db",
                "postgresql": pg.create_database(f"b_{uuid.uuid4().hex[:12]}"),
                "mariadb": maria.create_database(f"b_{uuid.uuid4().hex[:12]}"),
            }
            for engine_name, url in urls.items():
                cells = sqlalchemy_cells(url, args.orders, args.rounds)
                if engine_name != "mariadb":
                    django_url = url if engine_name != "sqlite" else f"sqlite:///{tmp}/dj.db"
                    cells.update(django_cells(django_url, args.orders, args.rounds))
                results[engine_name] = {k: statistics.median(v) for k, v in cells.items()}
                row = results[engine_name]
                line = (
                    f"{engine_name:10s} orders/s  after_commit {row['after_commit']:7.0f}  "
                    f"enlisted {row['enlisted']:7.0f}  "
                    f"ratio {row['enlisted'] / row['after_commit']:.2f}x"
                )
                if "django_enlisted" in row:
                    line += (
                        f"   | django on_commit {row['django_after_commit']:7.0f}  "
                        f"django_atomic {row['django_enlisted']:7.0f}  ratio "
                        f"{row['django_enlisted'] / row['django_after_commit']:.2f}x"
                    )
                print(line, flush=True)
        finally:
            pg.stop()
            maria.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
