"""Fixtures for the PHP ``serialize()`` codec tests, which run real PHP.

``php`` (``tests/conftest.py``) is the PHP CLI: a missing ``php`` fails the tests under
``CI=true`` and skips them elsewhere. ``run_php`` runs one of the scripts in
``tests/e2e_php_codec/php/`` with JSON lines in and out (one process per call: batch).
``corpus`` is PHP's own ``serialize()`` output for every case of
``tests/e2e_php_codec/php/corpus.php``, made once per session.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from _codec_helpers import CORPUS_RANDOM_DOUBLES, CORPUS_SEED, PHP_DIR

RunPhp = Callable[[str, Iterable[Any]], list[dict[str, Any]]]


@pytest.fixture(scope="session")
def run_php(php: str) -> RunPhp:
    """Run ``php/<script>`` (next to this file) once: rows (dicts, or str lines) in, JSON rows
    out."""

    def run(script: str, rows: Iterable[Any], *args: str) -> list[dict[str, Any]]:
        lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
        proc = subprocess.run(
            [php, "-d", "memory_limit=512M", str(PHP_DIR / script), *args],
            input="".join(line + "\n" for line in lines).encode(),
            capture_output=True,
            timeout=60,
        )
        stderr = proc.stderr.decode(errors="replace")
        assert proc.returncode == 0 and not stderr.strip(), (
            f"php {script} failed (rc={proc.returncode}):\n{stderr[-4000:]}"
        )
        return [json.loads(line) for line in proc.stdout.decode().splitlines() if line]

    return run


@pytest.fixture(scope="session")
def corpus(run_php: RunPhp) -> dict[str, bytes]:
    """PHP's own serialize() bytes, by case name."""
    rows = run_php("corpus.php", [], str(CORPUS_RANDOM_DOUBLES), str(CORPUS_SEED))
    cases = {row["name"]: base64.b64decode(row["b64"]) for row in rows}
    assert len(cases) == len(rows) > CORPUS_RANDOM_DOUBLES + 100
    return cases
