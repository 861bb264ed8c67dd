"""The install lines a new user copies bring Celery: the README's "Use it" and the
quickstart's, read against pyproject's extras (``celery -A tasks worker`` must exist after
them)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or higher (a ``#`` line
    inside a code block is a shell comment, not a heading)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = path.read_text().splitlines()
    start = lines.index(heading)
    fenced = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "\n".join(lines[start:end])
    return "\n".join(lines[start:])


def install_lines(text: str) -> list[str]:
    """The ``pip install`` commands of the package in ``text`` (a comment's too)."""
    found = []
    for line in text.splitlines():
        for command in re.findall(r"pip install [^#\n]*", line):
            if "kombu-sqlqueue" in command or "kombu_sqlqueue" in command:
                found.append(command.strip())
    return found


def brings_celery(command: str) -> bool:
    words = shlex.split(command)[2:]
    for word in words:
        if word == "celery" or word.startswith("celery>") or word.startswith("celery="):
            return True
        extras = re.search(r"\[([^\]]*)\]$", word)
        if extras and any(
            re.match(r"celery\b", requirement)
            for extra in extras.group(1).split(",")
            for requirement in EXTRAS.get(extra.strip(), [])
        ):
            return True
    return False


PLACES = [
    (ROOT / "README.md", "## Use it"),
    (ROOT / "docs" / "quickstart.md", "# Quickstart"),
]


@pytest.mark.parametrize(("path", "heading"), PLACES, ids=["README", "quickstart"])
def test_every_install_line_a_new_user_copies_brings_celery(path: Path, heading: str) -> None:
    lines = install_lines(section(path, heading))
    assert len(lines) >= 2, lines  # from a clone, from a wheel (and PyPI, later)
    assert [line for line in lines if not brings_celery(line)] == []


def test_the_check_itself_tells_an_install_without_celery() -> None:
    assert not brings_celery("pip install './kombu-sqlqueue[postgresql]'")
    assert brings_celery("pip install './kombu-sqlqueue[celery,postgresql]'")
    assert brings_celery("pip install dist/kombu_sqlqueue-*.whl celery")
    assert brings_celery("pip install './kombu-sqlqueue[django,postgresql]'")
