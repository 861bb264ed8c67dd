"""Operator commands: ``kombu-sqlqueue`` (or ``python -m kombu_sqlqueue``).

URLs may be given with or without the ``sqlqueue+`` prefix, so a Celery
``broker_url`` can be pasted as is.
"""

from __future__ import annotations

import json
import sys

import click

from .exceptions import SqlQueueError
from .store import JobStore, StoreOptions


def _store(url: str, create: bool = False) -> JobStore:
    if url.startswith("sqlqueue+"):
        url = url[len("sqlqueue+") :]
    return JobStore(url, StoreOptions(create_tables=create))


@click.group()
def main() -> None:
    """Inspect and maintain a kombu-sqlqueue job table."""


@main.command("create-tables")
@click.argument("url")
def create_tables(url: str) -> None:
    """Create askr_jobs and askr_failed_jobs (idempotent)."""
    store = _store(url, create=True)
    store.create_schema()
    click.echo("tables ready: askr_jobs, askr_failed_jobs")
    store.close()


@main.command()
@click.argument("url")
@click.argument("queues", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def backlog(url: str, queues: tuple[str, ...], as_json: bool) -> None:
    """Print total, ready and oldest_seconds for each QUEUE."""
    store = _store(url)
    rows = [store.backlog(q) for q in queues]
    store.close()
    if as_json:
        click.echo(json.dumps([_asdict(r) for r in rows]))
        return
    click.echo(f"{'queue':30} {'total':>8} {'ready':>8} {'oldest_s':>9}")
    for r in rows:
        click.echo(f"{r.queue:30} {r.total:>8} {r.ready:>8} {r.oldest_seconds:>9}")


def _asdict(row: object) -> dict[str, object]:
    return {name: getattr(row, name) for name in getattr(row, "__slots__", ())}


@main.command("dead-letters")
@click.argument("url")
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--limit", default=50, show_default=True)
def dead_letters(url: str, queue: str | None, limit: int) -> None:
    """List dead-lettered jobs, oldest first."""
    store = _store(url)
    for d in store.dead_letters(queue, limit):
        click.echo(f"{d.id}\t{d.queue}\t{d.uuid or '-'}\tattempts={d.attempts}\t{d.exception}")
    store.close()


@main.command()
@click.argument("url")
@click.option("--retention", type=float, required=True, help="Keep dead letters this many seconds.")
def sweep(url: str, retention: float) -> None:
    """Delete dead letters older than --retention seconds."""
    store = _store(url)
    click.echo(f"deleted {store.sweep_dead_letters(retention)} dead letter(s)")
    store.close()


def run() -> None:
    """Entry point that turns our errors into one clear line and exit status 2."""
    try:
        main(standalone_mode=True)
    except SqlQueueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
