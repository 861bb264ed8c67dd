"""What every benchmark script prints or does the same way: the code version under test and
the SIGTERM rule. Imported by the scripts of this folder (run as ``python bench/X.py``, their
folder is on ``sys.path``)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def code_version(repo: Path = REPO) -> str:
    """The commit under test (of ``repo``: this checkout, or a work tree an A/B measures),
    ``+dirty`` when the packages have uncommitted edits."""
    git = ["git", "-C", str(repo)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "kombu_sqlqueue", "laravel_bridge"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{'+dirty' if dirty else ''}"


def raise_on_sigterm(signum: int, _frame: Any) -> None:
    """SIGTERM ends the run through the ``finally`` clauses that stop its processes."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
    raise SystemExit(128 + signum)
