"""Queue-name validation, done before any SQL runs.

Seed 004's portable grammar (``[A-Za-z0-9_-]{1,80}``) rejects Celery's own
names (``celery@host.celery.pidbox``, ``celeryev.<uuid>``), so the rule here is
wider: any printable text, bounded length. Names always travel as bound
parameters, so the only job of this check is to refuse what a person would
never mean (empty, control characters, runaway length) with a clear message.
"""

from __future__ import annotations

from ..exceptions import InvalidQueueName

#: Longest queue name accepted, in characters. 255 fits a ``VARCHAR(255)``
#: index on every engine (MySQL's utf8mb4 limit included) and holds Celery's
#: longest generated names (``<hostname>.celery.pidbox``, with a 253-char DNS
#: host name only when the node name is short).
MAX_QUEUE_NAME_LENGTH = 255


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a usable queue name, else raise :class:`InvalidQueueName`."""
    if not isinstance(name, str):
        raise InvalidQueueName(f"queue name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidQueueName("queue name must not be empty")
    if len(name) > MAX_QUEUE_NAME_LENGTH:
        raise InvalidQueueName(
            f"queue name is {len(name)} characters long; the limit is {MAX_QUEUE_NAME_LENGTH}: "
            f"{name[:40]!r}..."
        )
    if not name.isprintable():
        bad = next(ch for ch in name if not ch.isprintable())
        raise InvalidQueueName(
            f"queue name {name!r} holds the non-printable character U+{ord(bad):04X}"
        )
    if name != name.strip():
        raise InvalidQueueName(f"queue name {name!r} starts or ends with white space")
    return name
