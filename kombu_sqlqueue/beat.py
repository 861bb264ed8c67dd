"""``celery beat`` with its schedule in the broker's database, run on every host:
``celery -A app beat -S kombu_sqlqueue.beat:DatabaseScheduler`` (or ``beat_scheduler``).

Each beat writes its app's ``beat_schedule`` to ``askr_beat_entries`` at start, reads every
entry from there, and sends a due tick only when the database says the tick is its own: a
compare-and-set of the entry's last run, in the transaction that also writes the task's
message (``kombu_sqlqueue.enlist``). However many beats run, each tick is sent once; kill -9
any of them, the one sending included, and its open transaction is rolled back — the tick is
then sent by the next beat to find it due. See docs/periodic-tasks.md.

Celery's own rules hold: an entry is due by its schedule's ``is_due(last_run_at)`` (the
last run being the database's, shared by every beat), after downtime it runs once, not a
burst, and the next run counts from when it ran.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from celery import schedules
from celery.beat import ScheduleEntry, Scheduler
from kombu.utils import json as kombu_json

from .exceptions import ConfigurationError
from .store.database import Database
from .store.enlist import enlist
from .store.schedules import LATE_SECONDS, EntryRow, ScheduleTable
from .store.store import JobStore

logger = logging.getLogger(__name__)

#: Seconds between two reads of the schedule's definitions (a CLI change is picked up then).
RELOAD_SECONDS = 5.0
#: A last run this far in the future (seconds, by the database's clock) means the clock
#: stepped back since it was written.
STEPPED_BACK_SECONDS = 1.0
#: Seconds before a send that failed (the database away) is tried again.
RETRY_SECONDS = 5.0
#: The beat's own loop bound when the app sets none (django-celery-beat's too).
DEFAULT_MAX_INTERVAL = 5.0

_CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")


class InvalidSchedule(ConfigurationError):
    """A schedule that cannot be stored or read: an invalid crontab or interval, an
    unknown kind, arguments JSON cannot hold."""


def schedule_to_json(schedule: Any, timezone: str | None = None) -> str:
    """A Celery schedule (interval, ``crontab``, ``solar``) as the table stores it; a
    crontab with the time zone its fields are in (``timezone``; else UTC), so that every
    reader — beats, ``schedule list``, the exporter — finds the same slots."""
    if isinstance(schedule, (int, float, datetime.timedelta)):
        schedule = schedules.schedule(schedule)
    if isinstance(schedule, schedules.crontab):
        spec = {f: _cron_text(getattr(schedule, f"_orig_{f}")) for f in _CRON_FIELDS}
        return dumps({"crontab": spec, "tz": timezone or "UTC"})
    if isinstance(schedule, schedules.solar):
        return dumps({"solar": {"event": schedule.event, "lat": schedule.lat, "lon": schedule.lon}})
    if type(schedule) is schedules.schedule:
        seconds = schedule.run_every.total_seconds()
        return dumps({"every": seconds, "relative": bool(schedule.relative)})
    raise InvalidSchedule(f"a schedule of kind {type(schedule).__name__} cannot be stored")


def stored_schedule(schedule: Any, timezone: str | None = None) -> str:
    """``schedule`` as stored, checked to read back as itself (else a beat would skip it)."""
    text = schedule_to_json(schedule, timezone)
    if isinstance(schedule, (int, float, datetime.timedelta)):
        schedule = schedules.schedule(schedule)
    again = schedule_from_json(text)
    if again != schedule or getattr(again, "relative", False) != getattr(
        schedule, "relative", False
    ):
        raise InvalidSchedule(f"{schedule!r} does not read back as itself from {text}")
    return text


def _cron_text(value: Any) -> str:
    if isinstance(value, (str, int)):
        return str(value)
    return ",".join(str(v) for v in sorted(value))  # a set, list, range … of values


def schedule_from_json(text: str, app: Any = None, nowfun: Any = None) -> Any:
    """The Celery schedule ``text`` stores (:class:`InvalidSchedule` when it holds none),
    telling the time by ``nowfun`` when given (else the app's clock)."""
    try:
        spec = loads(text)
        if not isinstance(spec, dict):
            raise TypeError("not an object")
        if "every" in spec:
            seconds = float(spec["every"])
            if not 0.001 <= seconds < 10**9:  # (a shorter one is 0 to Celery: no pause)
                raise ValueError(f"an interval of {seconds!r} seconds (0.001 s to 31 years)")
            return schedules.schedule(
                datetime.timedelta(seconds=seconds),
                relative=bool(spec.get("relative")),
                nowfun=nowfun,
                app=app,
            )
        if "crontab" in spec:
            fields = spec["crontab"]
            return schedules.crontab(
                **{f: str(fields.get(f, "*")) for f in _CRON_FIELDS},
                nowfun=nowfun,
                app=_in_zone(str(spec.get("tz") or "UTC")),
            )
        if "solar" in spec:
            s = spec["solar"]
            return schedules.solar(
                str(s["event"]), float(s["lat"]), float(s["lon"]), nowfun=nowfun, app=app
            )
    except InvalidSchedule:
        raise
    except Exception as exc:  # crontab raises ValueError, TypeError and ParseException
        raise InvalidSchedule(f"not a schedule: {text[:200]!r} ({exc})") from exc
    raise InvalidSchedule(f"not a schedule: {text[:200]!r} (no every, crontab or solar)")


def dumps(value: Any) -> str:
    """JSON as Kombu writes it (datetimes, UUIDs and decimals too)."""
    return str(kombu_json.dumps(value))  # type: ignore[no-untyped-call]


def loads(text: str) -> Any:
    return kombu_json.loads(text)  # type: ignore[no-untyped-call]


_zones: dict[str, Any] = {}


def _in_zone(timezone: str) -> Any:
    """A Celery app (not the current one) whose clock is in ``timezone``: what a crontab's
    fields are read in (Celery takes a crontab's time zone from its app)."""
    found = _zones.get(timezone)
    if found is None:
        from celery import Celery

        found = Celery(f"kombu_sqlqueue_tz_{timezone}", set_as_current=False)
        found.conf.timezone = timezone
        _ = found.timezone  # (a zone zoneinfo does not know: raised here, at read)
        _zones[timezone] = found
    return found


def _us(moment: datetime.datetime) -> int:
    return round(moment.timestamp() * 1_000_000)


def _moment(us: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(us / 1_000_000, datetime.UTC)


def until_next_run(row: EntryRow) -> float | None:
    """Seconds from now until the next run of ``row``, by its schedule and its last run
    (negative: due that long ago; a crontab that never ran: its next slot); None for an
    interval that never ran. What ``schedule list`` and the exporter show (a beat's own
    decision is Celery's ``is_due``). :class:`InvalidSchedule` when the row holds none."""
    schedule = schedule_from_json(row.schedule)
    if row.last_run_us is not None:
        last = _moment(row.last_run_us)
    elif isinstance(schedule, schedules.crontab):
        last = datetime.datetime.now(datetime.UTC)
    else:
        return None
    return float(schedule.remaining_estimate(last).total_seconds())


class DatabaseEntry(ScheduleEntry):  # type: ignore[misc]  # (Celery is untyped)
    """An entry with the last run the database holds (``seen_us``: what the next take
    compares with)."""

    def __init__(self, *args: Any, seen_us: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen_us = seen_us
        #: After a send that failed: not before this (time.monotonic()), then again.
        self.retry_at = 0.0

    def is_due(self) -> Any:
        """Celery's rule; except that an interval entry whose last run lies in the future
        (the database's clock stepped back since) is due now: waiting for the clock to
        pass it would skip every run of the step. (A crontab entry waits for its next
        slot: running at once would repeat one.)"""
        wait = self.retry_at - time.monotonic()
        if wait > 0:  # a send failed: due again shortly, not at the next period
            return schedules.schedstate(False, wait)
        schedule = self.schedule
        if type(schedule) is schedules.schedule and self.last_run_at is not None:
            ahead = (self.last_run_at - schedule.now()).total_seconds()
            if ahead > STEPPED_BACK_SECONDS:
                return schedules.schedstate(True, schedule.seconds)
        return super().is_due()

    def _next_instance(self, last_run_at: Any = None, only_update_last_run_at: bool = False) -> Any:
        return self  # the database advances it (DatabaseScheduler.reserve)

    __next__ = next = _next_instance


class DatabaseScheduler(Scheduler):  # type: ignore[misc]
    """A Celery beat scheduler whose entries and their last runs live in the broker's
    database; run it on as many hosts as you like."""

    Entry = DatabaseEntry

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("schedule_filename", None)  # Celery's shelve file: not ours
        self._table: ScheduleTable | None = None
        self._database: Database | None = None
        self._loaded_at = 0.0
        self._definitions: dict[str, tuple[str, ...]] = {}
        self._unreadable: set[str] = set()
        self._unreachable = False
        self.whoami = f"{socket.gethostname()}:{os.getpid()}"
        #: Ticks this beat sent (each taken by its compare-and-set).
        self.sent_ticks = 0
        #: The database's clock less this host's (microseconds), read with the entries:
        #: every beat's "now" is the database's, so hosts whose clocks differ, or a clock
        #: stepped by NTP, agree on when an entry is due.
        self.clock_offset_us = 0
        super().__init__(app, *args, **kwargs)
        if not (kwargs.get("max_interval") or app.conf.beat_max_loop_interval):
            self.max_interval = DEFAULT_MAX_INTERVAL

    def now(self) -> datetime.datetime:
        """The database's time (this host's clock corrected by the last offset read), in
        the app's time zone (a ``relative`` interval's boundaries are the app's)."""
        return (
            datetime.datetime.now(datetime.UTC)
            + datetime.timedelta(microseconds=self.clock_offset_us)
        ).astimezone(self.app.timezone)

    # -- the table -----------------------------------------------------------------------

    def _open(self) -> ScheduleTable:
        if self._table is None:
            url = str(self.app.conf.broker_url or "")
            if not url.startswith("sqlqueue+"):
                raise ConfigurationError(
                    f"DatabaseScheduler keeps the schedule in the broker's database: "
                    f"broker_url must be a sqlqueue+ URL, got {url.split('://')[0]!r}"
                )
            self._database = Database(url.removeprefix("sqlqueue+"))
            # Every table (the queue's, which an enlisted publish cannot create inside its
            # transaction, and the schedule's), as a worker makes them.
            JobStore(self._database).create_schema()
            queries = self._database.engine.queries
            self._table = ScheduleTable(
                self._database.db, queries.insert_or_nothing, queries.clock_us
            )
        return self._table

    def setup_schedule(self) -> None:
        table = self._open()
        configured: dict[str, Any] = {}
        self.install_default_entries(configured)
        for name, spec in self.app.conf.beat_schedule.items():
            configured[name] = spec
        rows = [self._row_of(name, spec) for name, spec in configured.items()]
        changed = table.write_definitions(rows, _us(datetime.datetime.now(datetime.UTC)))
        if changed:
            logger.info("beat: schedule entries written: %s", ", ".join(changed))
        self._load(force=True)

    def install_default_entries(self, data: Any) -> None:
        if self.app.conf.result_expires and not self.app.backend.supports_autoexpire:
            data.setdefault(
                "celery.backend_cleanup",
                {"task": "celery.backend_cleanup", "schedule": schedules.crontab("0", "4", "*")},
            )

    def _row_of(self, name: str, spec: Mapping[str, Any]) -> EntryRow:
        """An app's entry (a ``beat_schedule`` dict) as the table stores it."""
        try:
            schedule = spec["schedule"]
            if spec.get("relative") and isinstance(schedule, (int, float, datetime.timedelta)):
                schedule = schedules.schedule(schedule, relative=True)
            return EntryRow(
                name=name,
                task=str(spec["task"]),
                schedule=stored_schedule(schedule, str(self.app.timezone)),
                args=dumps(list(spec.get("args") or ())),
                kwargs=dumps(dict(spec.get("kwargs") or {})),
                options=dumps(dict(spec.get("options") or {})),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidSchedule(f"beat_schedule entry {name!r} cannot be stored: {exc}") from exc

    def _load(self, force: bool = False) -> None:
        """Read every entry (its definition and last run) when due or ``force``; an entry
        the code cannot read is left out, said once."""
        now = time.monotonic()
        if not force and now - self._loaded_at < min(RELOAD_SECONDS, self.max_interval):
            return
        self._loaded_at = now
        try:
            self.clock_offset_us = self._open().clock_offset_us()
            rows = self._open().entries()
        except Exception as exc:  # the database away: the entries as last read, said once
            if not self._unreachable:
                logger.error("beat: cannot read the schedule (the last one read stands): %s", exc)
                self._unreachable = True
            if force and not getattr(self, "data", None):
                raise
            return
        if self._unreachable:
            logger.info("beat: the schedule is readable again")
            self._unreachable = False
        fresh: dict[str, DatabaseEntry] = {}
        definitions: dict[str, tuple[str, ...]] = {}
        for row in rows:
            if not row.enabled:
                continue
            try:
                entry = self._entry_of(row)
            except Exception as exc:  # whatever a row holds: that row skipped, said once
                if row.name not in self._unreadable:
                    logger.error("beat: entry %r skipped, it cannot be read: %s", row.name, exc)
                    self._unreadable.add(row.name)
                continue
            self._unreadable.discard(row.name)
            fresh[row.name] = entry
            definitions[row.name] = row.definition
        if definitions != self._definitions or force:
            self._definitions = definitions
            self.data = fresh
            # Celery compares entries by fields that miss some changes (``relative``, 1 vs
            # 1.0 in args): the heap is built anew from these entries, whatever it thinks.
            self._heap = None
        else:  # the same definitions: keep the entries (and the heap), refresh last runs
            for name, entry in fresh.items():
                known = self.data.get(name)
                if isinstance(known, DatabaseEntry) and known.seen_us != entry.seen_us:
                    known.last_run_at, known.seen_us = entry.last_run_at, entry.seen_us
                    known.total_run_count = entry.total_run_count

    def _entry_of(self, row: EntryRow) -> DatabaseEntry:
        try:
            args, kwargs, options = loads(row.args), loads(row.kwargs), loads(row.options)
        except ValueError as exc:
            raise InvalidSchedule(f"arguments are not JSON: {exc}") from exc
        if (
            not isinstance(args, list)
            or not isinstance(kwargs, dict)
            or not isinstance(options, dict)
        ):
            raise InvalidSchedule("args must be a list, kwargs and options objects")
        schedule = schedule_from_json(row.schedule, self.app, nowfun=self.now)
        return DatabaseEntry(
            name=row.name,
            task=row.task,
            schedule=schedule,
            args=args,
            kwargs=kwargs,
            options=options,
            last_run_at=(
                None
                if row.last_run_us is None
                else _moment(row.last_run_us).astimezone(self.app.timezone)
            ),
            total_run_count=row.total_run_count,
            app=self.app,
            seen_us=row.last_run_us,
        )

    def get_schedule(self) -> dict[str, Any]:
        self._load()
        return self.data

    def set_schedule(self, schedule: dict[str, Any]) -> None:
        self.data = schedule

    schedule = property(get_schedule, set_schedule)

    # -- a tick --------------------------------------------------------------------------

    def reserve(self, entry: ScheduleEntry) -> ScheduleEntry:
        """Take the due tick of ``entry`` and send it, one transaction: sent here when the
        database says the tick is this beat's; else another beat sent it (read again)."""
        assert isinstance(entry, DatabaseEntry)
        table = self._open()
        now = self.now()
        # How long ago it was due (the schedule's estimate from the last run, negative).
        overdue = -entry.schedule.remaining_estimate(entry.last_run_at).total_seconds()
        try:
            with table.db.begin() as conn:
                taken = table.take(
                    conn,
                    entry.name,
                    entry.seen_us,
                    _us(now),
                    self.whoami,
                    late=overdue > LATE_SECONDS,
                )
                if taken:
                    with enlist(conn):
                        self.apply_async(entry, producer=self.producer, advance=False)
        except Exception as exc:  # the tick and its message rolled back together
            retry = min(RETRY_SECONDS, self.max_interval)
            logger.error("beat: %s not sent (tried again in %g s): %s", entry.name, retry, exc)
            entry.retry_at = time.monotonic() + retry
            self._heap = None  # (Celery queued it for its next period: placed anew)
            return entry
        if taken:  # committed: the tick and its message
            logger.info("Scheduler: Sent due task %s (%s)", entry.name, entry.task)
            self.sent_ticks += 1
            entry.last_run_at, entry.seen_us = now, _us(now)
            entry.total_run_count += 1
            return entry
        # Another beat ran it since this one read it (or holds it now): its last run, from
        # the database — or, the database away, at the next read of the entries.
        try:
            row = table.entry(entry.name)
        except Exception as exc:
            logger.warning("beat: %s: cannot read its last run: %s", entry.name, exc)
            return entry
        if row is not None and row.last_run_us is not None:
            entry.last_run_at, entry.seen_us = (
                _moment(row.last_run_us).astimezone(self.app.timezone),
                row.last_run_us,
            )
            entry.total_run_count = row.total_run_count
        return entry

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        pass  # sent in reserve(), in the transaction that took the tick

    def sync(self) -> None:
        pass  # every run is written when it is taken

    def close(self) -> None:
        super().close()
        if self._database is not None:
            self._database.close()

    @property
    def info(self) -> str:
        return f"    . db -> {self.app.conf.broker_url.split('@')[-1]} (askr_beat_entries)"
