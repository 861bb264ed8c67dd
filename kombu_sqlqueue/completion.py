"""Complete a task in the application's transaction: :func:`complete`.

A Celery task whose effects are in the broker's database writes them and the deletion of
its job in one transaction, fenced by its delivery's reservation::

    @app.task(acks_late=True)
    def charge(order_id):
        with engine.begin() as conn:
            conn.execute(payments.insert().values(order_id=order_id))
            complete(conn)          # the job is gone exactly when this commits

The invariant: **the effects commit exactly when the job is settled, and never twice**,
however often the task is delivered. A delivery whose reservation lapsed and was taken by
another worker (a worker stopped past the visibility timeout, a task that outlived it)
gets :class:`~kombu_sqlqueue.exceptions.DeliveryLost` from ``complete()`` before its
caller commits, so its transaction — and with it the second copy of the effects — rolls
back. What the task does outside the database (an e-mail, an HTTP call) is still
at-least-once.

After the commit the worker's own settlement of the delivery (``acks_late``'s ack, a
failure's, a retry's) finds the job gone and changes nothing: counted, never warned of. If
the transaction rolls back, the delivery is still held and settles as it would have.

Any pool: a prefork child knows its delivery (the message's tag names the row and its
reservation token) and writes on the caller's connection; the worker process holding the
message keeps renewing the reservation until the task returns.
"""

from __future__ import annotations

from typing import Any

from .exceptions import NotCompletable
from .store.enlist import Enlistment


def _current_task() -> Any:
    try:
        from celery import current_task
    except ImportError as exc:  # pragma: no cover - Celery is a dependency of its users
        raise NotCompletable("complete() settles a Celery task's delivery; no Celery") from exc
    return current_task._get_current_object()


def complete(connection: Any = None, task: Any = None, *, using: str = "default") -> None:
    """Settle the running task's delivery as done on ``connection``, in its open
    transaction, fenced by the delivery's reservation.

    ``connection``: a SQLAlchemy ``Connection`` or ``Session``, a DB-API connection, or
    None for Django's (``using`` names the alias) — to the broker's database, inside its
    transaction. ``task``: the task (default: the one running). Raises
    :class:`~kombu_sqlqueue.exceptions.DeliveryLost` when the delivery is no longer this
    task's, :class:`~kombu_sqlqueue.exceptions.NotCompletable` when there is nothing of
    kombu-sqlqueue to settle here, and
    :class:`~kombu_sqlqueue.exceptions.WrongDatabase` for a connection to another database;
    nothing is written then, and the transaction is the caller's to roll back."""
    task = _current_task() if task is None else task
    request = getattr(task, "request", None)
    if task is None or request is None:
        raise NotCompletable("complete() runs inside a Celery task; no task is running here")
    if getattr(request, "is_eager", False):
        raise NotCompletable(
            f"task {getattr(task, 'name', '?')} runs eagerly: no broker delivered it, so "
            "there is no delivery to complete"
        )
    properties = getattr(request, "properties", None)
    tag = properties.get("delivery_tag") if isinstance(properties, dict) else None
    if not isinstance(tag, str):
        raise NotCompletable(
            f"task {getattr(task, 'name', '?')} has no delivery tag: it was not delivered "
            "by kombu-sqlqueue"
        )
    with task.app.pool.acquire(block=True) as broker:
        complete_in = getattr(broker.transport, "complete_in", None)
        if complete_in is None:
            raise NotCompletable(
                f"the task's broker is {broker.transport.driver_type}, not kombu-sqlqueue: "
                "complete() settles deliveries of a database broker"
            )
        complete_in(tag, Enlistment(connection, using))


__all__ = ["complete"]
