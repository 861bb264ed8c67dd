"""What the tests in a real browser (``browser/``) share beside their fixtures.

Importable by basename: ``tests/conftest.py`` puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

from typing import Any


def console_errors(browser: Any) -> list[dict[str, Any]]:
    """The console's errors since the last call (a 404 of a favicon is not one of ours)."""
    return [
        e for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]
    ]  # fmt: skip
