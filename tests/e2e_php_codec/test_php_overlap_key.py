"""A Laravel job's ``WithoutOverlapping`` key read from its payload (``JobCommand
.overlap_key``) is the lock key real PHP's middleware builds, and a job stored in contract
v1's table with one is held under the queue's per-key limit by it."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

from conftest import RunPhp

from laravel_bridge.payload import JobCommand
from laravel_bridge.tables import AskrLayout, PushJob, overlap_key_of

CASES = [
    {"key": 42, "prefix": None, "share": False, "release": False},
    {"key": "user-42", "prefix": "p:", "share": False, "release": True},
    {"key": "ключ ✓", "prefix": "", "share": True, "release": False},
    {"key": "x" * 400, "prefix": None, "share": False, "release": False},
]


def payload_of(command: bytes) -> str:
    """A queue payload around ``command`` as Laravel 8.83's createPayloadArray writes it."""
    return json.dumps(
        {
            "uuid": str(uuid.uuid4()),
            "displayName": "App\\Jobs\\SyncAccount",
            "job": "Illuminate\\Queue\\CallQueuedHandler@call",
            "maxTries": None, "maxExceptions": None, "failOnTimeout": False,
            "backoff": None, "timeout": None, "retryUntil": None,
            "data": {"commandName": "App\\Jobs\\SyncAccount", "command": command.decode()},
        }
    )  # fmt: skip


def test_the_overlap_key_is_the_lock_key_php_builds(run_php: RunPhp) -> None:
    rows = run_php("overlap.php", CASES)
    assert len(rows) == len(CASES)
    for case, row in zip(CASES, rows, strict=True):
        command = JobCommand.loads(base64.b64decode(row["command"]))
        assert command.overlap_key == row["lock_key"], case


def test_a_job_stored_with_one_is_held_one_per_key(run_php: RunPhp, tmp_path: Path) -> None:
    rows = run_php("overlap.php", [CASES[0], CASES[0], CASES[1], CASES[3]])
    payloads = [payload_of(base64.b64decode(row["command"])) for row in rows]
    url = f"sqlite:///{tmp_path / 'q.db'}"
    layout = AskrLayout(url)
    try:
        layout.push_many([PushJob("default", p) for p in payloads])
        store = layout.store
        store.key_limit("default", 1)
        claimed = store.claim("default", 10, 60).jobs
        keys = [store.get_job(j.id)["concurrency_key"] for j in claimed]  # type: ignore[index]
        assert keys == [rows[0]["lock_key"], rows[2]["lock_key"], overlap_key_of(payloads[3])]
        long_key = keys[2]
        assert long_key is not None and len(long_key) == 255 != len(rows[3]["lock_key"])
        assert store.claim("default", 10, 60).jobs == []  # the second of key 42 waits
    finally:
        layout.close()


def test_a_payload_without_one_or_unreadable_has_no_key() -> None:
    assert overlap_key_of("not json") is None
    assert overlap_key_of(payload_of(b'O:8:"stdClass":0:{}')) is None
    middleware = "Illuminate\\Queue\\Middleware\\WithoutOverlapping"
    broken = (
        f'O:8:"stdClass":1:{{s:10:"middleware";a:1:{{i:0;O:{len(middleware)}:"{middleware}"'
        ':1:{s:3:"key";a:0:{}}}}'
    ).encode()
    assert JobCommand.loads(broken).obj.get("middleware")  # it parses: the key is an array
    assert overlap_key_of(payload_of(broken)) is None
