"""Periodic tasks with ``celery beat`` on every host (issue 34): three real beat processes
on one database with ``kombu_sqlqueue.beat:DatabaseScheduler``, a tick a second, the beat
sending them killed with SIGKILL mid-run. Each tick is sent once (the database decides, in
the transaction that writes the message), none is lost, and a survivor goes on in time."""

from __future__ import annotations

import datetime
import itertools
import re
import signal
import sys
import time
from collections.abc import Callable

import pytest
from e2e_harness import Proc, sql, wait_until

from kombu_sqlqueue.store import JobStore

#: A beat's "sent" line: its time (Celery's log format, milliseconds) and entry.
SENT = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/\w+\] Scheduler: Sent due task tick "
)


def beat_args() -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "apps.beat_app", "beat", "-l", "info",
        "-S", "kombu_sqlqueue.beat:DatabaseScheduler",
    ]  # fmt: skip


def sent_times(beats: list[Proc]) -> list[float]:
    found = []
    for beat in beats:
        for stamp in SENT.findall(beat.output):
            moment = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
            found.append(moment.timestamp())
    return sorted(found)


def ticks_in_table(db_url: str) -> int:
    ((n,),) = sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = ?", "beat-ticks")
    return int(n)


@pytest.mark.timeout(120)
def test_three_beats_send_each_tick_once_and_a_killed_sender_loses_none(
    spawn: Callable[..., Proc], broker_url: str, db_url: str
) -> None:
    store = JobStore(db_url)  # the tables, for the counts below (a beat makes them too)
    try:
        store.create_schema()
    finally:
        store.close()
    beats = [spawn(f"beat{i}", beat_args(), E2E_BROKER_URL=broker_url) for i in range(3)]
    wait_until(lambda: ticks_in_table(db_url) >= 3, 60, what="the first ticks")
    started = time.monotonic()
    time.sleep(6)
    # The beat that sent the last tick: the one to kill, mid-run.
    ((by,),) = sql(db_url, "SELECT last_sent_by FROM askr_beat_entries WHERE name = ?", "tick")
    sender = next(b for b in beats if str(by).endswith(f":{b.pid}"))
    sender.kill_group(signal.SIGKILL)
    killed_at = time.time()
    time.sleep(8)
    for beat in beats:
        beat.send_signal(signal.SIGTERM)
    for beat in beats:
        beat.wait(30)
    elapsed = time.monotonic() - started

    times = sent_times(beats)
    ticks = ticks_in_table(db_url)
    ((runs,),) = sql(db_url, "SELECT total_run_count FROM askr_beat_entries WHERE name = ?", "tick")
    # Every tick taken is a message, and every message a tick taken (one transaction).
    assert int(runs) == ticks
    # As many as seconds passed (the ticks before `started` included: 3 or a few more).
    assert abs(ticks - (times[-1] - times[0]) - 1) <= 2, (ticks, times[-1] - times[0])
    assert ticks >= elapsed - 2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) > 0.5, gaps  # never the same tick twice
    assert max(gaps) <= 1 + 2, gaps  # the survivors took over within a period + 2 s
    # The killed beat had sent (the table named it); survivors sent on after it died (a
    # tick's log line follows its commit: the killed one may have lost its last line).
    after = [t for beat in beats if beat is not sender for t in sent_times([beat])]
    assert any(t > killed_at + 2 for t in after), (killed_at, after[-5:])


def queued(db_url: str, queue: str) -> int:
    ((n,),) = sql(db_url, "SELECT count(*) FROM askr_jobs WHERE queue = ?", queue)
    return int(n)


@pytest.mark.timeout(120)
def test_a_schedule_changed_from_the_cli_is_followed_by_running_beats(
    spawn: Callable[..., Proc], broker_url: str, db_url: str
) -> None:
    from support import kombu_sqlqueue_cli

    store = JobStore(db_url)
    try:
        store.create_schema()
    finally:
        store.close()
    for i in range(2):
        spawn(f"beat{i}", beat_args(), E2E_BROKER_URL=broker_url)
    wait_until(lambda: ticks_in_table(db_url) >= 1, 60, what="the beats running")

    def cli(*args: str) -> None:
        run = kombu_sqlqueue_cli("schedule", *args)
        assert run.returncode == 0, run.stderr

    def still(queue: str) -> int:
        """The count once running beats have read the change (max loop interval 1 s)."""
        time.sleep(2.5)
        settled = queued(db_url, queue)
        time.sleep(3)
        assert queued(db_url, queue) == settled, f"{queue}: still sent"
        return settled

    cli("add", broker_url, "cli-tick", "beat_app.tick", "--every", "1s", "--queue", "cli-ticks")
    wait_until(lambda: queued(db_url, "cli-ticks") >= 2, 30, what="the added entry's ticks")
    cli("pause", broker_url, "cli-tick")
    paused = still("cli-ticks")
    cli("resume", broker_url, "cli-tick")
    wait_until(lambda: queued(db_url, "cli-ticks") > paused, 30, what="ticks after resume")
    cli("remove", broker_url, "cli-tick")
    still("cli-ticks")
    assert ticks_in_table(db_url) >= 10  # the app's own entry ticked on throughout
