"""``laravel-bridge``: run Laravel jobs with Python handlers, like ``php artisan queue:work``.

.. code-block:: console

    $ laravel-bridge work --url mysql://app@127.0.0.1/app --handlers myapp.jobs \\
          --queue high,default --tries 3 --backoff 5,30
    [2026-11-29 15:00:00][12] Processing: App\\Jobs\\ResizeImage
    [2026-11-29 15:00:00][12] Processed:  App\\Jobs\\ResizeImage
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from kombu_sqlqueue.exceptions import SqlQueueError

from .exceptions import LaravelBridgeError
from .handlers import REGISTRY, load_handlers
from .payload import MAX_PAYLOAD_BYTES
from .tables import LAYOUTS, open_table
from .worker import Worker, WorkerOptions

F = TypeVar("F", bound=Callable[..., Any])


def _backoff(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not seconds or a comma list of seconds") from None


def _queues(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    queues = tuple(q.strip() for q in value.split(","))
    if any(not q for q in queues):
        raise click.BadParameter(f"{value!r} has an empty queue name")
    if len(set(queues)) != len(queues):
        raise click.BadParameter(f"{value!r} names a queue twice")
    return queues


@click.group()
def main() -> None:
    """Share Laravel's database queue with Python."""


#: The options naming the job table, shared by every command that opens one.
table_options = [
    click.option(
        "--url",
        envvar="LARAVEL_BRIDGE_URL",
        required=True,
        help="SQLAlchemy URL of the queue database (env LARAVEL_BRIDGE_URL).",
    ),
    click.option(
        "--layout",
        type=click.Choice(LAYOUTS),
        default="laravel",
        show_default=True,
        help="laravel: Laravel's jobs/failed_jobs tables; askr: contract v1's tables.",
    ),
    click.option("--jobs-table", default="jobs", show_default=True),
    click.option("--failed-table", default="failed_jobs", show_default=True),
]


def with_table_options(command: F) -> F:
    """Add :data:`table_options` to ``command``."""
    for option in reversed(table_options):
        command = option(command)
    return command


@main.command()
@with_table_options
@click.option(
    "--queue",
    "queues",
    default="default",
    show_default=True,
    callback=_queues,
    help="Queues to work, in priority order (comma-separated).",
)
@click.option(
    "--handlers",
    "handler_modules",
    multiple=True,
    help="Module registering handlers with @handles (repeatable).",
)
@click.option("--once", is_flag=True, help="Only process the next job on the queue.")
@click.option("--stop-when-empty", is_flag=True, help="Stop when the queue is empty.")
@click.option(
    "--tries",
    default=1,
    show_default=True,
    help="Attempts before a job without maxTries fails (0 = unlimited).",
)
@click.option(
    "--backoff",
    default="0",
    show_default=True,
    callback=_backoff,
    help="Seconds before retrying a job without backoff (or a comma list).",
)
@click.option(
    "--timeout",
    default=60,
    show_default=True,
    help="Seconds a job without a timeout may run (0 = unlimited).",
)
@click.option(
    "--sleep", default=3.0, show_default=True, help="Seconds to sleep when no job is available."
)
@click.option("--rest", default=0.0, show_default=True, help="Seconds to rest between jobs.")
@click.option(
    "--max-jobs", default=0, show_default=True, help="Stop after this many jobs (0 = never)."
)
@click.option(
    "--max-time", default=0.0, show_default=True, help="Stop after this many seconds (0 = never)."
)
@click.option(
    "--retry-after",
    default=90,
    show_default=True,
    help="The connection's retry_after: a reservation older than this is taken over.",
)
@click.option(
    "--connection",
    default="database",
    show_default=True,
    help="Laravel connection name written to failed_jobs.",
)
@click.option(
    "--app-key",
    envvar="APP_KEY",
    default=None,
    help="Laravel's APP_KEY, to decrypt encrypted jobs (env APP_KEY).",
)
@click.option("--cipher", default="AES-256-CBC", show_default=True)
@click.option(
    "--claim",
    type=click.Choice(["handled", "all"]),
    default="handled",
    show_default=True,
    help="Reserve only jobs of classes with a handler here (and unreadable rows), leaving the "
    "rest to PHP workers; or every job (Laravel's jobs table; contract v1's reserves all).",
)
@click.option(
    "--attempts-cap",
    default=0,
    help="Fail a job this worker runs once its attempts reach this, whatever its retryUntil "
    "or tries=0 (never more than the jobs table's attempts column holds). Default: that "
    "limit, as PHP's worker reaches it (255 for Laravel 8-12's TINYINT on MySQL, 65535 for "
    "Laravel 13's SMALLINT).",
)
@click.option(
    "--batches-table",
    default="job_batches",
    show_default=True,
    help="Laravel's job_batches table (queue.batching.table): batched jobs are recorded there "
    "and their batch's callbacks handed to PHP; '' to leave batches alone.",
)
@click.option(
    "--unique-locks-table",
    default=None,
    help="Laravel's database cache store lock table (cache_locks) in this database: release a "
    "ShouldBeUnique job's lock when Python finishes or fails it, as Laravel does.",
)
@click.option(
    "--unique-locks-url",
    default=None,
    help="The cache connection's database URL, when its cache_locks table is not in the "
    "queue's database.",
)
@click.option(
    "--cache-prefix",
    default="laravel_cache",
    show_default=True,
    help="Laravel's cache.prefix (config('cache.prefix')), which lock and pause keys start "
    "with; left at laravel_cache, pauses are read under every default an app named Laravel "
    "has had (laravel_cache, laravel_cache_, laravel-cache-).",
)
@click.option(
    "--pause-cache",
    default="cache",
    show_default=True,
    help="Laravel's database cache store table (cache; in --unique-locks-url's database when "
    "given), where queue:pause writes (Laravel 12.40+): a paused queue is skipped, as "
    "queue:work skips it; '' not to read pauses.",
)
@click.option(
    "--unknown-jobs",
    type=click.Choice(["release", "fail"]),
    default="release",
    show_default=True,
    help="What to do with a job no handler is registered for, once reserved.",
)
@click.option(
    "--unknown-delay",
    default=60.0,
    show_default=True,
    help="Seconds before a released unknown job is ready again (at least 1).",
)
@click.option(
    "--max-payload",
    default=MAX_PAYLOAD_BYTES,
    show_default=True,
    help="Largest payload read, in bytes; a larger row is failed as malformed.",
)
@click.option(
    "--create-tables/--no-create-tables",
    default=False,
    show_default=True,
    help="Create missing tables (Laravel's migrations normally do).",
)
@click.option(
    "--name",
    default=None,
    help="The name this worker's reservations are signed with (contract v1's layout; "
    "default laravel-bridge@HOST); a worker restarted under a gone one's name hands its "
    "holds back at once.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log each release and retry (INFO).")
def work(
    url: str,
    layout: str,
    queues: tuple[str, ...],
    handler_modules: tuple[str, ...],
    once: bool,
    stop_when_empty: bool,
    tries: int,
    backoff: tuple[int, ...],
    timeout: int,
    sleep: float,
    rest: float,
    max_jobs: int,
    max_time: float,
    retry_after: int,
    connection: str,
    app_key: str | None,
    cipher: str,
    jobs_table: str,
    failed_table: str,
    claim: str,
    attempts_cap: int,
    batches_table: str,
    unique_locks_table: str | None,
    unique_locks_url: str | None,
    cache_prefix: str,
    pause_cache: str,
    unknown_jobs: str,
    unknown_delay: float,
    max_payload: int,
    create_tables: bool,
    name: str | None,
    verbose: bool,
) -> None:
    """Process jobs from the queue, running each with its Python handler."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for module in handler_modules:
        load_handlers(module)
    if not len(REGISTRY):
        click.echo("warning: no handlers are registered (use --handlers MODULE)", err=True)
    options = WorkerOptions(
        queues=queues,
        connection=connection,
        tries=tries,
        backoff=backoff,
        timeout=timeout,
        sleep=sleep,
        rest=rest,
        max_jobs=max_jobs,
        max_time=max_time,
        once=once,
        stop_when_empty=stop_when_empty,
        retry_after=retry_after,
        claim="all" if claim == "all" else "handled",
        attempts_cap=attempts_cap,
        batches_table=batches_table or None,
        unique_locks=unique_locks_table,
        unique_locks_url=unique_locks_url,
        cache_prefix=cache_prefix,
        pause_cache=pause_cache or None,
        unknown_jobs="fail" if unknown_jobs == "fail" else "release",
        unknown_delay=unknown_delay,
        max_payload=max_payload,
    )
    table = open_table(
        url,
        layout,
        jobs_table=jobs_table,
        failed_table=failed_table,
        create_tables=create_tables,
    )
    table.sign(name or f"laravel-bridge@{socket.gethostname()}")
    worker = Worker(
        table, options, app_key=app_key, cipher=cipher, output=lambda line: click.echo(line)
    )
    try:
        worker.run()
    finally:
        table.close()


@main.command("create-tables")
@with_table_options
def create_tables_command(url: str, layout: str, jobs_table: str, failed_table: str) -> None:
    """Create the layout's tables as Laravel's migrations (or contract v1) define them."""
    table = open_table(url, layout, jobs_table=jobs_table, failed_table=failed_table)
    table.size("default")  # first use creates the tables
    table.close()
    click.echo("tables ready")


def run() -> None:
    """Entry point: our errors become one clear line and exit status 2."""
    try:
        main(standalone_mode=True)
    except (LaravelBridgeError, SqlQueueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
