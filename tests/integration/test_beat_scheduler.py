"""``kombu_sqlqueue.beat.DatabaseScheduler`` in the test process, on every engine: a tick
and its message commit together or not at all, a row the code cannot read is skipped while
the others tick, Celery's catch-up rule after downtime, and schedules stored and read back
(the real ``celery beat`` processes: tests/e2e/test_beat.py)."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator

import pytest
from celery import Celery, schedules
from sqlalchemy.exc import OperationalError

from kombu_sqlqueue.beat import (
    DatabaseScheduler,
    InvalidSchedule,
    schedule_from_json,
    stored_schedule,
)
from kombu_sqlqueue.store import JobStore
from kombu_sqlqueue.store.schedules import ScheduleTable

#: The apps a test made, closed at its end (their broker connections' pools).
_apps: list[Celery] = []


def make_app(broker_url: str, **entries: dict[str, object]) -> Celery:
    app = Celery("beat_test", broker=broker_url, set_as_current=False)
    app.conf.update(beat_schedule=entries, result_expires=None)
    _apps.append(app)
    return app


@pytest.fixture(autouse=True)
def _close_apps() -> Iterator[None]:
    yield
    while _apps:
        _apps.pop().close()


@pytest.fixture
def store(db_url: str) -> Iterator[JobStore]:
    s = JobStore(db_url)
    yield s
    s.close()


def tick_until(scheduler: DatabaseScheduler, done: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        scheduler.tick()
        time.sleep(0.02)


def test_a_tick_and_its_message_commit_together_or_not_at_all(
    broker_url: str, store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(broker_url, often={"task": "t.often", "schedule": 0.05})
    scheduler = DatabaseScheduler(app)
    try:
        tick_until(scheduler, lambda: store.size("celery") >= 2)
        sent = store.size("celery")
        (row,) = [r for r in scheduler._table.entries() if r.name == "often"]  # type: ignore[union-attr]
        assert row.total_run_count == sent  # one message per tick taken

        # The send fails after its message was written: both roll back, the tick is not
        # spent (it is tried again when next due), nothing is left in the queue.
        original = DatabaseScheduler.apply_async

        def fails_after(self: DatabaseScheduler, *args: object, **kwargs: object) -> None:
            original(self, *args, **kwargs)
            raise RuntimeError("the process died here")

        monkeypatch.setattr(DatabaseScheduler, "apply_async", fails_after)
        for _ in range(5):
            scheduler.tick()
            time.sleep(0.06)
        assert store.size("celery") == sent
        (again,) = [r for r in scheduler._table.entries() if r.name == "often"]  # type: ignore[union-attr]
        assert (again.total_run_count, again.last_run_us) == (row.total_run_count, row.last_run_us)
        monkeypatch.undo()
        tick_until(scheduler, lambda: store.size("celery") > sent)
    finally:
        scheduler.close()


def test_a_row_the_code_cannot_read_is_skipped_and_the_others_tick(
    broker_url: str, store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(broker_url, good={"task": "t.good", "schedule": 0.05})
    first = DatabaseScheduler(app)
    table = first._table
    assert table is not None
    with table.db.begin() as conn:  # what another version or a hand edit may leave
        for name, schedule, args in (
            ("bad-cron", '{"crontab": {"minute": "61"}}', "[]"),
            ("bad-kind", '{"every": -1}', "[]"),
            ("bad-json", "not json", "[]"),
            ("bad-args", '{"every": 1}', "{not json"),
        ):
            conn.execute(
                table.table.insert().values(
                    name=name, task="t.x", schedule=schedule, args=args, kwargs="{}",
                    options="{}", updated_us=1,
                )
            )  # fmt: skip
    first.close()
    with caplog.at_level(logging.ERROR, logger="kombu_sqlqueue.beat"):
        scheduler = DatabaseScheduler(app)
        try:
            tick_until(scheduler, lambda: store.size("celery") >= 2)
            for _ in range(3):
                scheduler._load(force=True)
        finally:
            scheduler.close()
    assert store.size("celery") >= 2
    said = [r.getMessage() for r in caplog.records]
    for name in ("bad-cron", "bad-kind", "bad-json", "bad-args"):
        assert sum(f"entry {name!r} skipped" in line for line in said) == 1, said


def test_after_downtime_an_entry_runs_once_not_a_burst(broker_url: str, store: JobStore) -> None:
    app = make_app(broker_url, minutely={"task": "t.m", "schedule": 60.0})
    scheduler = DatabaseScheduler(app)
    table = scheduler._table
    assert table is not None
    hour_ago = int((time.time() - 3600) * 1_000_000)
    with table.db.begin() as conn:
        conn.execute(table.table.update().values(last_run_us=hour_ago))
    scheduler._load(force=True)
    try:
        for _ in range(20):
            scheduler.tick()
            time.sleep(0.01)
        assert store.size("celery") == 1  # 60 runs missed: one run, as Celery does
        exported(table, hour_ago)
    finally:
        scheduler.close()


def exported(table: ScheduleTable, hour_ago: int) -> None:
    """The exporter's figures of the entry that ran once, late, after downtime."""

    # One run, sent late; then due again an hour ago, unsent.
    from kombu_sqlqueue.ops.metrics import ScheduleCollector

    def figures() -> dict[str, float]:
        return {
            sample.name: sample.value
            for family in ScheduleCollector(table).collect()
            for sample in family.samples
            if sample.labels.get("entry") == "minutely"
        }

    found = figures()
    assert found["askr_beat_runs_total"] == 1 and found["askr_beat_late_runs_total"] == 1
    assert found["askr_beat_overdue_seconds"] == 0
    with table.db.begin() as conn:
        conn.execute(table.table.update().values(last_run_us=hour_ago))
    assert 3600 - 60 - 5 < figures()["askr_beat_overdue_seconds"] < 3600 - 60 + 5


@pytest.mark.parametrize(
    "schedule",
    [
        schedules.schedule(datetime.timedelta(seconds=90)),
        schedules.schedule(datetime.timedelta(minutes=5), relative=True),
        schedules.crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
        schedules.crontab(minute=0, hour=[4, 16]),
        schedules.crontab(day_of_month="1", month_of_year="*/3"),
        schedules.crontab(minute=range(0, 60, 15)),
    ],
)
def test_schedules_are_stored_and_read_back(schedule: object) -> None:
    again = schedule_from_json(stored_schedule(schedule))
    assert again == schedule and type(again) is type(schedule)
    assert getattr(again, "relative", None) == getattr(schedule, "relative", None)


def test_the_database_away_stops_no_beat_and_a_failed_send_is_retried_soon(
    broker_url: str, store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu_sqlqueue.store.schedules import ScheduleTable

    app = make_app(broker_url, often={"task": "t.often", "schedule": 0.05})
    app.conf.beat_max_loop_interval = 0.2
    scheduler = DatabaseScheduler(app)
    try:
        tick_until(scheduler, lambda: store.size("celery") >= 1)

        def down(self: object, *args: object) -> object:
            raise OperationalError("SELECT", {}, Exception("server closed the connection"))

        monkeypatch.setattr(ScheduleTable, "entries", down)
        monkeypatch.setattr(ScheduleTable, "entry", down)
        monkeypatch.setattr(ScheduleTable, "take", down)
        for _ in range(10):  # reads and sends fail: the beat goes on
            scheduler._loaded_at = 0.0
            scheduler.tick()
            time.sleep(0.05)
        sent = store.size("celery")
        monkeypatch.undo()
        # Back: the failed tick is sent within the retry delay, not a period later.
        tick_until(scheduler, lambda: store.size("celery") > sent, timeout=3)
        assert store.size("celery") > sent
    finally:
        scheduler.close()


def test_a_never_run_entry_is_not_pushed_back_by_each_beat_start(
    broker_url: str, store: JobStore
) -> None:
    app = make_app(broker_url, slow={"task": "t.slow", "schedule": 3.0})
    DatabaseScheduler(app).close()  # written now: its first run is 3 s from now
    time.sleep(2.2)
    scheduler = DatabaseScheduler(app)  # a beat started (or restarted) later
    try:
        tick_until(scheduler, lambda: store.size("celery") >= 1, timeout=2)
        assert store.size("celery") == 1  # ~0.8 s after this start, not 3 s after it
    finally:
        scheduler.close()


@pytest.mark.parametrize(
    "text",
    ['{"crontab": {"minute": "61"}}', '{"crontab": {"hour": "*/"}}',
     '{"crontab": {"minute": "-1"}}', '{"every": 0}', '{"every": "x"}', '{"nothing": 1}', "[]",
     "{", '{"solar": {"event": "x"}}'],
)  # fmt: skip
def test_a_schedule_that_is_none_is_a_named_error(text: str) -> None:
    with pytest.raises(InvalidSchedule):
        schedule_from_json(text)


def test_a_clock_stepped_back_neither_repeats_nor_skips(broker_url: str, store: JobStore) -> None:
    """The last runs were written before the clock stepped back 30 s: an interval entry
    goes on at once (waiting for the clock to pass its last run would skip 30 runs), a
    crontab entry waits for its next slot (running now would repeat the one it ran)."""
    app = make_app(
        broker_url,
        often={"task": "t.often", "schedule": 1.0, "options": {"queue": "often"}},
        cron={"task": "t.cron", "schedule": schedules.crontab(), "options": {"queue": "cron"}},
    )
    scheduler = DatabaseScheduler(app)
    table = scheduler._table
    assert table is not None
    try:
        assert abs(scheduler.clock_offset_us) < 1_000_000  # the database's clock, read
        ahead = int((time.time() + 30) * 1_000_000)
        with table.db.begin() as conn:
            conn.execute(table.table.update().values(last_run_us=ahead))
        scheduler._load(force=True)
        tick_until(scheduler, lambda: store.size("often") >= 1, timeout=5)
        assert store.size("often") == 1 and store.size("cron") == 0
        tick_until(scheduler, lambda: store.size("often") >= 2, timeout=5)  # then each second
        assert store.size("cron") == 0
    finally:
        scheduler.close()


def test_a_crontab_is_read_in_the_app_s_time_zone_by_every_reader(
    broker_url: str, store: JobStore
) -> None:
    """A crontab's fields are in the app's zone: the beat stores the zone with them, so
    ``schedule list`` and the exporter find the same slots (read as UTC, an entry on time
    was an hour overdue)."""
    from zoneinfo import ZoneInfo

    from kombu_sqlqueue.ops.metrics import ScheduleCollector
    from kombu_sqlqueue.ops.schedule_cli import describe

    app = make_app(broker_url, four={"task": "t.four", "schedule": schedules.crontab(0, 4)})
    app.conf.timezone = "Europe/Berlin"
    scheduler = DatabaseScheduler(app)
    table = scheduler._table
    assert table is not None
    try:
        berlin = ZoneInfo("Europe/Berlin")
        now = datetime.datetime.now(berlin)
        last = now.replace(hour=4, minute=0, second=0, microsecond=0)
        if last > now:
            last -= datetime.timedelta(days=1)
        with table.db.begin() as conn:  # it ran at its last slot, 04:00 in Berlin
            conn.execute(
                table.table.update().values(
                    last_run_us=round(last.timestamp() * 1e6), total_run_count=1
                )
            )
        (row,) = [r for r in table.entries() if r.name == "four"]
        assert '"tz": "Europe/Berlin"' in row.schedule
        overdue = {
            s.labels["entry"]: s.value
            for f in ScheduleCollector(table).collect()
            for s in f.samples
            if s.name == "askr_beat_overdue_seconds"
        }
        assert overdue["four"] == 0
        following = (last + datetime.timedelta(days=1)).astimezone(datetime.UTC)
        assert describe(row)["next_run"] == following.strftime("%Y-%m-%d %H:%M:%S")
    finally:
        scheduler.close()
