"""``kombu-sqlqueue schedule list|add|pause|resume|remove`` on every engine: entries added,
paused, resumed and removed; a bad schedule, bad arguments, a taken name or an unknown entry
is exit 2 with the reason and nothing stored; ``stats`` lists the schedule."""

from __future__ import annotations

import json
import re

import pytest
from support import kombu_sqlqueue_cli

from kombu_sqlqueue.ops.schedule_cli import schedule_table
from kombu_sqlqueue.store import JobStore


@pytest.fixture(autouse=True)
def tables(db_url: str) -> None:
    """The broker's tables, as a worker or a beat leaves them."""
    store = JobStore(db_url)
    try:
        store.create_schema()
    finally:
        store.close()


def listed(url: str) -> dict[str, dict[str, object]]:
    run = kombu_sqlqueue_cli("schedule", "list", url, "--json")
    assert run.returncode == 0, run.stderr
    return {e["name"]: e for e in json.loads(run.stdout)}


def test_entries_are_added_paused_resumed_and_removed(broker_url: str) -> None:
    assert listed(broker_url) == {}
    run = kombu_sqlqueue_cli(
        "schedule", "add", broker_url, "report", "app.report",
        "--crontab", "*/15 9-17 * * mon-fri", "--queue", "reports", "--kwargs", '{"full": true}',
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "crontab */15 9-17 * * mon-fri" in run.stdout
    run = kombu_sqlqueue_cli(
        "schedule", "add", broker_url, "ping", "app.ping", "--every", "30s", "--args", "[1]"
    )
    assert run.returncode == 0, run.stderr
    found = listed(broker_url)
    assert found["report"]["schedule"] == "crontab */15 9-17 * * mon-fri"
    assert json.loads(str(found["report"]["options"])) == {"queue": "reports"}
    assert found["ping"]["schedule"] == "every 30s" and found["ping"]["args"] == "[1]"
    # Its first run is counted from when it was written (no beat has run it yet).
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", str(found["ping"]["next_run"]))
    assert found["ping"]["last_run"] == "-" and found["ping"]["runs"] == 0

    assert kombu_sqlqueue_cli("schedule", "pause", broker_url, "ping").returncode == 0
    assert listed(broker_url)["ping"]["next_run"] == "paused"
    assert kombu_sqlqueue_cli("schedule", "resume", broker_url, "ping").returncode == 0
    assert listed(broker_url)["ping"]["enabled"] is True
    assert kombu_sqlqueue_cli("schedule", "remove", broker_url, "ping").returncode == 0
    assert set(listed(broker_url)) == {"report"}

    stats = kombu_sqlqueue_cli("stats", broker_url)
    assert stats.returncode == 0 and "periodic tasks:" in stats.stdout and "report" in stats.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["bad", "t", "--crontab", "61 * * * *"],
        ["bad", "t", "--crontab", "* * 31 2 *"],
        ["bad", "t", "--crontab", "*/ * * * *"],
        ["bad", "t", "--crontab", "* * * *"],
        ["bad", "t", "--every", "soon"],
        ["bad", "t", "--every", "0"],
        ["bad", "t"],
        ["bad", "t", "--every", "5s", "--crontab", "* * * * *"],
        ["bad", "t", "--every", "5s", "--args", "{not json"],
        ["bad", "t", "--every", "5s", "--args", '{"a": 1}'],
        ["bad", "t", "--every", "5s", "--kwargs", "[1]"],
        ["bad", "t", "--crontab", "* * * * *", "--relative"],
        ["bad", "t", "--every", "0.0000004"],
        ["bad", "t", "--every", "5s", "--args", '[{"__type__": "datetime", "__value__": 5}]'],
        ["bad", "t" * 256, "--every", "5s"],
        ["bad ", "t", "--every", "5s"],
        ["bad", "t", "--every", "5s", "--queue", "no\x00queue"],
        ["bad", "t", "--crontab", "0 4 * * *", "--timezone", "Mars/Olympus"],
    ],
)
def test_a_bad_entry_is_exit_2_and_nothing_is_stored(broker_url: str, args: list[str]) -> None:
    run = kombu_sqlqueue_cli("schedule", "add", broker_url, *args)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.strip()  # the reason
    assert listed(broker_url) == {}


def test_a_taken_name_and_an_unknown_entry_are_exit_2(broker_url: str) -> None:
    assert (
        kombu_sqlqueue_cli("schedule", "add", broker_url, "a", "t", "--every", "1m").returncode == 0
    )
    again = kombu_sqlqueue_cli("schedule", "add", broker_url, "a", "t2", "--every", "5s")
    assert again.returncode == 2 and "exists" in again.stderr
    assert listed(broker_url)["a"]["task"] == "t"
    for verb in ("pause", "resume", "remove"):
        run = kombu_sqlqueue_cli("schedule", verb, broker_url, "nope")
        assert run.returncode == 2 and "no periodic task 'nope'" in run.stderr, verb
    with schedule_table(broker_url) as table:
        assert [e.name for e in table.entries()] == ["a"]
