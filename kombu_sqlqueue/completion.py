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

import logging
import threading
from typing import Any

from .envelope import QUEUE_INFO
from .exceptions import NotCompletable
from .store.enlist import Enlistment, note_completed

logger = logging.getLogger(__name__)


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
    info = properties.get("delivery_info") if isinstance(properties, dict) else None
    queue = info.get(QUEUE_INFO) if isinstance(info, dict) else None
    # Celery merges a message's headers into the request: a queue format reads its own.
    headers = dict(vars(request)) if hasattr(request, "__dict__") else {}
    with task.app.pool.acquire(block=True) as broker:
        complete_in = getattr(broker.transport, "complete_in", None)
        if complete_in is None:
            raise NotCompletable(
                f"the task's broker is {broker.transport.driver_type}, not kombu-sqlqueue: "
                "complete() settles deliveries of a database broker"
            )
        enlistment = Enlistment(connection, using)
        note_completed(enlistment)
        if complete_in(tag, enlistment, queue=queue if isinstance(queue, str) else None,
                       headers=headers):  # fmt: skip
            _tell_after_task(task, tag, str(queue), headers)


#: task id -> the completions of a format's deliveries to tell of when the task returns.
_AFTER_TASK: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
_connected = threading.Lock()


def _tell_after_task(task: Any, tag: str, queue: str, headers: dict[str, Any]) -> None:
    """Once the task returns (Celery's ``task_postrun``, in the process that ran it), its
    transaction has committed or rolled back: the transport reads which and tells the
    queue's format (``Transport.completed``)."""
    from celery.signals import task_postrun

    with _connected:
        task_postrun.connect(_after_task, weak=False, dispatch_uid="kombu_sqlqueue.complete")
    task_id = getattr(task.request, "id", None) or ""
    _AFTER_TASK.setdefault(task_id, []).append((tag, queue, headers))


def _after_task(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    pending = _AFTER_TASK.pop(task_id or "", [])
    if not pending or sender is None:
        return
    try:
        with sender.app.pool.acquire(block=True) as broker:
            for tag, queue, headers in pending:
                broker.transport.completed(tag, queue, headers)
    except Exception:  # the job is settled; what follows is bookkeeping, never the task's
        logger.exception("telling the queue format of task %s's completion failed", task_id)


__all__ = ["complete"]
