"""``kombu-sqlqueue schedule list|add|pause|resume|remove URL …``: the periodic tasks
``kombu_sqlqueue.beat:DatabaseScheduler`` keeps in ``askr_beat_entries``. Running beats
pick a change up at their next read of the table (within ``beat_max_loop_interval``).

Reading a schedule needs Celery (its ``crontab``), imported when a command runs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from ..exceptions import ConfigurationError
from ..store.database import Database
from ..store.names import validate_queue_name
from ..store.schedules import EntryRow, ScheduleTable
from .connect import store_url
from .text import parse_duration
from .text import table as print_table


class UnknownEntry(ConfigurationError):
    """No periodic task of that name in the schedule."""


@contextmanager
def schedule_table(url: str, create: bool = True) -> Iterator[ScheduleTable]:
    """The schedule of the database at ``url``; its table made when absent (``create``).
    A database error is a ``StoreError`` (the CLI's exit 2 with the reason)."""
    database = Database(store_url(url))
    try:
        queries = database.engine.queries
        table = ScheduleTable(database.db, queries.insert_or_nothing, queries.clock_us)
        if create:
            table.create()  # (idempotent: the schedule's table alone, as a beat makes it)
        yield table
    finally:
        database.close()


def print_schedule_of(url: str) -> None:
    """``stats``'s section: the periodic tasks, when the database has any."""
    with schedule_table(url, create=False) as table:
        rows = table.entries() if table.present() else []
    if rows:
        click.echo("\nperiodic tasks:")
        print_entries(rows, as_json=False)


def _now_us() -> int:
    return round(time.time() * 1_000_000)


def _when(us: int | None) -> str:
    if us is None:
        return "-"
    return datetime.fromtimestamp(us / 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def describe(row: EntryRow) -> dict[str, Any]:
    """An entry as ``list`` and ``stats`` show it: its schedule in words and its next run
    (unreadable: said, not raised — a beat skips such a row too)."""
    from ..beat import InvalidSchedule, schedule_from_json, until_next_run  # (Celery)

    found: dict[str, Any] = {
        "name": row.name,
        "task": row.task,
        "enabled": row.enabled,
        "last_run": _when(row.last_run_us) if row.total_run_count else "-",
        "runs": row.total_run_count,
        "sent_by": row.last_sent_by or "-",
        "args": row.args,
        "kwargs": row.kwargs,
        "options": row.options,
    }
    try:
        schedule = schedule_from_json(row.schedule)
    except InvalidSchedule as exc:
        return {**found, "schedule": f"unreadable: {exc}", "next_run": "-"}
    found["schedule"] = _schedule_words(schedule)
    remaining = until_next_run(row)
    if not row.enabled:
        found["next_run"] = "paused"
    elif remaining is None:
        found["next_run"] = "an interval after a beat starts"  # (rows of an earlier version)
    else:
        at = round(time.time() + remaining) * 1_000_000  # (the slot, to the second)
        found["next_run"] = "due now" if remaining <= 0 else _when(at)
    return found


def _schedule_words(schedule: Any) -> str:
    from celery import schedules

    if isinstance(schedule, schedules.crontab):
        fields = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        return "crontab " + " ".join(str(getattr(schedule, f"_orig_{f}")) for f in fields)
    if isinstance(schedule, schedules.solar):
        return f"solar {schedule.event} {schedule.lat} {schedule.lon}"
    relative = " (relative)" if getattr(schedule, "relative", False) else ""
    return f"every {schedule.run_every.total_seconds():g}s{relative}"


def print_entries(rows: list[EntryRow], as_json: bool) -> None:
    shown = [describe(row) for row in rows]
    if as_json:
        click.echo(json.dumps(shown))
        return
    print_table(
        ("entry", "task", "schedule", "next run (UTC)", "last run (UTC)", "runs", "sent by"),
        (
            (
                e["name"],
                e["task"],
                e["schedule"],
                e["next_run"],
                e["last_run"],
                e["runs"],
                e["sent_by"],
            )
            for e in shown
        ),
    )


@click.group()
def schedule() -> None:
    """Periodic tasks in the database (celery beat -S kombu_sqlqueue.beat:DatabaseScheduler)."""


@schedule.command("list")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def schedule_list(url: str, as_json: bool) -> None:
    """Every entry: its schedule, next and last run, how many runs, which beat sent the last."""
    with schedule_table(url, create=False) as table:
        rows = table.entries() if table.present() else []
    if not rows and not as_json:
        click.echo("no periodic tasks (a beat with DatabaseScheduler writes its app's)")
        return
    print_entries(rows, as_json)


def _json_option(text: str, kind: type, what: str) -> str:
    """``text`` as stored, read as a beat reads it (Kombu's JSON: its ``__type__`` objects
    too, which must then be what they say)."""
    from ..beat import loads

    try:
        value = loads(text)
    except Exception as exc:  # Kombu's decoder raises more than ValueError
        raise click.BadParameter(f"{what} is not JSON a beat can read: {exc}") from exc
    if not isinstance(value, kind):
        raise click.BadParameter(f"{what} must be a JSON {kind.__name__}, got {text!r}")
    return text


@schedule.command("add")
@click.argument("url")
@click.argument("name")
@click.argument("task")
@click.option("--every", help="An interval: 30, 45s, 5m, 1h, 1d.")
@click.option("--relative", is_flag=True, help="With --every: on the interval's boundaries.")
@click.option(
    "--crontab", "cron", help='Five fields: "minute hour day-of-month month day-of-week".'
)
@click.option(
    "--timezone",
    default="UTC",
    show_default=True,
    help="With --crontab: the zone its fields are in.",
)
@click.option(
    "--args", "args", default="[]", show_default=True, help="Positional arguments (JSON)."
)
@click.option(
    "--kwargs", "kwargs", default="{}", show_default=True, help="Keyword arguments (JSON)."
)
@click.option("--queue", default=None, help="The queue to send it to.")
@click.option("--priority", type=int, default=None, help="The message's priority.")
@click.option("--expires", type=float, default=None, help="Seconds after which it is not run.")
def schedule_add(
    url: str,
    name: str,
    task: str,
    every: str | None,
    relative: bool,
    cron: str | None,
    timezone: str,
    args: str,
    kwargs: str,
    queue: str | None,
    priority: int | None,
    expires: float | None,
) -> None:
    """Add entry NAME sending TASK --every INTERVAL or on a --crontab (a bad one: exit 2,
    nothing stored). Running beats send it from their next read of the table."""
    from ..beat import schedule_from_json  # Celery checks the schedule

    if (every is None) == (cron is None):
        raise click.UsageError("give --every INTERVAL or --crontab FIELDS (one of them)")
    if relative and every is None:
        raise click.UsageError("--relative goes with --every")
    if every is not None:
        seconds = parse_duration(None, None, every)
        spec = json.dumps({"every": seconds, "relative": relative})
    else:
        fields = (cron or "").split()
        if len(fields) != 5:
            raise click.BadParameter(
                "a crontab is five fields (minute hour day-of-month month day-of-week), "
                f"got {cron!r}"
            )
        minute, hour, day_of_month, month_of_year, day_of_week = fields
        spec = json.dumps(
            {
                "crontab": {
                    "minute": minute,
                    "hour": hour,
                    "day_of_month": day_of_month,
                    "month_of_year": month_of_year,
                    "day_of_week": day_of_week,
                },
                "tz": timezone,
            }
        )
    schedule_from_json(spec)  # InvalidSchedule (exit 2) before anything is stored
    options = {
        key: value
        for key, value in (("queue", queue), ("priority", priority), ("expires", expires))
        if value is not None
    }
    row = EntryRow(
        name=name,
        task=task,
        schedule=spec,
        args=_json_option(args, list, "--args"),
        kwargs=_json_option(kwargs, dict, "--kwargs"),
        options=json.dumps(options),
        source="cli",
    )
    for what, value in (("an entry's name", name), ("a task's name", task)):
        if not value or value != value.strip() or len(value) > 255:
            raise click.BadParameter(
                f"{what} is 1 to 255 characters, no space around them, got {value!r}"
            )
    if queue is not None:
        validate_queue_name(queue)
    with schedule_table(url) as table:
        if not table.add(row, _now_us()):
            raise ConfigurationError(f"periodic task {name!r} exists: remove it first")
    click.echo(f"added {name!r}: {task} {describe(row)['schedule']}")


def _switch(url: str, name: str, enabled: bool) -> None:
    with schedule_table(url) as table:
        if not table.set_enabled(name, enabled, _now_us()):
            raise UnknownEntry(f"no periodic task {name!r} (kombu-sqlqueue schedule list URL)")
    click.echo(f"{'resumed' if enabled else 'paused'} {name!r}")


@schedule.command("pause")
@click.argument("url")
@click.argument("name")
def schedule_pause(url: str, name: str) -> None:
    """Stop sending NAME (kept, with its last run) until resumed."""
    _switch(url, name, False)


@schedule.command("resume")
@click.argument("url")
@click.argument("name")
def schedule_resume(url: str, name: str) -> None:
    """Send NAME again (a run missed while paused: once, as after downtime)."""
    _switch(url, name, True)


@schedule.command("remove")
@click.argument("url")
@click.argument("name")
def schedule_remove(url: str, name: str) -> None:
    """Delete NAME (an app's beat_schedule entry comes back when a beat of it starts)."""
    with schedule_table(url) as table:
        if not table.remove(name):
            raise UnknownEntry(f"no periodic task {name!r} (kombu-sqlqueue schedule list URL)")
    click.echo(f"removed {name!r}")
