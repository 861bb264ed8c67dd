"""Periodic tasks' schedule in the database: ``askr_beat_entries``, what every beat reads,
and the one decision a tick needs — which beat sends it — made by the database.

A tick of an entry is taken by a compare-and-set of the entry's last run: ``UPDATE … SET
last_run_us = now WHERE name = … AND last_run_us = <the last run this beat read>``. The
beat whose statement changed the row sends the task, *in the same transaction*
(``kombu_sqlqueue.enlist``): the tick and its message commit together or not at all. Any
other beat that read the same last run changes nothing and reads the entry again. No lock
with a lifetime: a beat killed mid-tick leaves an open transaction the database rolls back,
and the next beat to find the entry due sends it.

No Kombu and no Celery here: an entry is a row of text (the schedule, the arguments and the
options as JSON, written and read by ``kombu_sqlqueue/beat.py``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa

from ..exceptions import StoreError

P = ParamSpec("P")
R = TypeVar("R")


def _store_errors(verb: Callable[P, R]) -> Callable[P, R]:
    """A verb whose database errors are :class:`StoreError` (an operator's exit 2, a beat's
    logged line) with what the driver said."""

    @functools.wraps(verb)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return verb(*args, **kwargs)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"the schedule ({SCHEDULE_TABLE}) cannot be used: {exc}") from exc

    return wrapped


#: The table (ours, additive to contract v1's).
SCHEDULE_TABLE = "askr_beat_entries"
#: A run sent more than this many seconds after it was due is counted late.
LATE_SECONDS = 2.0


def schedule_table(metadata: sa.MetaData) -> sa.Table:
    """``askr_beat_entries`` on ``metadata``: one row per periodic task."""
    return sa.Table(
        SCHEDULE_TABLE,
        metadata,
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("task", sa.String(255), nullable=False),
        # JSON: {"every": seconds, "relative": bool} | {"crontab": {...}} | {"solar": {...}}
        sa.Column("schedule", sa.Text, nullable=False),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("kwargs", sa.Text, nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("enabled", sa.SmallInteger, nullable=False, server_default="1"),
        # When the entry last ran (unix microseconds, UTC), by which beat; NULL: never.
        sa.Column("last_run_us", sa.BigInteger, nullable=True),
        sa.Column("total_run_count", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_sent_by", sa.String(255), nullable=True),
        # Where the definition came from: "config" (an app's beat_schedule) or "cli".
        sa.Column("source", sa.String(16), nullable=False, server_default="config"),
        # When the definition last changed (unix microseconds): running beats reload then.
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        # Runs sent late: more than LATE_SECONDS after they were due (a beat down, all beats
        # busy, a clock stepped): what the exporter counts as late ticks.
        sa.Column("late_runs", sa.BigInteger, nullable=False, server_default="0"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One row of ``askr_beat_entries``."""

    name: str
    task: str
    schedule: str
    args: str = "[]"
    kwargs: str = "{}"
    options: str = "{}"
    enabled: bool = True
    last_run_us: int | None = None
    total_run_count: int = 0
    last_sent_by: str | None = None
    source: str = "config"
    updated_us: int = 0
    late_runs: int = 0

    @property
    def definition(self) -> tuple[str, str, str, str, str]:
        """What a beat's config writes (the run state is the database's)."""
        return (self.task, self.schedule, self.args, self.kwargs, self.options)


class ScheduleTable:
    """The schedule's rows and the compare-and-set of a tick, on a SQLAlchemy engine of the
    broker's database (``insert_or_nothing``: the engine's ``Queries`` primitive)."""

    def __init__(
        self, db: sa.Engine, insert_or_nothing: Any, clock_us: sa.TextClause | None = None
    ) -> None:
        self.db = db
        self._clock_us = clock_us
        self.table = schedule_table(sa.MetaData())
        self._insert_or_nothing = insert_or_nothing
        t = self.table.c
        self._columns = [getattr(t, name) for name in EntryRow.__dataclass_fields__]
        self._select = sa.select(*self._columns).order_by(t.name)
        # (Bind names unlike the columns': an UPDATE reserves those for its SET clause.)
        seen: Any = sa.bindparam("seen_us")
        took = {
            "last_run_us": sa.bindparam("now_us"),
            "total_run_count": t.total_run_count + 1,
            "last_sent_by": sa.bindparam("sent_by"),
            "late_runs": t.late_runs + sa.bindparam("late"),
        }
        mine = sa.and_(t.name == sa.bindparam("entry_name"), t.enabled == 1)
        self._take = sa.update(self.table).where(mine, t.last_run_us == seen).values(took)
        self._take_first = sa.update(self.table).where(mine, t.last_run_us.is_(None)).values(took)
        # The row locked first, skipping it when another beat's transaction holds it: a
        # beat stalled mid-tick (a paused VM) never makes the others wait on its lock; its
        # tick is taken when its transaction ends. (SQLite has no row locks: one writer.)
        self._lock = (
            sa.select(t.name).where(mine, t.last_run_us == seen).with_for_update(skip_locked=True)
        )
        self._lock_first = (
            sa.select(t.name).where(mine, t.last_run_us.is_(None)).with_for_update(skip_locked=True)
        )

    @_store_errors
    def create(self) -> None:
        """Create the table if absent (idempotent; ``create-tables`` makes it too)."""
        self.table.metadata.create_all(self.db, checkfirst=True)

    @_store_errors
    def entries(self) -> list[EntryRow]:
        with self.db.connect() as conn:
            return [self._row(r) for r in conn.execute(self._select)]

    @_store_errors
    def entry(self, name: str) -> EntryRow | None:
        with self.db.connect() as conn:
            found = conn.execute(self._select.where(self.table.c.name == name)).first()
        return None if found is None else self._row(found)

    @staticmethod
    def _row(found: Any) -> EntryRow:
        (
            name,
            task,
            schedule,
            args,
            kwargs,
            options,
            enabled,
            last,
            count,
            by,
            source,
            at,
            late,
        ) = found
        return EntryRow(
            str(name),
            str(task),
            str(schedule),
            str(args),
            str(kwargs),
            str(options),
            bool(enabled),
            None if last is None else int(last),
            int(count),
            by,
            str(source),
            int(at),
            int(late),
        )

    @_store_errors
    def write_definitions(self, rows: Sequence[EntryRow], now_us: int) -> list[str]:
        """Write an app's entries (``beat_schedule``): new ones inserted, changed definitions
        updated, their run state kept. Many beats may start at once: an entry another beat
        inserted first is updated like any other. The names whose row changed."""
        t = self.table.c
        changed: list[str] = []
        with self.db.begin() as conn:
            present = {
                r.name: r
                for r in (self._row(f) for f in conn.execute(self._select))
                if r.name in {row.name for row in rows}
            }
            for row in rows:
                values = {
                    "task": row.task,
                    "schedule": row.schedule,
                    "args": row.args,
                    "kwargs": row.kwargs,
                    "options": row.options,
                    "updated_us": now_us,
                }
                known = present.get(row.name)
                if known is None:
                    # (Another beat starting now may insert it first: then it is updated
                    # below to this app's definition, the same row either way.)
                    # A new entry's first run is counted from when it was written (not
                    # from each beat's start: a weekly entry would never run under daily
                    # deploys); total_run_count says it has not run.
                    conn.execute(
                        self._insert_or_nothing(self.table).values(
                            name=row.name,
                            source=row.source,
                            enabled=1,
                            last_run_us=now_us,
                            **values,
                        )
                    )
                elif known.definition == row.definition:
                    continue
                conn.execute(sa.update(self.table).where(t.name == row.name).values(values))
                changed.append(row.name)
        return changed

    @_store_errors
    def clock_offset_us(self) -> int:
        """How far the database's clock is ahead of this host's (microseconds; negative:
        behind), read at the middle of the round trip. 0 without the engine's clock."""
        if self._clock_us is None:
            return 0
        with self.db.connect() as conn:
            before = time.time()
            database_us = int(conn.execute(self._clock_us).scalar_one())
            after = time.time()
        return database_us - round((before + after) / 2 * 1_000_000)

    @_store_errors
    def present(self) -> bool:
        """Whether the table is in this database (a beat or ``create-tables`` made it)."""
        return bool(sa.inspect(self.db).has_table(SCHEDULE_TABLE))

    @_store_errors
    def add(self, row: EntryRow, now_us: int) -> bool:
        """Insert an entry (``schedule add``); False when one of that name exists."""
        values = {
            "name": row.name,
            "task": row.task,
            "schedule": row.schedule,
            "args": row.args,
            "kwargs": row.kwargs,
            "options": row.options,
            "enabled": 1 if row.enabled else 0,
            "source": row.source,
            "updated_us": now_us,
            "last_run_us": now_us,  # its first run counted from now
        }
        t = self.table.c
        with self.db.begin() as conn:
            conn.execute(self._insert_or_nothing(self.table).values(**values))
            # Ours when the row holds what was just written (an INSERT … ON CONFLICT DO
            # NOTHING's rowcount is not reported by every driver: psycopg says -1).
            found = conn.execute(
                sa.select(t.task, t.schedule, t.source, t.updated_us).where(t.name == row.name)
            ).first()
        return found is not None and tuple(found) == (row.task, row.schedule, row.source, now_us)

    @_store_errors
    def set_enabled(self, name: str, enabled: bool, now_us: int) -> bool:
        """Pause (``enabled`` False) or resume an entry; False when there is none of that
        name. Running beats drop or take it up at their next read of the table; a beat
        still holding it cannot send it once paused (the take requires it enabled)."""
        t = self.table.c
        with self.db.begin() as conn:
            changed = conn.execute(
                sa.update(self.table)
                .where(t.name == name)
                .values(enabled=1 if enabled else 0, updated_us=now_us)
            )
            return bool(changed.rowcount == 1)

    @_store_errors
    def remove(self, name: str) -> bool:
        """Delete an entry; False when there is none of that name. (An entry of an app's
        ``beat_schedule`` is written again when a beat of that app starts.)"""
        with self.db.begin() as conn:
            gone = conn.execute(sa.delete(self.table).where(self.table.c.name == name))
            return bool(gone.rowcount == 1)

    def take(
        self,
        conn: sa.Connection,
        name: str,
        seen_us: int | None,
        now_us: int,
        by: str,
        late: bool = False,
    ) -> bool:
        """In ``conn``'s transaction: the tick after the run ``seen_us`` (None: the first) is
        this caller's, now — True — or another's — False (it ran since, or the entry was
        disabled or removed)."""
        params = {"entry_name": name, "now_us": now_us, "sent_by": by[:255], "late": int(late)}
        lock, take = (
            (self._lock_first, self._take_first) if seen_us is None else (self._lock, self._take)
        )
        if seen_us is not None:
            params["seen_us"] = seen_us
        if conn.execute(lock, params).first() is None:
            return False  # run since, disabled, removed, or another beat's just now
        return bool(conn.execute(take, params).rowcount == 1)
