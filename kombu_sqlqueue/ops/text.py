"""What the operator's commands print and read the same way: a table of rows, text any
terminal can show, a duration as people write it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import click


def safe(text: object) -> str:
    """``text`` printable on any terminal encoding: a stored row may hold a lone surrogate
    (a JSON ``\\ud800``), which would make the print fail."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: int = 0) -> None:
    """Print ``rows`` in aligned columns; the columns from ``right`` on right-aligned."""
    text = [[safe(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in text)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if right and i >= right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    click.echo(line(headers))
    for row in text:
        click.echo(line(row))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(_ctx: click.Context | None, _param: object, value: str | None) -> float | None:
    """``7d``, ``12h``, ``30m``, ``45s`` or plain seconds, as seconds."""
    if value is None:
        return None
    found = _DURATION.match(value)
    if found is None:
        raise click.BadParameter(f"{value!r} is not a duration such as 90, 45s, 30m, 12h, 7d, 2w")
    return float(found.group(1)) * _UNIT[found.group(2)]
