"""A Celery app whose task reads the order it is about, from the database the queue is in.

What the enlist e2e tests run in a real ``celery worker`` (``-A apps.orders_app``) and use to
send tasks (:func:`create_app`). Environment: ``E2E_BROKER_URL`` (``sqlqueue+<db-url>``),
``E2E_OUT`` (each task appends ``{"order": id, "found": bool}``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import sqlalchemy as sa
from celery import Celery

from kombu_sqlqueue.store import parse_store_url

QUEUE = "orders"
ORDERS = sa.Table(
    "orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("note", sa.Text),
)


def app_engine(broker_url: str) -> sa.Engine:
    """The application's own engine on the broker's database (the package's drivers)."""
    return sa.create_engine(parse_store_url(broker_url.removeprefix("sqlqueue+"))[1])


def create_app(broker_url: str, **options: Any) -> Celery:
    app = Celery("orders_app", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_transport_options={"polling_interval": 0.05, **options},
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        task_ignore_result=True,
        worker_prefetch_multiplier=4,
    )
    engine: list[sa.Engine] = []

    @app.task(name="orders.check", shared=False)
    def check(order_id: int) -> None:
        """Look the order up, as a task about it would, and say whether it was there."""
        if not engine:
            engine.append(app_engine(broker_url))
        with engine[0].connect() as conn:
            found = conn.execute(sa.select(ORDERS.c.id).where(ORDERS.c.id == order_id)).first()
        line = json.dumps({"order": order_id, "found": found is not None})
        with open(os.environ["E2E_OUT"], "a", encoding="utf-8") as f:
            f.write(line + "\n")

    return app


if "E2E_BROKER_URL" in os.environ:  # the worker's ``-A apps.orders_app``
    app = create_app(os.environ["E2E_BROKER_URL"])
