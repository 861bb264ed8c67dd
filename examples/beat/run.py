"""Two ``celery beat`` processes and two workers on the SQLite default: every tick is sent
once and runs once.

Starts two ``celery -A tasks beat`` (``b1``, ``b2``: the app's ``DatabaseScheduler``) and two
``celery -A tasks worker`` processes (``w1``, ``w2``) on one SQLite file, lets the beats send
a tick a second for ``RUN_SECONDS`` (default 8) from the first, stops them, lets the workers
finish the queue, then compares what the beats sent with what ran: a tick a second between
them (not two), every tick ran once, none twice, none lost. Exits 1 if not.

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
SENT = re.compile(r"Sent due task tick-every-second \(tasks\.tick\)")


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
    logs = TICKS_FILE.parent
    print(f"broker: {BROKER_URL}")

    workers = [
        celery("worker", "-n", f"{name}@%h", "-c", "2", "-l", "info", log=logs / f"{name}.log")
        for name in ("w1", "w2")
    ]
    beats = [celery("beat", "-l", "info", log=logs / f"{name}.log") for name in ("b1", "b2")]
    try:
        # From the first tick on (the beats and their imports take a while to start).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            SENT.search((logs / f"{name}.log").read_text(errors="replace")) for name in ("b1", "b2")
        ):
            time.sleep(0.2)
        time.sleep(RUN_SECONDS)
        for beat in beats:
            stop(beat)
        by_beat = {
            name: len(SENT.findall((logs / f"{name}.log").read_text(errors="replace")))
            for name in ("b1", "b2")
        }
        sent = sum(by_beat.values())
        store = open_store(BROKER_URL.removeprefix("sqlqueue+"))
        deadline = time.monotonic() + 60
        while store.backlog("celery").total and time.monotonic() < deadline:
            time.sleep(0.2)
        store.close()
    finally:
        for beat in beats:
            stop(beat)
        for worker in workers:
            stop(worker)

    runs = [json.loads(line) for line in TICKS_FILE.read_text().splitlines()]
    per_id = collections.Counter(run["id"] for run in runs)
    per_worker = collections.Counter(run["worker"].split("@")[0] for run in runs)
    twice = [task_id for task_id, n in per_id.items() if n > 1]
    print(f"two beats sent {sent} ticks in {RUN_SECONDS:.0f}s (by beat: {by_beat}); "
          f"{len(runs)} runs, {len(per_id)} distinct; "
          f"by worker: {dict(sorted(per_worker.items()))}")  # fmt: skip
    if sent == 0 or twice or len(per_id) != sent:
        print(f"FAILED: ran twice: {twice}; sent {sent}, ran {len(per_id)}")
        return 1
    if sent > RUN_SECONDS + 2:  # a tick a second between both beats, not one each
        print(f"FAILED: {sent} ticks in {RUN_SECONDS:.0f}s: the beats sent ticks twice")
        return 1
    print("beat example finished: every tick ran exactly once.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
