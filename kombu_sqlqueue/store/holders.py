"""Handing back the holds of a process that is gone, at once.

Every claim records the claiming process (``host:pid``) beside the name it signs with.
A consumer that starts under a name whose earlier process on this host no longer exists
(SIGKILL, OOM, a power cut) hands that process's holds back instead of waiting out the
visibility timeout: only holds of a process that is gone, never a live one's. Used by
the transport and by ``laravel-bridge work`` (contract v1's layout).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .contract import JobContract
from .model import HOST

logger = logging.getLogger(__name__)


def process_gone(pid: int) -> bool:
    """True when no process ``pid`` runs here (a zombie, killed and not yet reaped, is
    gone: it runs nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def recover_dead_holds(store: JobContract, name: str) -> int:
    """Hand back the live holds signed ``name`` whose process on this host is gone;
    return how many jobs came back."""
    host, here = HOST, os.getpid()
    released = 0
    for holding in store.holders():
        if holding.holder != name or holding.instance is None:
            continue
        held_host, _, pid = holding.instance.rpartition(":")
        if held_host != host or not pid.isdigit() or int(pid) == here:
            continue
        if not process_gone(int(pid)):
            continue
        count = store.release_holder(name, instance=holding.instance)
        if count:
            logger.warning(
                "handed back %d job(s) of queue %r held by %s in process %s, which is gone",
                count,
                holding.queue,
                name,
                holding.instance,
            )
        released += count
    return released
