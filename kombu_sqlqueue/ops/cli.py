"""``kombu-sqlqueue`` (or ``python -m kombu_sqlqueue``): see and steer the queues without SQL.

Every command takes the database as its first argument: a Celery ``broker_url`` pasted as
is (``sqlqueue+sqlite:///queue.db``) or a plain SQLAlchemy URL, and ``--layout`` where
it applies (``askr``, contract v1's tables, the default; or a layout an installed
package registers: ``kombu_sqlqueue.store.layouts``). Tables for people; ``--json`` for
scripts. Bad input is one line on stderr starting ``error:`` and exit status 2; nothing
is created by a command other than ``create-tables``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import click

from .._version import __version__
from ..exceptions import InvalidControl, SqlQueueError, UnknownFailedJob, UnknownQueue
from ..store import JobStore, StoreOptions
from ..store.admin import (
    FailedJob,
    QueueAdmin,
    QueueStats,
    WaitingJob,
    held_queues,
    holders_by_queue,
)
from ..store.controls import Rate, parse_rate
from ..store.database import schema_ddl
from ..store.layouts import (
    CONTRACT_LAYOUT,
    LayoutSettings,
    installed_layouts,
    loaded_layouts,
    table_layout,
)
from ..store.schema import CONTRACT_TABLES, CONTRACT_VERSION
from .connect import open_admin, store_url
from .schedule_cli import print_schedule_of, schedule, schedule_table
from .summary import summarize
from .text import parse_duration
from .text import safe as _safe
from .text import table as _table

F = TypeVar("F", bound=Callable[..., Any])

#: Failed jobs ``failed retry --all`` retries per step (ids read first — so a job that
#: fails again while it runs is not retried again by the same command —, then the rows,
#: a step at a time: a million dead letters are never in memory at once).
RETRY_STEP = 10_000


def _check_layout(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--layout``: contract v1's, or an installed one (a missing one says so, and what is
    installed, before anything is opened)."""
    if value != CONTRACT_LAYOUT:
        try:
            table_layout(value)
        except SqlQueueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _layout_help() -> str:
    shown = [f"{CONTRACT_LAYOUT}: contract v1's askr_jobs/askr_failed_jobs"]
    shown += [f"{layout.name}: {layout.description}" for layout in installed_layouts()]
    return "; ".join(shown) + "."


def _layout_options(command: F) -> F:
    """``--layout`` and the settings a layout with configurable tables reads (contract v1's
    tables have fixed names: it reads none)."""
    options = [
        click.option(
            "--layout",
            default=CONTRACT_LAYOUT,
            show_default=True,
            callback=_check_layout,
            help=_layout_help(),
        ),
        click.option(
            "--jobs-table", default=None, help="Another layout's jobs table [default: its own]."
        ),
        click.option(
            "--failed-table",
            default=None,
            help="Another layout's failed-jobs table [default: its own].",
        ),
        click.option(
            "--retry-after",
            type=float,
            default=None,
            help="Another layout's seconds after which a reservation counts as ready again "
            "(a queue connection's retry_after) [default: its own].",
        ),
        click.option(
            "--connection",
            default=None,
            help="Another layout's connection whose queues a pause is for (its queue "
            "connection's name) [default: its own].",
        ),
        click.option(
            "--cache-table",
            default=None,
            help="Another layout's table pauses are kept in (its database cache store's "
            "table) [default: its own].",
        ),
        click.option(
            "--cache-prefix",
            default=None,
            help="Another layout's start of every pause key (its cache prefix) [default: its own].",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _settings(kw: dict[str, Any]) -> LayoutSettings:
    return LayoutSettings(
        jobs_table=kw.pop("jobs_table"),
        failed_table=kw.pop("failed_table"),
        retry_after=kw.pop("retry_after"),
        connection=kw.pop("connection"),
        cache_table=kw.pop("cache_table"),
        cache_prefix=kw.pop("cache_prefix"),
    )


def _admin(kw: dict[str, Any], url: str) -> QueueAdmin:
    layout = kw.pop("layout")
    settings = _settings(kw)
    if layout == CONTRACT_LAYOUT:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("jobs_table", "failed_table", "retry_after", "connection",
                         "cache_table", "cache_prefix")
            if getattr(settings, name) is not None
        ]  # fmt: skip
        if given:
            # Contract v1's tables have fixed names and no cache: such an option is a mistake
            # (a forgotten --layout), not something to ignore.
            others = " or ".join(f"--layout {other.name}" for other in installed_layouts())
            raise click.UsageError(
                f"{', '.join(given)} set another layout's tables; contract v1's ({layout}) "
                f"have fixed names — did you mean {others or 'another --layout'}?"
            )
    return open_admin(url, layout, settings)


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _one_line(text: str | None, width: int = 60) -> str:
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def _check_queues(admin: QueueAdmin, queues: Iterable[str]) -> None:
    for queue in queues:
        if not admin.is_known(queue):
            known = ", ".join(s.queue for s in admin.stats()[:20]) or "none"
            raise UnknownQueue(
                f"queue {queue!r} holds no job and no failed job in {admin.tables[0]} / "
                f"{admin.tables[1]} (queues there: {known})"
            )


# -- the commands --------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    prog_name="kombu-sqlqueue",
    message=f"%(prog)s %(version)s (durable queue contract v{CONTRACT_VERSION})",
)
def main() -> None:
    """See and steer kombu-sqlqueue's queues (and an installed layout's tables) without SQL."""


@main.command("create-tables")
@click.argument("url")
@_layout_options
@click.option("--sql", is_flag=True, help="Print this engine's DDL instead; connect to nothing.")
def create_tables(url: str, sql: bool, **kw: Any) -> None:
    """Create the queue tables (idempotent), or print their DDL with --sql."""
    layout = kw.pop("layout")
    database = store_url(url, must_exist=False)
    other = table_layout(layout) if layout != CONTRACT_LAYOUT else None
    if sql:
        ddl = other.ddl(database, _settings(kw)) if other else schema_ddl(database)
        click.echo("\n\n".join(ddl))
        return
    if other is not None:
        click.echo(other.create_tables(database, _settings(kw)))
        return
    store = JobStore(database, StoreOptions(create_tables=True))
    try:
        store.create_schema()
    finally:
        store.close()
    click.echo(
        f"tables ready: {', '.join(spec.name for spec in CONTRACT_TABLES)} "
        f"(durable queue contract v{CONTRACT_VERSION})"
    )


def _stats_rows(admin: QueueAdmin, queues: Sequence[str]) -> list[QueueStats]:
    found = admin.stats()
    histogram = admin.attempts()
    held = holders_by_queue(admin.holders(held_queues(found)))
    by_name = {s.queue: s for s in found}
    wanted = queues or [s.queue for s in found]
    return [
        replace(
            by_name.get(name, QueueStats(name)),
            attempts=histogram.get(name, {}),
            holders=held.get(name, {}),
        )
        for name in wanted
    ]


def _controls(row: QueueStats) -> str:
    said = []
    if row.paused:
        said.append("paused " + _until(row.resume_at))
    if row.concurrency is not None:
        said.append(f"concurrency {row.concurrency}")
    if row.rate is not None:
        said.append(f"rate {row.rate}")
    if row.key_concurrency is not None:
        said.append(f"{row.key_concurrency} per key")
    limited = (row.concurrency, row.rate, row.key_concurrency)
    if row.waiting_on_limit and any(limit is not None for limit in limited):
        said.append(f"{row.waiting_on_limit} waiting on a limit")
    if row.keys_at_limit:
        said.append(f"{row.keys_at_limit} key(s) at theirs")
    return ", ".join(said) or "-"


def _print_stats(rows: list[QueueStats], tables: tuple[str, str]) -> None:
    if not rows:
        click.echo(f"no queues: {tables[0]} and {tables[1]} are empty")
        return
    _table(
        [
            "queue",
            "total",
            "ready",
            "reserved",
            "delayed",
            "oldest_s",
            "failed",
            "attempts",
            "held by",
            "controls",
        ],
        (
            [
                r.queue,
                r.total,
                r.ready,
                r.reserved,
                r.delayed,
                r.oldest_seconds,
                r.dead_letters,
                " ".join(f"{a}:{n}" for a, n in r.attempts.items()) or "-",
                " ".join(f"{h}:{n}" for h, n in r.holders.items()) or "-",
                _controls(r),
            ]
            for r in rows
        ),
        right=1,
    )


@main.command()
@click.argument("url")
@click.argument("queues", nargs=-1)
@_layout_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--watch", is_flag=True, help="Refresh in place until interrupted.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between refreshes.")
def stats(
    url: str, queues: tuple[str, ...], as_json: bool, watch: bool, interval: float, **kw: Any
) -> None:
    """Per queue: total, ready, reserved, delayed, oldest ready age, failed, attempts used.

    Every queue holding a job or a failed job, or only QUEUES."""
    admin = _admin(kw, url)
    try:
        _check_queues(admin, queues)
        while True:
            rows = _stats_rows(admin, queues)
            if watch:
                click.clear()
                click.echo(f"{_when(time.time())} UTC — every {interval:g}s, Ctrl-C to stop")
            if as_json:
                click.echo(json.dumps([_stats_json(r) for r in rows]))
            else:
                _print_stats(rows, admin.tables)
                if admin.layout == CONTRACT_LAYOUT and not queues:
                    print_schedule_of(url)
            if not watch:
                return
            sys.stdout.flush()
            time.sleep(interval)
    finally:
        admin.close()


def _stats_json(row: QueueStats) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "total": row.total,
        "ready": row.ready,
        "reserved": row.reserved,
        "delayed": row.delayed,
        "oldest_seconds": row.oldest_seconds,
        "dead_letters": row.dead_letters,
        "attempts": {str(a): n for a, n in row.attempts.items()},
        "holders": row.holders,
        "paused": row.paused,
        "resume_at": row.resume_at,
        "concurrency": row.concurrency,
        "rate": None if row.rate is None else str(row.rate),
        "key_concurrency": row.key_concurrency,
        "keys_at_limit": row.keys_at_limit,
        "waiting_on_limit": row.waiting_on_limit,
    }


@main.command()
@click.argument("url")
@click.argument("queue")
@_layout_options
@click.option("-n", "count", default=10, show_default=True, help="How many jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--held", is_flag=True, help="The held jobs instead, with who holds them.")
def peek(url: str, queue: str, count: int, as_json: bool, held: bool, **kw: Any) -> None:
    """The next jobs of QUEUE in claim order (ready ones, then delayed ones), summarized;
    with --held, the jobs workers hold, the soonest to lapse first, and their holders."""
    layout = kw["layout"]
    admin = _admin(kw, url)
    try:
        _check_queues(admin, [queue])
        jobs = admin.held(queue, count) if held else admin.peek(queue, count)
    finally:
        admin.close()
    if held:
        _print_held(queue, jobs, layout, as_json)
        return
    now = time.time()
    shown = []
    for job in jobs:
        summary = summarize(job.payload, layout)
        state = "ready" if job.available_at <= now else f"in {job.available_at - int(now)}s"
        shown.append((job, summary, state))
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "id": job.id,
                        "uuid": job.uuid,
                        "state": "ready" if state == "ready" else "delayed",
                        "available_at": job.available_at,
                        "priority": job.priority,
                        "attempts": job.attempts,
                        **summary.as_dict(),
                    }
                    for job, summary, state in shown
                ]
            )
        )
        return
    if not shown:
        click.echo(f"queue {queue!r} has no waiting jobs")
        return
    _table(
        ["id", "state", "prio", "attempts", "kind", "name", "arguments"],
        (
            [job.id, state, job.priority, job.attempts, s.kind, s.name, _one_line(s.detail, 80)]
            for job, s, state in shown
        ),
    )


def _print_held(queue: str, jobs: Sequence[WaitingJob], layout: str, as_json: bool) -> None:
    now = int(time.time())
    rows = [(job, summarize(job.payload, layout)) for job in jobs]
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "id": job.id,
                        "uuid": job.uuid,
                        "holder": job.holder,
                        "instance": job.instance,
                        "lapses_in": (job.reserved_until or now) - now,
                        "attempts": job.attempts,
                        **s.as_dict(),
                    }
                    for job, s in rows
                ]
            )
        )
        return
    if not rows:
        click.echo(f"no job of queue {queue!r} is held")
        return
    _table(
        ["id", "holder", "process", "lapses_in", "attempts", "name", "arguments"],
        (
            [
                job.id,
                job.holder or "-",
                job.instance or "-",
                f"{(job.reserved_until or now) - now}s",
                job.attempts,
                s.name,
                _one_line(s.detail, 60),
            ]
            for job, s in rows
        ),
    )


@main.group()
def failed() -> None:
    """Failed (dead-lettered) jobs: list, show, retry, forget, flush."""


def _failed_json(job: FailedJob, layout: str, full: bool = False) -> dict[str, Any]:
    summary = summarize(job.payload, layout)
    found: dict[str, Any] = {
        "id": job.id,
        "uuid": job.uuid,
        "queue": job.queue,
        "failed_at": _when(job.failed_at),
        "attempts": job.attempts,
        "connection": job.connection,
        **summary.as_dict(),
        "exception": job.exception if full else _one_line(job.exception, 200),
    }
    if full:
        payload = job.payload
        found["payload"] = (
            payload if isinstance(payload, str) else payload.decode("utf-8", "backslashreplace")
        )
    return found


@failed.command("list")
@click.argument("url")
@_layout_options
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--limit", default=50, show_default=True, help="The newest this many.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def failed_list(url: str, queue: str | None, limit: int, as_json: bool, **kw: Any) -> None:
    """The newest failed jobs (as Laravel's queue:failed lists them)."""
    layout = kw["layout"]
    admin = _admin(kw, url)
    try:
        jobs = admin.failed(queue, limit)
    finally:
        admin.close()
    if as_json:
        click.echo(json.dumps([_failed_json(j, layout) for j in jobs]))
        return
    if not jobs:
        click.echo("no failed jobs" + (f" on queue {queue!r}" if queue else ""))
        return
    _table(
        ["id", "uuid", "queue", "failed_at", "name", "exception"],
        (
            [
                j.id,
                j.uuid or "-",
                j.queue,
                _when(j.failed_at),
                summarize(j.payload, layout).name,
                _one_line(j.exception),
            ]
            for j in jobs
        ),
    )


def _resolve(admin: QueueAdmin, refs: Sequence[str]) -> list[FailedJob]:
    """The failed jobs ``refs`` name (row ids or uuids); every ref must name one."""
    found: dict[int, FailedJob] = {}
    for ref in refs:
        jobs = admin.find_failed(ref)
        if not jobs:
            raise UnknownFailedJob(f"no failed job in {admin.tables[1]} has id or uuid {ref!r}")
        found.update((j.id, j) for j in jobs)
    return list(found.values())


@failed.command("show")
@click.argument("url")
@click.argument("ref", metavar="ID")
@_layout_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def failed_show(url: str, ref: str, as_json: bool, **kw: Any) -> None:
    """One failed job, whole: ID is its row id or its uuid (a Celery task id)."""
    layout = kw["layout"]
    admin = _admin(kw, url)
    try:
        jobs = _resolve(admin, [ref])
    finally:
        admin.close()
    if as_json:
        click.echo(json.dumps([_failed_json(j, layout, full=True) for j in jobs]))
        return
    for job in jobs:
        shown = _failed_json(job, layout, full=True)
        for key in ("id", "uuid", "queue", "connection", "failed_at", "attempts", "kind", "name"):
            if shown[key] is not None:
                click.echo(_safe(f"{key + ':':12}{shown[key]}"))
        click.echo(_safe(f"{'arguments:':12}{shown['detail']}"))
        click.echo("exception:")
        click.echo(_safe((job.exception or "").rstrip()))
        click.echo("payload:")
        click.echo(_safe(shown["payload"]))


@failed.command("retry")
@click.argument("url")
@click.argument("refs", nargs=-1, metavar="[ID]...")
@_layout_options
@click.option("--all", "every", is_flag=True, help="Every failed job (of --queue).")
@click.option("--queue", default=None, help="With --all: only this queue.")
def failed_retry(
    url: str, refs: tuple[str, ...], every: bool, queue: str | None, **kw: Any
) -> None:
    """Put failed jobs back on their queues, attempts reset (Laravel's queue:retry)."""
    if bool(refs) == every:
        raise click.UsageError("give failed job IDs, or --all (not both)")
    if queue and not every:
        raise click.UsageError("--queue goes with --all")
    admin = _admin(kw, url)
    try:
        if every:
            ids = admin.failed_ids(queue)
            total = 0
            for start in range(0, len(ids), RETRY_STEP):
                total += admin.retry_failed(ids[start : start + RETRY_STEP])
                if len(ids) > RETRY_STEP:  # long work says how far it is
                    done = min(start + RETRY_STEP, len(ids))
                    click.echo(f"… {done}/{len(ids)} read, {total} retried", err=True)
            click.echo(f"retried {total} failed job(s)" + (f" of queue {queue!r}" if queue else ""))
            return
        for job in _resolve(admin, refs):
            if admin.retry_failed([job.id]):
                click.echo(
                    _safe(f"failed job {job.uuid or job.id} pushed back onto queue {job.queue!r}")
                )
    finally:
        admin.close()


@failed.command("forget")
@click.argument("url")
@click.argument("refs", nargs=-1, required=True, metavar="ID...")
@_layout_options
def failed_forget(url: str, refs: tuple[str, ...], **kw: Any) -> None:
    """Delete failed jobs (Laravel's queue:forget)."""
    admin = _admin(kw, url)
    try:
        jobs = _resolve(admin, refs)
        click.echo(f"forgot {admin.forget_failed([j.id for j in jobs])} failed job(s)")
    finally:
        admin.close()


@failed.command("flush")
@click.argument("url")
@_layout_options
@click.option(
    "--older-than",
    callback=parse_duration,
    default=None,
    help="Only those failed longer ago than this (90, 45s, 30m, 12h, 7d, 2w).",
)
@click.option("--queue", default=None, help="Only this queue.")
def failed_flush(url: str, older_than: float | None, queue: str | None, **kw: Any) -> None:
    """Delete failed jobs: all, or those older than --older-than (Laravel's queue:flush)."""
    admin = _admin(kw, url)
    try:
        click.echo(f"deleted {admin.flush_failed(older_than, queue)} failed job(s)")
    finally:
        admin.close()


@main.command()
@click.argument("url")
@click.argument("queue")
@_layout_options
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
def purge(url: str, queue: str, force: bool, **kw: Any) -> None:
    """Delete the jobs of QUEUE no worker holds (held ones finish or lapse as usual)."""
    admin = _admin(kw, url)
    try:
        _check_queues(admin, [queue])
        if not force:
            click.confirm(
                f"Delete every unreserved job of queue {queue!r}? (--force skips this)",
                abort=True,
            )
        click.echo(f"purged {admin.purge(queue)} job(s) from queue {queue!r}")
    finally:
        admin.close()


@main.command()
@click.argument("url")
@click.option("--holder", required=True, help="The name holds are signed with (celery@host).")
@click.option("--queue", default=None, help="Only this queue's holds.")
@click.option("--force", is_flag=True, help="Required: the holder may still be running them.")
def release(url: str, holder: str, queue: str | None, force: bool) -> None:
    """Hand back every job a holder holds (contract v1's tables): ready again at once,
    attempts kept, the holder's late acks ignored. For a worker that is gone for good."""
    if not force:
        raise click.UsageError(
            "release takes jobs from a holder that may still be running them: add --force"
        )
    admin = open_admin(url)
    try:
        if queue is not None:
            _check_queues(admin, [queue])
        count = admin.release_holder(holder, queue)
    finally:
        admin.close()
    where = f" of queue {queue!r}" if queue else ""
    click.echo(_safe(f"released {count} job(s){where} held by {holder}"))


def _until(resume_at: int | None) -> str:
    return "until resumed" if resume_at is None else f"until {_when(resume_at)} UTC"


@main.command()
@click.argument("url")
@click.argument("queue")
@_layout_options
@click.option(
    "--for",
    "for_seconds",
    callback=parse_duration,
    help="End the pause by itself after this long (90, 45s, 30m, 12h, 7d).",
)
def pause(url: str, queue: str, for_seconds: float | None, **kw: Any) -> None:
    """Pause QUEUE for every worker: none claims a job of it until `resume` (or --for).

    Jobs already held finish and settle; publishes are still stored. Workers stop
    claiming at their next claim. A queue no one has used yet may be paused (the pause
    waits for it). With --layout laravel it is `php artisan queue:pause` (Laravel 12.40+:
    the key queue:work reads, in the database cache store's table)."""
    admin = _admin(kw, url)
    try:
        resume_at = admin.pause(queue, for_seconds)
    finally:
        admin.close()
    click.echo(_safe(f"paused queue {queue!r} {_until(resume_at)}"))


@main.command()
@click.argument("url")
@click.argument("queue")
@_layout_options
@click.option(
    "--concurrency",
    metavar="N|off",
    default=None,
    help="At most N jobs of QUEUE held at once, across every worker ('off': none).",
)
@click.option(
    "--rate",
    metavar="N/PERIOD|off",
    default=None,
    help="At most N jobs of QUEUE handed out per period, across every worker, spaced "
    "evenly: 10/s, 100/m, 1000/h, 5/30s — Celery's rate_limit spelling ('off': none).",
)
@click.option(
    "--burst",
    type=int,
    default=1,
    show_default=True,
    help="With --rate: how many may be handed out at once after a quiet spell.",
)
@click.option(
    "--per-key",
    metavar="N|off",
    default=None,
    help="At most N jobs of one concurrency_key (a message header) of QUEUE held at once "
    "('off': none).",
)
@click.option("--clear", is_flag=True, help="Remove every limit of QUEUE.")
def limit(
    url: str, queue: str, concurrency: str | None, rate: str | None, burst: int,
    per_key: str | None, clear: bool, **kw: Any,
) -> None:  # fmt: skip
    """Limit QUEUE for every worker: at most --concurrency N of its jobs held at once,
    at most --rate N/PERIOD handed out.

    Jobs past a limit wait, not failed and not charged an attempt, and are claimed as
    held ones settle (or as the rate allows). A change takes effect at every worker's
    next claim; a limit not named is left as it is."""
    if clear == (concurrency is not None or rate is not None or per_key is not None):
        raise click.UsageError(
            "give --concurrency N, --rate N/PERIOD, --per-key N (or 'off'), or --clear"
        )
    if (rate is None or rate.strip().lower() == "off") and burst != 1:
        raise click.UsageError("--burst goes with --rate N/PERIOD")
    new_concurrency = None if clear else _limit_value(concurrency, int, "--concurrency")
    new_rate = None if clear else _limit_value(rate, lambda v: parse_rate(v, burst), "--rate")
    new_per_key = None if clear else _limit_value(per_key, int, "--per-key")
    admin = _admin(kw, url)
    try:
        setting = [
            v for v in (new_concurrency, new_rate, new_per_key) if v not in (None, _UNCHANGED)
        ]
        # A limit on a queue nothing has used is most likely a typo: say which there are.
        # (Its controls count as use; a pause may be set ahead, and code declares limits
        # with queue_options when its workers start.)
        if (
            setting
            and not admin.is_known(queue)
            and queue not in {row.queue for row in admin.stats()}
        ):
            _check_queues(admin, [queue])
        if clear or new_concurrency is not _UNCHANGED:
            admin.limit(queue, cast(int | None, new_concurrency))
        if clear or new_rate is not _UNCHANGED:
            admin.rate_limit(queue, cast(Rate | None, new_rate))
        if clear or new_per_key is not _UNCHANGED:
            admin.key_limit(queue, cast(int | None, new_per_key))
    finally:
        admin.close()
    said = []
    if isinstance(new_concurrency, int):
        said.append(f"at most {new_concurrency} job(s) held at once")
    if isinstance(new_rate, Rate):
        said.append(f"at most {new_rate} handed out")
    if isinstance(new_per_key, int):
        said.append(f"at most {new_per_key} job(s) of one concurrency key held at once")
    if new_concurrency is None:
        said.append("no concurrency limit")
    if new_rate is None:
        said.append("no rate limit")
    if new_per_key is None:
        said.append("no per-key limit")
    click.echo(_safe(f"queue {queue!r}: " + ", ".join(said)))


#: A limit the command line did not name: left as it is.
_UNCHANGED = object()


def _limit_value(value: str | None, parse: Callable[[str], Any], option: str) -> Any:
    """A limit as given: ``_UNCHANGED`` when not, None for ``off``, else parsed."""
    if value is None:
        return _UNCHANGED
    if value.strip().lower() == "off":
        return None
    try:
        return parse(value)
    except InvalidControl:
        raise  # it says what is wrong
    except ValueError as exc:
        raise InvalidControl(f"{option} takes a whole number or 'off', got {value!r}") from exc


@main.command()
@click.argument("url")
@click.argument("queue")
@_layout_options
def resume(url: str, queue: str, **kw: Any) -> None:
    """Resume QUEUE after `pause`: workers claim from it again (at once where the
    database can tell them: PostgreSQL, SQLite; within a polling interval elsewhere).
    With --layout laravel it is `php artisan queue:resume`."""
    admin = _admin(kw, url)
    try:
        resumed = admin.resume(queue)
    finally:
        admin.close()
    click.echo(_safe(f"resumed queue {queue!r}" if resumed else f"queue {queue!r} was not paused"))


@main.command()
@click.argument("url")
@click.option("--port", default=9810, show_default=True, help="Port to serve the pages on.")
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (another than loopback: give --token, or the page is read-only).",
)
@click.option(
    "--token",
    envvar="KOMBU_SQLQUEUE_DASHBOARD_TOKEN",
    default=None,
    help="What state-changing actions need (or $KOMBU_SQLQUEUE_DASHBOARD_TOKEN); without "
    "it the page is read-only.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="A Host name the pages answer besides the bind address and localhost (repeat it; "
    "a page of another site whose name resolves here — DNS rebinding — gets nothing).",
)
@_layout_options
def dashboard(
    url: str, port: int, bind: str, token: str | None, allowed_hosts: tuple[str, ...], **kw: Any
) -> None:
    """Serve the web dashboard of URL's queues — contract v1's and every installed
    layout's tables, side by side — until interrupted (pip install 'kombu-sqlqueue[dashboard]')."""
    try:
        import uvicorn

        from ..dashboard import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs its extra: pip install 'kombu-sqlqueue[dashboard]' ({exc})"
        ) from exc
    kw.pop("layout")  # every layout is shown; its table settings apply to the other layouts
    hosts = [bind, "localhost", "127.0.0.1", "::1", *allowed_hosts]
    if bind in ("0.0.0.0", "::") and not allowed_hosts:
        click.echo(
            "note: answering any Host name: give --allowed-host NAME (the names it is reached by)",
            err=True,
        )
        hosts = ["*"]
    app = create_app(url, settings=_settings(kw), token=token, allowed_hosts=hosts)
    where = f"http://{bind}:{port}/"
    click.echo(f"serving the dashboard on {where}{' (read-only: no --token)' if not token else ''}")
    # proxy_headers off: uvicorn would take X-Forwarded-For from any 127.0.0.1 client (an
    # ssh tunnel, a local user) as the client's address — the sign-in throttle's key.
    uvicorn.run(app, host=bind, port=port, log_level="warning", proxy_headers=False)


@main.command()
@click.argument("url")
@_layout_options
@click.option("--port", default=9808, show_default=True, help="Port of /metrics.")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
def metrics(url: str, port: int, addr: str, **kw: Any) -> None:
    """Serve Prometheus metrics of every queue (askr_queue_ready, …) until interrupted."""
    from .metrics import serve

    admin = _admin(kw, url)
    click.echo(f"serving metrics on http://{addr}:{port}/metrics (Ctrl-C to stop)", err=True)
    try:
        if admin.layout != CONTRACT_LAYOUT:
            serve(admin, port, addr)
            return
        with schedule_table(url, create=False) as table:  # the periodic tasks too
            serve(admin, port, addr, table)
    finally:
        admin.close()


# -- kept from before `stats` and `failed` --------------------------------------------------


@main.command()
@click.argument("url")
@click.argument("queues", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backlog(url: str, queues: tuple[str, ...], as_json: bool) -> None:
    """Contract v1's backlog figures (total, ready, oldest_seconds) of each QUEUE."""
    store = JobStore(store_url(url), StoreOptions(create_tables=False))
    try:
        rows = [store.backlog(q) for q in queues]
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                [
                    {"queue": r.queue, "total": r.total, "ready": r.ready,
                     "oldest_seconds": r.oldest_seconds}
                    for r in rows
                ]
            )
        )  # fmt: skip
        return
    _table(
        ["queue", "total", "ready", "oldest_s"],
        ([r.queue, r.total, r.ready, r.oldest_seconds] for r in rows),
        right=1,
    )


@main.command("dead-letters", hidden=True)
@click.argument("url")
@click.option("--queue", default=None)
@click.option("--limit", default=50)
@click.pass_context
def dead_letters(ctx: click.Context, url: str, queue: str | None, limit: int) -> None:
    """`failed list` (its old name)."""
    ctx.invoke(
        failed_list, url=url, queue=queue, limit=limit, as_json=False, layout=CONTRACT_LAYOUT,
        jobs_table=None, failed_table=None, retry_after=None,
    )  # fmt: skip


@main.command()
@click.argument("url")
@click.option("--retention", type=float, required=True, help="Keep dead letters this many seconds.")
def sweep(url: str, retention: float) -> None:
    """Delete dead letters older than --retention seconds (= failed flush --older-than)."""
    store = JobStore(store_url(url), StoreOptions(create_tables=False))
    try:
        click.echo(f"deleted {store.sweep_dead_letters(retention)} dead letter(s)")
    finally:
        store.close()


def _option_pairs(
    _ctx: click.Context | None, _param: object, values: tuple[str, ...]
) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that reads as JSON (numbers, true, lists) is taken as such."""
    found: dict[str, Any] = {}
    for pair in values:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE")
        try:
            found[key] = json.loads(raw)
        except ValueError:
            found[key] = raw
    return found


@main.command()
@click.argument("source")
@click.argument("url")
@click.argument("queues", nargs=-1, required=True)
@click.option("--check", is_flag=True, help="Only count what the source still holds.")
@click.option("--limit", type=int, default=None, help="At most this many per queue.")
@click.option(
    "--restore-unacked",
    is_flag=True,
    help="Redis: first put back what killed workers left unacknowledged (no old worker alive).",
)
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    callback=_option_pairs,
    metavar="KEY=VALUE",
    help="The old broker's transport option (Redis: priority_steps, sep, global_keyprefix).",
)
@click.option(
    "--priority-order",
    type=click.Choice(["high_first", "low_first"]),
    default=None,
    help="Ours, as the app sets it (a message's priority is stored as it is written).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.option("-q", "--quiet", is_flag=True, help="No line per message, only the totals.")
def move(**kw: Any) -> None:
    """Move the messages waiting on another broker's QUEUES into this one.

    SOURCE is any Kombu URL (redis://host:6379/0, amqp://…); URL is this queue's. Each message
    is published here before it is acknowledged there: none is lost, and one in flight when
    the command is interrupted may be moved twice. Messages a running worker holds stay at
    the source: stop the old workers first (docs/migrating-from-redis.md). --check counts
    what is left, per queue and (Redis) unacknowledged.
    """
    from kombu.exceptions import OperationalError

    try:
        _move(**kw)
    except OperationalError as exc:  # a broker that does not answer: one line, as our errors
        click.echo(f"error: cannot reach the broker: {exc}", err=True)
        sys.exit(2)


def _move(
    source: str,
    url: str,
    queues: tuple[str, ...],
    check: bool,
    limit: int | None,
    restore_unacked: bool,
    source_options: dict[str, Any],
    priority_order: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    from kombu_sqlqueue.moving import count_waiting, move_messages

    if check:
        waiting = count_waiting(source, queues, source_options=source_options)
        if as_json:
            click.echo(json.dumps({"queues": waiting.queues, "unacked": waiting.unacked}))
            return
        for queue, count in waiting.queues.items():
            click.echo(f"{queue}: {count} waiting")
        if waiting.unacked is not None:
            click.echo(f"unacked: {waiting.unacked} (delivered to a worker, not acknowledged)")
        return

    def progress(queue: str, message: Any) -> None:
        if not quiet and not as_json:
            task = (message.headers or {}).get("task") or "-"
            task_id = (message.headers or {}).get("id") or "-"
            click.echo(f"moved {queue}: {_safe(task)} {_safe(task_id)}")

    def dead_letter(queue: str, message: Any, reason: str) -> None:
        # Always said, on stderr: a message left behind in the dead letters is news.
        task = (message.headers or {}).get("task") or "-"
        task_id = (message.headers or {}).get("id") or "-"
        click.echo(_safe(f"dead-lettered {queue}: {task} {task_id}: {reason}"), err=True)

    moved = move_messages(
        source,
        url,
        queues,
        limit=limit,
        on_message=progress,
        on_dead_letter=dead_letter,
        source_options=source_options,
        dest_options={"priority_order": priority_order} if priority_order else None,
        restore_unacked=restore_unacked,
    )
    if as_json:
        click.echo(
            json.dumps(
                {m.queue: {"moved": m.moved, "dead_lettered": m.dead_lettered} for m in moved}
            )
        )
        return
    for m in moved:
        dead = (
            f", {m.dead_lettered} dead-lettered (kombu-sqlqueue failed list URL --queue {m.queue})"
            if m.dead_lettered
            else ""
        )
        click.echo(_safe(f"{m.queue}: {m.moved} moved{dead}"))


main.add_command(schedule)


def run() -> None:
    """Entry point: our errors (and those of the layout in use) become one clear line and
    exit status 2."""
    try:
        main(standalone_mode=True)
    except Exception as exc:
        ours: tuple[type[Exception], ...] = (
            SqlQueueError,
            *(error for layout in loaded_layouts() for error in layout.errors),
        )
        if not isinstance(exc, ours):
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
