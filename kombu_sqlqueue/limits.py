"""The explicit limits on what a stored row may hold, and their checks.

Readers (the Kombu channel, Celery's worker behind it, ``laravel-bridge work``)
check these before parsing, so a row past a limit is refused with a named error
and a reason — never with ``RecursionError`` or ``MemoryError`` from deep inside
a parser. Pure functions: no SQL, no Kombu.
"""

from __future__ import annotations

#: The deepest nesting of JSON arrays/objects a stored payload may have. Python's
#: JSON reader recurses once per level (about 1,000 levels crash it, fewer inside a
#: deep call stack such as Celery's worker); no real message comes near this.
MAX_JSON_DEPTH = 200

#: The longest reason a dead letter keeps, in bytes of UTF-8: ``askr_failed_jobs.exception``
#: is contract v1's TEXT, which MySQL/MariaDB cap at 65,535 bytes (an error in strict mode).
MAX_REASON_BYTES = 65_000

_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_QUOTE = ord('"')
_BACKSLASH = ord("\\")


def json_depth_exceeds(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``data`` nests arrays/objects deeper than ``limit``.

    Linear and without recursion; a text holding at most ``limit`` opening
    brackets in all (every real message) is answered by two C-level counts.
    Brackets inside strings are not counted. The text need not be valid JSON:
    the parser that runs afterwards says what else is wrong with it.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif byte in _CLOSE:
            depth -= 1
    return False


def fit_utf8(text: str, limit: int = MAX_REASON_BYTES) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, on a character boundary, marked."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    mark = "\n… (cut to fit the failed table's column)"
    room = limit - len(mark.encode("utf-8"))
    return raw[:room].decode("utf-8", "ignore") + mark


__all__ = ["MAX_JSON_DEPTH", "MAX_REASON_BYTES", "fit_utf8", "json_depth_exceeds"]
