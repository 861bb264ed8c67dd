"""Runs the PHP harness (real Illuminate components) for the Laravel interop tests."""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).resolve().parent / "php" / "harness.php"
APP_KEY = "base64:" + base64.b64encode(bytes(range(32))).decode()


@dataclass
class Laravel:
    """Runs ``tests/laravel/php/harness.php`` with the real Illuminate components."""

    php: str
    workdir: Path

    def run(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [self.php, str(HARNESS), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"harness {args[0]} failed: {done.stderr or done.stdout}")
        return done.stdout

    def dispatch(self) -> dict[str, dict[str, Any]]:
        db = self.workdir / "laravel.db"
        db.touch()
        out = self.run("dispatch", str(db), APP_KEY)
        return {row["case"]: row for row in map(json.loads, out.splitlines())}
