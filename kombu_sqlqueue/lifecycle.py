"""What this package does when its process exits or forks, in one place.

Nothing notices a process going the way a broker notices a dropped connection, so
at a normal interpreter exit this package itself:

1. writes the transient messages its writers still hold (``transient.py``) and the
   acks its batchers hold (``acks.py``), then
2. deletes the auto_delete queues of channels never closed (a monitor leaving with
   its event receiver still running in a daemon thread: Flower on SIGTERM), which a
   broker deletes when the connection drops.

In that order: a held message to an auto_delete queue written after its queue was
deleted would be an orphan row. A forked child (a web server's worker) inherits
neither duty: the parent's held messages are the parent's to write, and its queues
are the parent's to delete.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Protocol


class HoldsTransient(Protocol):
    """A writer that may hold transient messages."""

    def flush(self) -> None: ...

    def forget_after_fork(self) -> None: ...


class HoldsAutoDelete(Protocol):
    """A channel that may hold auto_delete queues."""

    def delete_auto_delete_queues(self) -> None: ...


_WRITERS: weakref.WeakSet[HoldsTransient] = weakref.WeakSet()
_AUTO_DELETE: weakref.WeakSet[HoldsAutoDelete] = weakref.WeakSet()


def track_writer(writer: HoldsTransient) -> None:
    """Flush ``writer`` at exit (until :func:`untrack_writer`)."""
    _WRITERS.add(writer)


def untrack_writer(writer: HoldsTransient) -> None:
    _WRITERS.discard(writer)


def track_auto_delete(channel: HoldsAutoDelete) -> None:
    """Delete ``channel``'s auto_delete queues at exit (until :func:`untrack_auto_delete`)."""
    _AUTO_DELETE.add(channel)


def untrack_auto_delete(channel: HoldsAutoDelete) -> None:
    _AUTO_DELETE.discard(channel)


@atexit.register
def _at_exit() -> None:
    for writer in list(_WRITERS):
        writer.flush()
    for channel in list(_AUTO_DELETE):
        channel.delete_auto_delete_queues()


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer.forget_after_fork()
    _AUTO_DELETE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
