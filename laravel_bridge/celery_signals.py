"""The Celery side of the ``laravel`` queue format: a failed task settled by Laravel's rules.

Celery runs a task in a pool process that does not hold its message, and tells nobody but
its signal handlers what the task raised. So :class:`~laravel_bridge.messages.LaravelFormat`
connects :func:`on_task_failure` to ``task_failure`` when the transport loads it — in the
worker's main process, before the pool starts (Celery's worker opens the broker connection
in ``WorkController.setup_instance``), so every pool process has it. For a job read from a
Laravel queue it writes the outcome Laravel's worker would — a release with the job's
backoff, or ``failed_jobs`` with the exception — fenced by the delivery's reservation, and
Celery's ack or reject after it changes nothing.

A task whose message was acknowledged when it started (``acks_late=False``, Celery's
default) is no longer held when it fails: its failure is Celery's alone, and this says so
once per task. Laravel's rules need ``acks_late=True`` on the tasks of Laravel queues.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Collection
from typing import Any, Protocol

from .outcomes import storable_text

logger = logging.getLogger(__name__)

#: The message header holding Laravel's metadata of a delivered job.
HEADER = "laravel"
#: Seconds past a job's ``timeout`` (its soft time limit in Celery) its hard limit comes: a
#: task that swallows ``SoftTimeLimitExceeded`` is killed then.
HARD_LIMIT_GRACE = 10


class DeliveringFormat(Protocol):
    """A loaded format that remembers what it delivered (``LaravelFormat``)."""

    def delivery_of(self, task_id: str) -> tuple[str, str, dict[str, Any]] | None:
        """(queue, delivery tag, laravel header) of a job this process delivered."""
        ...


_lock = threading.Lock()
_connected = False
#: The formats loaded in this process (for a failure Celery reports without its request).
FORMATS: weakref.WeakSet[DeliveringFormat] = weakref.WeakSet()
_warned: set[str] = set()


def connect(fmt: DeliveringFormat | None = None) -> None:
    """Connect :func:`on_task_failure` to Celery's ``task_failure`` (once; nothing without
    Celery), and remember ``fmt``."""
    global _connected
    if fmt is not None:
        FORMATS.add(fmt)
    with _lock:
        if _connected:
            return
        try:
            from celery import signals
        except ImportError:  # a plain Kombu consumer: its failures are its own to settle
            return
        signals.task_failure.connect(on_task_failure, weak=False)
        _connected = True


def _worker_app() -> Any:
    """The Celery app of the worker this process is (or runs the pool of), else None: a
    Kombu consumer, or a process that only sends tasks, has no tasks to match jobs to."""
    if "celery" not in sys.modules:
        return None
    from celery import _state

    app = _state.default_app
    # setup_worker_optimizations makes the worker's app the default and sets this flag.
    return app if app is not None and getattr(app, "use_fast_trace_task", False) else None


def registered_tasks() -> Collection[str] | None:
    """The task names of this worker's Celery app (None outside a Celery worker)."""
    app = _worker_app()
    return None if app is None else list(app.tasks.keys())


def is_registered(name: str) -> bool | None:
    """Whether this worker's Celery app has task ``name`` (None outside a Celery worker)."""
    tasks = registered_tasks()
    return None if tasks is None else name in tasks


def failure_text(exception: BaseException | None, traceback: str | None) -> str:
    """The failed table's ``exception``: ``Type: message`` first (as PHP's ``(string)
    $exception`` starts), then the traceback Celery recorded."""
    if exception is None:
        return "the Celery task failed"
    kind = type(exception)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    try:
        message = str(exception)
    except Exception:
        message = "<the exception's message could not be read>"
    return storable_text(f"{name}: {message}" + (f"\n\n{traceback.rstrip()}" if traceback else ""))


def _delivery(sender: Any, task_id: str | None) -> tuple[str, str, dict[str, Any]] | None:
    """(queue, delivery tag, laravel header) of the failed task, from its request (the pool
    process) or from what a format in this process delivered (the main process)."""
    request = getattr(sender, "request", None)
    meta = getattr(request, HEADER, None)
    properties = getattr(request, "properties", None) or {}
    tag = properties.get("delivery_tag") if isinstance(properties, dict) else None
    if isinstance(meta, dict) and isinstance(tag, str) and getattr(request, "id", None) == task_id:
        queue = meta.get("queue")
        if isinstance(queue, str):
            return queue, tag, meta
    if task_id is None:
        return None
    for fmt in list(FORMATS):
        found = fmt.delivery_of(task_id)
        if found is not None:
            return found
    return None


def on_task_failure(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    einfo: Any = None,
    **_: Any,
) -> None:
    """``task_failure``: settle a failed Laravel job by Laravel's rules (see the module)."""
    try:
        found = _delivery(sender, task_id)
        if found is None:
            return  # not a job of a Laravel queue
        queue, tag, meta = found
        # Laravel's timeout is the task's soft time limit (raised in the task: settled here,
        # before Celery acks), its hard limit a grace period later (messages.py).
        kind = type(exception).__name__
        timed_out = kind in ("SoftTimeLimitExceeded", "TimeLimitExceeded")
        reason = failure_text(exception, getattr(einfo, "traceback", None))
        with sender.app.pool.acquire(block=True) as connection:
            fail_delivery = getattr(connection.transport, "fail_delivery", None)
            if fail_delivery is None:
                return  # another broker: not ours to settle
            written = fail_delivery(queue, tag, {HEADER: meta}, reason, timed_out=timed_out)
    except Exception:  # a signal handler must not break Celery's own failure handling
        logger.exception("could not settle the failure of task %s by Laravel's rules", task_id)
        return
    name = getattr(sender, "name", "?")
    if not written and kind == "TimeLimitExceeded" and f"hard:{name}" not in _warned:
        _warned.add(f"hard:{name}")
        logger.warning(
            "task %s passed its hard time limit (its job's timeout + %s s) and Celery "
            "acknowledged it before reporting it: its failure is Celery's alone. "
            "task_acks_on_timeout=False makes it a failed attempt by Laravel's rules instead",
            name,
            HARD_LIMIT_GRACE,
        )
    elif not written and not getattr(sender, "acks_late", False) and name not in _warned:
        _warned.add(name)
        logger.warning(
            "task %s failed after its message was acknowledged at its start (acks_late=False): "
            "Laravel's retries and failed_jobs need acks_late=True on the tasks of Laravel "
            "queues",
            name,
        )


__all__ = ["FORMATS", "HEADER", "connect", "failure_text", "is_registered", "on_task_failure"]
