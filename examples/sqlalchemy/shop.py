"""A small SQLAlchemy app whose tasks commit with its data: the queue is in its database.

``DATABASE_URL`` (default: ``sqlite:///shop.db`` here) is both the app's database and, behind
``sqlqueue+``, the broker. ``place_order`` inserts an order and enqueues ``send_receipt`` in one
transaction (``kombu_sqlqueue.enlist``): the task commits with the order, or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from celery import Celery

from kombu_sqlqueue import enlist
from kombu_sqlqueue.store import parse_store_url

HERE = Path(__file__).resolve().parent
DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{HERE / 'shop.db'}")

# The broker's drivers (psycopg 3, PyMySQL) for a URL that names none: one set installed.
engine = sa.create_engine(parse_store_url(DATABASE_URL)[1])
metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("email", sa.Text, nullable=False),
    sa.Column("total_cents", sa.Integer, nullable=False),
    sa.Column("receipt_sent", sa.Boolean, nullable=False, default=False),
)

app = Celery("shop", broker="sqlqueue+" + DATABASE_URL)
app.conf.update(task_acks_late=True, task_ignore_result=True)


@app.task(name="shop.send_receipt")
def send_receipt(order_id: int) -> str:
    """Runs after the order is committed — always finds it — and marks it sent."""
    with engine.begin() as conn:
        order = conn.execute(sa.select(orders).where(orders.c.id == order_id)).one()
        conn.execute(orders.update().where(orders.c.id == order_id).values(receipt_sent=True))
    return f"receipt for order {order.id} sent to {order.email}"


def place_order(email: str, total_cents: int, *, fail_after_enqueue: bool = False) -> int:
    """Insert an order and enqueue its receipt in one transaction; an exception after the
    enqueue rolls back both."""
    with engine.begin() as conn:
        order_id = conn.execute(
            orders.insert().values(email=email, total_cents=total_cents)
        ).inserted_primary_key[0]
        with enlist(conn):
            send_receipt.delay(order_id)
        if fail_after_enqueue:
            raise RuntimeError("payment declined")  # the order and its task roll back together
    return int(order_id)
