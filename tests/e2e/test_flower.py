"""Flower over the SQL broker: a real ``celery flower`` watching a real ``celery worker -E``.

Flower's HTTP API, queried with the standard library, lists the worker (it runs ``inspect``
through the ``celery.pidbox`` fanout bindings) and the task it completed (it captures the
``celeryev`` events). Flower listens on 127.0.0.1 only, behind basic auth. On every engine.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apps.celery_app import create_app
from e2e_harness import Proc, celery_worker_args, sql, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CREDENTIALS = "e2e:flower-secret"
#: Flower's inspect timeout: idle queues are polled about once a second on SQLite and MariaDB.
INSPECT_TIMEOUT_MS = 5000
#: Seconds within which a stopped Flower's event queue must be gone from the database.
GONE_WITHIN = 15


def ran(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["label"] for line in path.read_text().splitlines() if line.strip()]


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on ``port`` (Linux ``/proc/net``)."""
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # /proc prints the address as native-endian 32-bit words.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(family, words))
    return found


class FlowerApi:
    """GETs on a Flower instance with basic auth; JSON decoded."""

    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{port}"
        token = base64.b64encode(CREDENTIALS.encode()).decode()
        self.headers = {"Authorization": f"Basic {token}"}

    def get(self, path: str, timeout: float = 30) -> tuple[int, str]:
        request = urllib.request.Request(self.base + path, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode(errors="replace")

    def json(self, path: str, timeout: float = 30) -> Any:
        status, body = self.get(path, timeout)
        if status != 200:
            pytest.fail(f"GET {path}: HTTP {status}: {body[:2000]}\n{self.proc.output[-4000:]}")
        return json.loads(body)


def test_flower_api_lists_the_worker_and_its_completed_task(
    spawn: Callable[..., Proc], broker_url: str, db_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "tasks.jsonl"
    env = {"E2E_BROKER_URL": broker_url, "E2E_OUT": str(out)}
    worker = spawn(
        "watched",
        celery_worker_args("watched", "-E", pool="solo"),
        **env,
    )  # fmt: skip
    worker.wait_text("ready.", timeout=60)
    # --port=0: the kernel picks a free port and Flower's banner says which.
    flower = spawn(
        "flower",
        [sys.executable, "-m", "celery", "-A", "apps.celery_app", "flower",
         "--address=127.0.0.1", "--port=0", f"--basic-auth={CREDENTIALS}",
         f"--inspect-timeout={INSPECT_TIMEOUT_MS}", "--persistent=False",
         "--logging=info"],
        **env,
    )  # fmt: skip

    def banner() -> re.Match[str] | None:
        if flower.popen.poll() is not None:
            pytest.fail(f"flower exited ({flower.popen.returncode}):\n{flower.output[-4000:]}")
        return re.search(r"Visit me at http://127\.0\.0\.1:(\d+)", flower.output)

    port = int(wait_until(banner, 60, what="flower's banner").group(1))
    assert listening_addresses(port) == {"127.0.0.1"}, flower.output[-4000:]
    api = FlowerApi(flower, port)
    assert api.get("/healthcheck") == (200, "OK")
    # Without credentials the API refuses.
    request = urllib.request.Request(f"{api.base}/api/workers")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30).close()
    refused.value.close()
    assert refused.value.code == 401

    # Flower's event receiver is bound to celeryev before the task is sent: no event is lost.
    def flower_bound() -> list[tuple[Any, ...]]:
        return sql(db_url, "SELECT queue FROM askr_bindings WHERE exchange = 'celeryev'")

    bound = wait_until(flower_bound, 60, what="flower's event queue bound to celeryev")
    event_queues = {str(row[0]) for row in bound}

    app = create_app(broker_url)
    try:
        result = app.tasks["e2e.record"].delay("seen-by-flower")
        wait_until(lambda: "seen-by-flower" in ran(out), 60, what="the task to run")
    finally:
        app.close()

    # /api/workers?refresh=1 runs inspect (stats, registered, active_queues, conf) now.
    def worker_listed() -> dict[str, Any] | None:
        workers: dict[str, Any] = api.json("/api/workers?refresh=1", timeout=60)
        return next(
            (info for name, info in workers.items()
             if name.startswith("watched@") and "stats" in info and "registered" in info),
            None,
        )  # fmt: skip

    info = wait_until(worker_listed, 60, interval=0.5, what="the worker in /api/workers")
    assert "e2e.record" in info["registered"]
    assert "e2e" in [q["name"] for q in info["active_queues"]]
    assert info["stats"]["pid"] == worker.pid

    def task_listed() -> dict[str, Any] | None:
        tasks: dict[str, Any] = api.json("/api/tasks")
        task = tasks.get(result.id)
        return task if task and task.get("state") == "SUCCESS" else None

    task = wait_until(task_listed, 60, interval=0.5, what="the task as SUCCESS in /api/tasks")
    assert task["name"] == "e2e.record"
    assert task["worker"].startswith("watched@")
    assert task["args"] == "('seen-by-flower',)"
    # The worker's heartbeats reached Flower too: it is online by events, not only by inspect.
    status = wait_until(
        lambda: {k: v for k, v in api.json("/api/workers?status=1").items() if v},
        30, interval=0.5, what="the worker online in /api/workers?status=1",
    )  # fmt: skip
    assert [name.split("@")[0] for name in status] == ["watched"]

    # Flower stops: its event queue, binding and any undelivered events go with it.
    flower.send_signal(signal.SIGTERM)
    flower.wait(timeout=30)
    names = sorted(event_queues)
    marks = ", ".join("?" * len(names))

    def leftovers() -> dict[str, Any]:
        left = {
            table: sql(db_url, f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})", *names)
            for table, column in (("askr_bindings", "queue"), ("askr_queues", "name"),
                                  ("askr_jobs", "queue"))
        }  # fmt: skip
        return {table: rows[0][0] for table, rows in left.items() if rows[0][0]}

    deadline = time.monotonic() + GONE_WITHIN
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers() == {}, (
        f"{GONE_WITHIN}s after Flower exited, its event queue {names} is still in the database "
        f"(row counts): Flower exits without closing its event receiver's connection; the "
        f"transport's exit hook should have deleted its auto_delete queue"
    )
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
