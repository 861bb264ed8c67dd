"""``laravel-bridge work`` as a real process: console lines, errors, graceful SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from bridge_support import bridge_cli, handlers_module_env

from laravel_bridge import LaravelQueue

HANDLERS = textwrap.dedent(
    """
    import json, os, time
    from laravel_bridge import handles

    LOG = os.environ["BRIDGE_TEST_LOG"]

    def record(event, job):
        with open(LOG, "a") as f:
            f.write(json.dumps({"event": event, "uuid": job.uuid, "props": job.properties}) + "\\n")

    @handles("App\\\\Jobs\\\\Quick")
    def quick(job):
        record("ran", job)

    @handles("App\\\\Jobs\\\\Slow")
    def slow(job):
        record("started", job)
        time.sleep(float(job.properties["seconds"]))
        record("finished", job)
    """
)


@pytest.fixture
def handlers_env(tmp_path: Path) -> dict[str, str]:
    return handlers_module_env(
        tmp_path, "bridge_test_handlers", HANDLERS, BRIDGE_TEST_LOG=str(tmp_path / "log.jsonl")
    )


def events(env: dict[str, str]) -> list[dict[str, object]]:
    path = Path(env["BRIDGE_TEST_LOG"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("layout", ["laravel", "askr"])
def test_work_stop_when_empty_prints_queue_work_lines(
    db_url: str, layout: str, handlers_env: dict[str, str]
) -> None:
    q = LaravelQueue(db_url, layout)
    a = q.dispatch("App\\Jobs\\Quick", {"n": 1}, queue="high")
    b = q.dispatch("App\\Jobs\\Quick", {"n": 2})
    q.close()
    done = subprocess.run(
        bridge_cli(
            "work",
            "--url",
            db_url,
            "--layout",
            layout,
            "--queue",
            "high,default",
            "--handlers",
            "bridge_test_handlers",
            "--stop-when-empty",
        ),
        env=handlers_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    stamp = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]"
    assert [re.sub(stamp, "[T]", line) for line in lines] == [
        f"[T][{a.id}] Processing: App\\Jobs\\Quick",
        f"[T][{a.id}] Processed:  App\\Jobs\\Quick",
        f"[T][{b.id}] Processing: App\\Jobs\\Quick",
        f"[T][{b.id}] Processed:  App\\Jobs\\Quick",
    ]
    assert [e["props"] for e in events(handlers_env)] == [{"n": 1}, {"n": 2}]


def test_sigterm_finishes_and_settles_the_current_job_then_stops(
    db_url: str, handlers_env: dict[str, str]
) -> None:
    q = LaravelQueue(db_url, "laravel")
    slow = q.dispatch("App\\Jobs\\Slow", {"seconds": 2})
    q.dispatch("App\\Jobs\\Quick", {"n": 1})
    proc = subprocess.Popen(
        bridge_cli("work", "--url", db_url, "--handlers", "bridge_test_handlers", "--sleep", "0.1"),
        env=handlers_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not events(handlers_env) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert events(handlers_env), "the slow job never started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [e["event"] for e in events(handlers_env)] == ["started", "finished"]
    assert f"[{slow.id}] Processed:  App\\Jobs\\Slow" in out
    # Settled (deleted), and the next job was left for another worker, untouched.
    assert q.size("default") == 1
    job = q.table.pop("default", 90)
    assert job is not None and job.attempts == 1
    q.close()


def test_bad_input_gets_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        bridge_cli("work", "--url", "nosuchdb://x", "--stop-when-empty"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "error:" in done.stderr and "not supported" in done.stderr
    done = subprocess.run(
        bridge_cli("work", "--url", f"sqlite:///{tmp_path}/q.db", "--queue", "a,,b"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "empty queue name" in done.stderr
    done = subprocess.run(
        bridge_cli(
            "work",
            "--url",
            f"sqlite:///{tmp_path}/q.db",
            "--handlers",
            "no_such_module_x",
            "--stop-when-empty",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot import handlers module 'no_such_module_x'" in done.stderr
    done = subprocess.run(
        bridge_cli("work", "--url", f"sqlite:///{tmp_path}/empty.db", "--stop-when-empty"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "table jobs does not exist" in done.stderr


def test_laravel_bridge_does_not_import_kombu() -> None:
    code = "import sys, laravel_bridge, laravel_bridge.cli; print('kombu' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"
