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


__all__ = ["MAX_JSON_DEPTH", "json_depth_exceeds"]
