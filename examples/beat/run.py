"""``celery beat`` on the SQLite default with two workers: every tick runs once.

Starts ``celery -A tasks beat`` and two ``celery -A tasks worker`` processes (``w1``, ``w2``)
on one SQLite file, lets beat send a tick a second for ``RUN_SECONDS`` (default 8), stops
beat, lets the workers finish the queue, then compares what beat sent with what ran:
every tick ran once, none twice, none lost. Exits 1 if not.

    python examples/beat/run.py
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.chdir(HERE)

from tasks import BROKER_URL, TICKS_FILE  # noqa: E402

from kombu_sqlqueue.store import open_store  # noqa: E402

RUN_SECONDS = float(os.environ.get("RUN_SECONDS", "8"))
SENT = re.compile(r"Sending due task tick-every-second \(tasks\.tick\)")


def celery(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", *args],
            cwd=HERE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)  # warm shutdown: finish what it holds, then stop
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    TICKS_FILE.unlink(missing_ok=True)
    if BROKER_URL.startswith("sqlqueue+sqlite:///"):
        for stale in Path(BROKER_URL.removeprefix("sqlqueue+sqlite:///")).parent.glob(
            "beat-example.db*"
        ):
            stale.unlink()
    TICKS_FILE.with_name("celerybeat-schedule").unlink(missing_ok=True)
    logs = TICKS_FILE.parent
    print(f"broker: {BROKER_URL}")

    workers = [
        celery("worker", "-n", f"{name}@%h", "-c", "2", "-l", "info", log=logs / f"{name}.log")
        for name in ("w1", "w2")
    ]
    beat = celery("beat", "-l", "info", log=logs / "beat.log")
    try:
        time.sleep(RUN_SECONDS)
        stop(beat)
        sent = len(SENT.findall((logs / "beat.log").read_text(errors="replace")))
        store = open_store(BROKER_URL.removeprefix("sqlqueue+"))
        deadline = time.monotonic() + 60
        while store.backlog("celery").total and time.monotonic() < deadline:
            time.sleep(0.2)
        store.close()
    finally:
        stop(beat)
        for worker in workers:
            stop(worker)

    runs = [json.loads(line) for line in TICKS_FILE.read_text().splitlines()]
    per_id = collections.Counter(run["id"] for run in runs)
    per_worker = collections.Counter(run["worker"].split("@")[0] for run in runs)
    twice = [task_id for task_id, n in per_id.items() if n > 1]
    print(f"beat sent {sent} ticks in {RUN_SECONDS:.0f}s; {len(runs)} runs, "
          f"{len(per_id)} distinct; by worker: {dict(sorted(per_worker.items()))}")  # fmt: skip
    if sent == 0 or twice or len(per_id) != sent:
        print(f"FAILED: ran twice: {twice}; sent {sent}, ran {len(per_id)}")
        return 1
    print("beat example finished: every tick ran exactly once.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
