"""The name a consumer's claims sign their reservations with.

Every claim signs its reservations with a name (seed 001's consumer identity) and the
process (``host:pid``). The name is the transport option ``consumer_name``, else the
Celery worker's node name (``celery@host``, or what ``-n`` gave), else
``<program>@<host>``. A consumer that starts under a name whose earlier process on this
host is gone (SIGKILL, OOM, a power cut) hands that process's holds back at once instead
of waiting out the visibility timeout — only holds of a process that no longer exists,
never a live one's (``recover_holds``; ``store/holders.py``; docs/operations.md).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path


def celery_node_name() -> str | None:
    """The node name of the Celery worker this process is (main process or pool child),
    None outside a worker. Celery keeps it where its worker set up its task tracer
    (``celery.app.trace.setup_worker_optimizations``) before any broker connection; read
    without importing Celery."""
    trace = sys.modules.get("celery.app.trace")
    localized = getattr(trace, "_localized", None)
    if isinstance(localized, list) and len(localized) == 3 and isinstance(localized[2], str):
        return localized[2]
    return None


def default_name() -> str:
    """The name a consumer signs with when the ``consumer_name`` option is not set."""
    found = celery_node_name()
    if found:
        return found
    program = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    return f"{program or 'python'}@{socket.gethostname()}"
