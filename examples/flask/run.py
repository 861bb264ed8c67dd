"""The Flask example end to end: a real Flask server, a real Celery worker, one SQLite broker.

Starts ``celery -A make_celery worker`` and ``flask --app flask_example run``, posts to the
views that start tasks, polls ``/result/<id>`` until each is ready and checks the values,
then stops both. Exits 1 if a result is wrong or missing.

    python examples/flask/run.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.chdir(HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(base: str, path: str, form: dict[str, str] | None = None) -> Any:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    with urllib.request.urlopen(base + path, data=data, timeout=10) as response:
        return json.load(response)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=HERE, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    instance = HERE / "instance"
    if "FLASK_CELERY__broker_url" not in os.environ:
        shutil.rmtree(instance, ignore_errors=True)  # a fresh queue.db and results.db
    instance.mkdir(exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start(
        [sys.executable, "-m", "celery", "-A", "make_celery", "worker", "-c", "2", "-l", "info"],
        instance / "worker.log",
    )
    server = start(
        [sys.executable, "-m", "flask", "--app", "flask_example", "run", "--port", str(port)],
        instance / "flask.log",
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the dev server takes a moment to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        expected: dict[str, object] = {}
        for i in range(10):
            expected[call(base, "/add", {"a": str(i), "b": "100"})["result_id"]] = i + 100
        expected[call(base, "/greet", {"name": "Flask"})["result_id"]] = "Hello, Flask!"
        print(f"{base}: started {len(expected)} tasks through the views")
        deadline = time.monotonic() + 60
        pending = dict(expected)
        while pending and time.monotonic() < deadline:
            for result_id, value in list(pending.items()):
                got = call(base, f"/result/{result_id}")
                if got["ready"]:
                    print(f"  /result/{result_id[:8]} -> {got}")
                    if not got["successful"] or got["value"] != value:
                        print(f"FAILED: expected {value!r}")
                        return 1
                    del pending[result_id]
            time.sleep(0.2)
        if pending:
            print(f"FAILED: no result for {sorted(pending)} within 60s")
            return 1
        print("flask example finished: every task ran and its result came back through a view.")
        return 0
    finally:
        stop(server)
        stop(worker)


if __name__ == "__main__":
    sys.exit(main())
