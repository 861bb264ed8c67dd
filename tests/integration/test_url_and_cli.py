"""The sqlqueue+ URL resolves in a fresh interpreter with no import; the operator CLI works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kombu_sqlqueue.store import JobStore, NewJob


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_broker_url_resolves_without_importing_the_package(broker_url: str, tmp_path: Path) -> None:
    code = (
        "import sys, kombu\n"
        f"c = kombu.Connection({broker_url!r})\n"
        "with c:\n"
        "    c.SimpleQueue('hello').put('hi')\n"
        "print(type(c.transport).__module__)\n"
    )
    done = run(sys.executable, "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kombu_sqlqueue.transport"


def test_cli_backlog_dead_letters_and_sweep(db_url: str, store: JobStore) -> None:
    store.enqueue_many([NewJob("celery", b"a"), NewJob("celery", b"b", delay=60)])
    store.enqueue(NewJob("mail", b"m", uuid="task-1"))
    (held,) = store.claim("mail", 1, 30).jobs
    store.dead_letter(held.receipt, "boom")
    cli = [sys.executable, "-m", "kombu_sqlqueue"]

    out = run(*cli, "backlog", f"sqlqueue+{db_url}", "celery", "--json")
    assert out.returncode == 0, out.stderr
    assert '"total": 2' in out.stdout and '"ready": 1' in out.stdout

    out = run(*cli, "dead-letters", db_url)
    assert "mail" in out.stdout and "task-1" in out.stdout and "boom" in out.stdout

    out = run(*cli, "sweep", db_url, "--retention", "3600")
    assert out.stdout.strip() == "deleted 0 dead letter(s)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("backlog", "sqlqueue+oracle://x/y", "q"), "not supported"),
        (("backlog", "sqlite:///{tmp}/q.db", "bad\tname"), "non-printable"),
    ],
)
def test_cli_errors_are_one_clear_line(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    args = tuple(a.format(tmp=tmp_path) for a in args)
    out = run(sys.executable, "-m", "kombu_sqlqueue", *args)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and message in out.stderr
    assert "Traceback" not in out.stderr
