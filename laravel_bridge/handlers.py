"""Python handlers for Laravel job classes, registered by PHP class name.

.. code-block:: python

    from laravel_bridge import handles

    @handles("App\\\\Jobs\\\\ResizeImage")
    def resize(job):
        resize_image(job.properties["path"], job.properties["width"])

    @handles("App\\\\Listeners\\\\SendShipmentNotification")   # a queued listener
    def shipped(job):
        notify(job.event["order"])                      # the event, unpacked

A class is the one Laravel prints (``displayName``): the job, or the listener, mailable
or notification class Laravel wraps in ``CallQueuedListener``, ``SendQueuedMailable``
or ``SendQueuedNotifications`` (a handler registered under a wrapper's name still
gets those it has no more precise handler for).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from .exceptions import LaravelBridgeError
from .job import CLOSURE_COMMAND, Job

#: ``on_failure(properties, exception, uuid)``, like a Laravel job's ``failed()``.
FailureHook = Callable[[dict[str, Any], BaseException, str], Any]
#: ``unique_id(job)``: a ``ShouldBeUnique`` job's ``uniqueId()``, for a class that computes it
#: in a method (Python sees properties only: else the ``uniqueId`` property, else "").
UniqueId = Callable[[Job], Any]

F = TypeVar("F", bound=Callable[[Job], Any])


@dataclass(frozen=True, slots=True)
class Handler:
    """The callable that runs a job class, and its optional failure hook."""

    handle: Callable[[Job], Any]
    on_failure: FailureHook | None = None
    unique_id: UniqueId | None = None


class HandlerRegistry:
    """PHP class name → :class:`Handler`."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(
        self,
        class_name: str,
        handle: Callable[[Job], Any],
        on_failure: FailureHook | None = None,
        unique_id: UniqueId | None = None,
    ) -> None:
        """Run ``handle(job)`` for jobs of ``class_name`` (``App\\Jobs\\X``, leading ``\\``
        optional); a second registration of one class is an error. ``unique_id``: see
        :data:`UniqueId`."""
        name = normalize_class_name(class_name)
        if name == CLOSURE_COMMAND or name.startswith("Closure ("):
            raise LaravelBridgeError(
                f"{name} is a queued closure: PHP code, which Python cannot run; "
                "leave closures to a PHP worker (php artisan queue:work)"
            )
        if name in self._handlers:
            raise LaravelBridgeError(f"a handler for {name} is already registered")
        self._handlers[name] = Handler(handle, on_failure, unique_id)

    def handles(
        self,
        class_name: str,
        *,
        on_failure: FailureHook | None = None,
        unique_id: UniqueId | None = None,
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: F) -> F:
            self.register(class_name, fn, on_failure, unique_id)
            return fn

        return decorate

    def get(self, class_name: str) -> Handler | None:
        return self._handlers.get(normalize_class_name(class_name))

    def __contains__(self, class_name: object) -> bool:
        return isinstance(class_name, str) and normalize_class_name(class_name) in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)

    def clear(self) -> None:
        self._handlers.clear()


def normalize_class_name(name: str) -> str:
    """PHP class names are case-insensitive but written one way; we only drop a leading ``\\``."""
    if not isinstance(name, str) or not name.strip("\\"):
        raise LaravelBridgeError(f"{name!r} is not a PHP class name")
    return name.lstrip("\\")


#: The registry :func:`handles` writes to and the worker reads by default.
REGISTRY = HandlerRegistry()


def handles(
    class_name: str, *, on_failure: FailureHook | None = None, unique_id: UniqueId | None = None
) -> Callable[[F], F]:
    """Register the decorated function as the handler of PHP job class ``class_name``.

    The function receives a :class:`~laravel_bridge.job.Job`. ``on_failure``
    is called with ``(properties, exception, uuid)`` when the job fails for good;
    ``unique_id(job)`` gives a ``ShouldBeUnique`` job's ``uniqueId()`` when the PHP class
    computes it in a method.
    """
    return REGISTRY.handles(class_name, on_failure=on_failure, unique_id=unique_id)


def load_handlers(module: str) -> None:
    """Import ``module`` (dotted name) so its ``@handles`` registrations run."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise LaravelBridgeError(f"cannot import handlers module {module!r}: {exc}") from exc
