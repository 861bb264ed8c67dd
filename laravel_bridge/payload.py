"""Laravel's queue payload (the JSON in a ``jobs.payload`` column) and the job command inside it.

A payload built here for a given job is byte-identical to the one Laravel 8
writes (uuid aside): keys in Laravel's order, ``json_encode`` with
``JSON_UNESCAPED_UNICODE`` (``\\/`` escaped, UTF-8 raw, U+2028/U+2029 escaped).
Parsing keeps every key, known or not, so a payload re-encodes untouched.

Limits (each refused with a named :class:`~laravel_bridge.exceptions.PayloadError`,
never a ``RecursionError`` or ``MemoryError`` from deep inside a parser):
:data:`MAX_PAYLOAD_BYTES` for the stored payload, ``MAX_JSON_DEPTH`` for its
JSON nesting, :data:`MAX_COMMAND_DEPTH` for the PHP nesting of its command.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import time
import uuid as uuid_module
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kombu_sqlqueue.limits import MAX_JSON_DEPTH, json_depth_exceeds

from . import php_serialize
from .encryption import Encrypter, looks_encrypted
from .exceptions import (
    LaravelBridgeError,
    PayloadError,
    PayloadTooDeep,
    PayloadTooLarge,
    PhpSerializeError,
)
from .php_serialize import PhpObject, plain_name

#: Laravel's ``database`` connection default queue.
DEFAULT_QUEUE = "default"
#: The handler Laravel names in ``job`` for every queued command object.
CALL_QUEUED_HANDLER = "Illuminate\\Queue\\CallQueuedHandler@call"
#: The payload shapes Python writes, by Laravel version (8-11 share one).
LARAVEL_VERSIONS = (8, 9, 10, 11, 12, 13)
#: Laravel 8's: every key the newer versions add is optional to their workers (``?? null``),
#: and 8.83 is the version the end-to-end tests run for real.
DEFAULT_LARAVEL_VERSION = 8
#: ``Illuminate\\Bus\\Queueable``'s properties, in declaration order.
QUEUEABLE_PROPERTIES = (
    "connection",
    "queue",
    "chainConnection",
    "chainQueue",
    "chainCatchCallbacks",
    "delay",
    "afterCommit",
    "middleware",
    "chained",
)
#: Queueable properties newer Laravel versions add (12.x: ``messageGroup``, ``deduplicator``;
#: 13.x: ``debounceOwner``, ``uniqueLockOwner``), and ``Batchable``'s ``batchId``: plumbing,
#: not the job's own properties, when a payload of those versions is read.
NEWER_PLUMBING = ("messageGroup", "deduplicator", "debounceOwner", "uniqueLockOwner", "batchId")
#: What :attr:`JobCommand.properties` leaves out.
PLUMBING = frozenset((*QUEUEABLE_PROPERTIES, *NEWER_PLUMBING, "job"))
MODEL_IDENTIFIER = "Illuminate\\Contracts\\Database\\ModelIdentifier"
CARBON_CLASSES = (
    "Carbon\\Carbon",
    "Carbon\\CarbonImmutable",
    "Illuminate\\Support\\Carbon",  # what Laravel's now() and today() return
    "DateTime",
    "DateTimeImmutable",
)

#: The deepest nesting of PHP arrays/objects a job's command may have (``loads`` and
#: ``dumps`` of a command, and the conversion of its values to Python and back).
#: A real job nests a handful of levels — the job object, an array property, a
#: ModelIdentifier and its relations list; a chained job is a serialized *string*
#: inside, so it starts its own count. 128 is far above that and far below Python's
#: recursion limit (1,000 frames) even for code spending three frames per level
#: (``copy.deepcopy``, a recursive handler) under a deep stack. PHP's own
#: ``unserialize_max_depth`` (4,096, the codec's default) is not: a command nested
#: 500 deep decodes there but would crash recursive Python code.
MAX_COMMAND_DEPTH = 128
#: The largest payload the worker reads (16 MiB; bytes of its UTF-8 text). Parsed,
#: a payload can take ~20 times its size in memory; MariaDB's default
#: ``max_allowed_packet`` (16 MiB) refuses larger rows anyway. Jobs are kilobytes.
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
#: The longest delay a release, a backoff or a chained job's delay may ask for (a year):
#: ``available_at`` is a 32-bit column in Laravel's migration.
MAX_DELAY_SECONDS = 365 * 86400

#: One encoder for every payload (``json.dumps`` with options builds a new one per call).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def laravel_json(value: Any) -> str:
    """``json_encode($value, JSON_UNESCAPED_UNICODE)`` as PHP writes it."""
    text = _JSON.encode(value).replace("/", "\\/")
    # str.replace is several times faster than translate; the separators are rare.
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


# -- values inside commands ----------------------------------------------------------------


@dataclass(frozen=True)
class ModelIdentifier:
    """Laravel's stand-in for an Eloquent model in a queued job (``SerializesModels``)."""

    class_name: str
    id: Any
    relations: tuple[str, ...] = ()
    connection: str | None = None
    #: Laravel 12+: the collection's class when it is not Eloquent's own (a model's
    #: ``newCollection()``); written back only when set (Laravel 8 has no such property).
    collection_class: str | None = None

    @classmethod
    def from_php(cls, obj: PhpObject) -> ModelIdentifier:
        relations = obj.get("relations") or []
        if isinstance(relations, dict):
            relations = list(relations.values())
        if not isinstance(relations, list):
            raise PayloadError(f"a ModelIdentifier's relations are a {type(relations).__name__}")
        collection = obj.get("collectionClass")
        return cls(
            obj.get("class"),
            obj.get("id"),
            tuple(relations),
            obj.get("connection"),
            collection if isinstance(collection, str) else None,
        )

    def to_php(self) -> PhpObject:
        props: dict[str | int, Any] = {
            "class": self.class_name,
            "id": self.id,
            "relations": list(self.relations),
            "connection": self.connection,
        }
        if self.collection_class is not None:
            props["collectionClass"] = self.collection_class
        return PhpObject(MODEL_IDENTIFIER, props)


def _zone(kind: int, name: str) -> tzinfo:
    if kind == 1:  # a UTC offset, "+02:00"
        match = re.fullmatch(r"([+-])(\d\d):(\d\d)", name)
        if not match:
            raise PayloadError(f"bad UTC offset {name!r} in a date")
        sign = -1 if match.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(match.group(2)), minutes=int(match.group(3))))
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise PayloadError(f"unknown time zone {name!r} in a date") from exc


def date_from_php(obj: PhpObject) -> datetime:
    """An aware ``datetime`` from a serialized Carbon/DateTime object."""
    try:
        naive = datetime.strptime(obj.get("date"), "%Y-%m-%d %H:%M:%S.%f")
        return naive.replace(tzinfo=_zone(int(obj.get("timezone_type")), obj.get("timezone")))
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise PayloadError(f"bad serialized date {short_repr(obj.plain())}: {exc}") from exc


def date_to_php(value: datetime, class_name: str = "Carbon\\Carbon") -> PhpObject:
    """A serialized ``Carbon\\Carbon`` (or ``class_name``) for an aware ``datetime``."""
    tz = value.tzinfo
    if tz is None:
        raise PayloadError("a naive datetime has no time zone; PHP dates need one")
    if isinstance(tz, ZoneInfo):
        kind, name = 3, tz.key
    elif tz is UTC:
        kind, name = 3, "UTC"
    else:
        offset = value.utcoffset() or timedelta(0)
        minutes = int(offset.total_seconds() // 60)
        sign = "-" if minutes < 0 else "+"
        kind, name = 1, f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    date = value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return PhpObject(class_name, {"date": date, "timezone_type": kind, "timezone": name})


def delay_seconds(delay: Any, now: float | None = None) -> float:
    """A delay (seconds, ``timedelta``, or the ``datetime`` it ends at) in seconds, at most
    :data:`MAX_DELAY_SECONDS` (``available_at`` is 32-bit)."""
    if delay is None:
        return 0.0
    if isinstance(delay, datetime):
        if delay.tzinfo is None:
            raise LaravelBridgeError("a delay datetime needs a time zone")
        delay = max(0.0, delay.timestamp() - (now if now is not None else time.time()))
    elif isinstance(delay, timedelta):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise LaravelBridgeError(
            f"delay must be seconds, a timedelta or a datetime, got {type(delay).__name__}"
        )
    if not 0 <= delay <= MAX_DELAY_SECONDS:  # NaN fails both comparisons
        raise LaravelBridgeError(
            f"delay must be >= 0 seconds and at most {MAX_DELAY_SECONDS} (a year), got {delay!r}"
        )
    return float(delay)


def unix_time(value: Any, what: str) -> int | None:
    """``retryUntil`` as Laravel writes it: whole unix seconds (``what`` names it in errors)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise LaravelBridgeError(f"{what} datetime needs a time zone")
        return int(value.timestamp())
    if isinstance(value, PhpObject) and value.class_name in CARBON_CLASSES:
        return int(date_from_php(value).timestamp())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise PayloadError(f"{what} must be a unix time or a datetime, got {value!r}")
    if not -(2**63) <= value < 2**63:  # inf included; a JSON number PHP can hold
        raise PayloadError(f"{what} {value!r} is out of range for a unix time")
    return int(value)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 4


def short_repr(value: Any) -> str:
    """A short ``repr`` of ``value`` for messages: long strings, big and deep containers cut."""
    return _REPR.repr(value)


def _rebuild(
    value: Any, leaf: Callable[[Any], Any], is_branch: Callable[[Any], bool], max_depth: int
) -> Any:
    """Copy the nested values ``is_branch`` accepts (lists, tuples and dicts as lists and dicts,
    a :class:`PhpObject` as a new one of its class), applying ``leaf`` to every other value.
    Iterative: nesting past ``max_depth`` (a cycle included) raises :class:`.PayloadTooDeep`,
    never ``RecursionError``."""
    if not is_branch(value):
        return leaf(value)

    def open_(branch: Any) -> tuple[Any, Any, Any]:
        """(the copy, the container its children go into, the children)."""
        if isinstance(branch, PhpObject):
            copy = PhpObject(branch.class_name, {})
            return copy, copy.properties, iter(branch.properties.items())
        if isinstance(branch, dict):
            out: dict[Any, Any] = {}
            return out, out, iter(branch.items())
        items: list[Any] = []
        return items, items, enumerate(branch)

    result, target, children = open_(value)
    stack = [(target, children)]
    while stack:
        out, items = stack[-1]
        for key, child in items:
            branch = is_branch(child)
            if branch:
                if len(stack) >= max_depth:
                    raise PayloadTooDeep(
                        f"a value nests arrays deeper than {max_depth} levels (MAX_COMMAND_DEPTH)"
                    )
                new, new_target, new_items = open_(child)
                stack.append((new_target, new_items))
            else:
                new = leaf(child)
            if type(out) is list:
                out.append(new)
            else:
                out[key] = new
            if branch:
                break
        else:
            stack.pop()
    return result


def _python_leaf(value: Any) -> Any:
    if isinstance(value, PhpObject):
        if value.class_name in CARBON_CLASSES:
            return date_from_php(value)
        if value.class_name == MODEL_IDENTIFIER:
            return ModelIdentifier.from_php(value)
    return value


def _php_leaf(value: Any) -> Any:
    if isinstance(value, datetime):
        return date_to_php(value)
    if isinstance(value, ModelIdentifier):
        return value.to_php()
    return value


def _is_array(value: Any) -> bool:
    return isinstance(value, (list, dict))


def _is_array_or_tuple(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict))


def _is_array_or_object(value: Any) -> bool:
    return isinstance(value, (list, dict)) or (
        isinstance(value, PhpObject)
        and value.class_name not in CARBON_CLASSES
        and value.class_name != MODEL_IDENTIFIER
    )


def to_python(value: Any, *, max_depth: int = MAX_COMMAND_DEPTH) -> Any:
    """A friendlier view of a PHP value: dates → ``datetime``, models → ``ModelIdentifier``.

    Lists and dicts are copied (objects are not descended into); nesting past
    ``max_depth`` raises :class:`.PayloadTooDeep`.
    """
    return _rebuild(value, _python_leaf, _is_array, max_depth)


def unpack(value: Any, *, max_depth: int = MAX_COMMAND_DEPTH) -> Any:
    """:func:`to_python` all the way down: objects are descended into too, each copied as a
    :class:`PhpObject` of its class (same property keys) holding Python values — what a
    handler gets for an event, a mailable or a notification."""
    return _rebuild(value, _python_leaf, _is_array_or_object, max_depth)


def to_php(value: Any, *, max_depth: int = MAX_COMMAND_DEPTH) -> Any:
    """The PHP value for a Python one: ``datetime`` → Carbon, ``ModelIdentifier`` → its object.

    Tuples become lists; nesting past ``max_depth`` (or a list holding itself)
    raises :class:`.PayloadTooDeep`.
    """
    return _rebuild(value, _php_leaf, _is_array_or_tuple, max_depth)


# -- the command -------------------------------------------------------------------------

#: Laravel's job middleware that locks a key while the job runs (Laravel 8+).
WITHOUT_OVERLAPPING = "Illuminate\\Queue\\Middleware\\WithoutOverlapping"


def _php_string(value: str | int | float) -> str:
    """``value`` as PHP's string concatenation writes it (ints as digits; a float PHP 8's
    way for the common cases)."""
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    return str(value)


@dataclass
class JobCommand:
    """A queued job object (``data.command``): class, own properties, Queueable settings."""

    obj: PhpObject

    @property
    def class_name(self) -> str:
        return self.obj.class_name

    @property
    def properties(self) -> dict[str, Any]:
        """The job's own properties by plain name as Python values (Queueable's, Batchable's
        and InteractsWithQueue's excluded, those of Laravel 12 and 13 too)."""
        return {
            name: to_python(value)
            for name, value in self.obj.plain().items()
            if name not in PLUMBING
        }

    def queueable(self, name: str) -> Any:
        """One of Laravel's Queueable properties (``queue``, ``delay``, ``chained`` …, and
        the newer versions' ``messageGroup`` …, ``batchId``)."""
        if name not in PLUMBING or name == "job":
            raise KeyError(f"{name!r} is not a Queueable property")
        return to_python(self.obj.get(name))

    @property
    def overlap_key(self) -> str | None:
        """The cache lock key of the job's ``WithoutOverlapping`` middleware, as its
        ``getLockKey`` builds it (``<prefix><class>:<key>``; ``<prefix><key>`` when
        ``shareKey``, Laravel 9+), when the job carries one in its serialized
        ``middleware`` (``->through([...])``); None otherwise — a ``middleware()``
        method's is code, not in the payload. Anything odd in it is None, never an error."""
        middleware = self.obj.get("middleware")
        items = middleware.values() if isinstance(middleware, dict) else middleware
        if not isinstance(items, (list, type({}.values()))):
            return None
        for item in items:
            if isinstance(item, PhpObject) and item.class_name.lstrip("\\") == WITHOUT_OVERLAPPING:
                key, prefix = item.get("key"), item.get("prefix")
                if isinstance(key, bool) or not isinstance(key, (str, int, float)):
                    return None
                prefix = prefix if isinstance(prefix, str) else ""
                scope = "" if item.get("shareKey") is True else f"{self.class_name}:"
                return f"{prefix}{scope}{_php_string(key)}"
        return None

    @property
    def queue(self) -> str | None:
        return self.obj.get("queue")  # type: ignore[no-any-return]

    @property
    def connection(self) -> str | None:
        return self.obj.get("connection")  # type: ignore[no-any-return]

    @property
    def chained(self) -> list[JobCommand]:
        """The jobs chained after this one, decoded (Laravel keeps them serialized)."""
        chain = self.obj.get("chained") or []
        items = chain.values() if isinstance(chain, dict) else chain
        if not isinstance(items, (list, type({}.values()))):
            raise PayloadError(f"the command's chained is a {type(chain).__name__}, not a list")
        return [JobCommand.loads(item) for item in items]

    @classmethod
    def loads(cls, data: bytes | str, *, max_depth: int = MAX_COMMAND_DEPTH) -> JobCommand:
        """Decode a serialized command; raise :class:`PayloadError` if it is not an object
        (:class:`.PayloadTooDeep` when it nests deeper than ``max_depth``)."""
        if not isinstance(data, (bytes, str)):
            raise PayloadError(f"a serialized command is a string, not a {type(data).__name__}")
        try:
            value = php_serialize.loads(data, max_depth=max_depth)
        except PayloadTooDeep as exc:
            raise PayloadTooDeep(
                f"the command nests PHP arrays/objects deeper than {max_depth} levels "
                f"(MAX_COMMAND_DEPTH): {exc}"
            ) from exc
        except PhpSerializeError as exc:
            raise PayloadError(f"the command is not PHP-serialized data: {exc}") from exc
        if not isinstance(value, PhpObject):
            raise PayloadError(f"the command is a {type(value).__name__}, not a PHP object")
        return cls(value)

    def dumps(self, *, max_depth: int = MAX_COMMAND_DEPTH) -> bytes:
        """The command as PHP ``serialize()`` writes it; :class:`.PayloadTooDeep` past
        ``max_depth``."""
        return php_serialize.dumps(self.obj, max_depth=max_depth)

    @classmethod
    def build(
        cls,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        connection: str | None = None,
        delay: int | datetime | None = None,
        after_commit: bool | None = None,
        chain_connection: str | None = None,
        chain_queue: str | None = None,
        middleware: list[Any] | None = None,
        chained: list[JobCommand] | None = None,
        interacts_with_queue: bool = True,
    ) -> JobCommand:
        """Build the object PHP would serialize for a job made by ``php artisan make:job``.

        Own properties first (public unless a key is mangled with
        :func:`~laravel_bridge.protected` / :func:`~laravel_bridge.private`),
        then ``InteractsWithQueue``'s ``job`` and ``Queueable``'s properties,
        which is the order PHP writes for a class using those traits.
        """
        props: dict[str | int, Any] = {k: to_php(v) for k, v in (properties or {}).items()}
        reserved = (*QUEUEABLE_PROPERTIES, "job") if interacts_with_queue else QUEUEABLE_PROPERTIES
        clash = [k for k in props if isinstance(k, str) and plain_name(k) in reserved]
        if clash:
            raise PayloadError(
                f"{', '.join(map(str, clash))} belong to Laravel's Queueable traits, not the job: "
                "pass them as options (queue=, connection=, delay=, chained= …)"
            )
        if interacts_with_queue:
            props["job"] = None
        props.update(
            {
                "connection": connection,
                "queue": queue,
                "chainConnection": chain_connection,
                "chainQueue": chain_queue,
                "chainCatchCallbacks": None,
                "delay": to_php(delay),
                "afterCommit": after_commit,
                "middleware": list(middleware or []),
                "chained": [c.dumps().decode("utf-8", "surrogateescape") for c in chained or []],
            }
        )
        return cls(PhpObject(class_name, props))


# -- the payload -------------------------------------------------------------------------


def _backoff_text(backoff: int | list[int] | str | None) -> str | None:
    if backoff is None or isinstance(backoff, str):
        return backoff
    if isinstance(backoff, int):
        return str(backoff)
    return ",".join(str(int(b)) for b in backoff)


@dataclass
class Payload:
    """A Laravel queue payload. ``data`` is the whole JSON object, every key kept in order."""

    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | bytes, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> Payload:
        """Parse a ``payload`` column (text, or the bytes a BLOB holds); :class:`PayloadError`
        says what is wrong: too large (:class:`.PayloadTooLarge`), not UTF-8, nested deeper
        than ``MAX_JSON_DEPTH`` (:class:`.PayloadTooDeep`), not JSON, not an object, no
        ``job``. Checked in that order, each before the work that could not bear it."""
        if not isinstance(raw, (str, bytes)):
            raise PayloadError(f"payload is a {type(raw).__name__}, not text")
        size = len(raw)
        if size > max_bytes or (
            isinstance(raw, str)
            and size * 4 > max_bytes
            and len(raw.encode("utf-8", "surrogatepass")) > max_bytes
        ):
            raise PayloadTooLarge(
                f"payload is larger than the {max_bytes} bytes the worker reads (MAX_PAYLOAD_BYTES)"
            )
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")  # what PHP's json_decode accepts; no BOM sniffing
            except UnicodeDecodeError as exc:
                raise PayloadError(f"payload is not valid UTF-8: {exc}") from exc
        if not raw.strip():
            raise PayloadError("payload is empty")
        if json_depth_exceeds(raw, MAX_JSON_DEPTH):
            raise PayloadTooDeep(
                f"payload JSON nests deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)"
            )
        try:
            data = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError, or an integer past 4,300 digits
            raise PayloadError(f"payload is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise PayloadError(f"payload is JSON {_json_kind(data)}, not an object")
        if not isinstance(data.get("job"), str):
            raise PayloadError("payload has no 'job' (the handler Laravel calls)")
        return cls(data)

    def to_json(self) -> str:
        """The payload as Laravel's ``json_encode`` writes it."""
        return laravel_json(self.data)

    def to_stored_json(self) -> str:
        """:meth:`to_json`, refused when it cannot be stored as UTF-8 text (bytes that are not
        UTF-8 in a property), as Laravel refuses it with InvalidPayloadException."""
        text = self.to_json()
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PayloadError(
                "the job holds bytes that are not UTF-8 text, which a Laravel payload cannot "
                f"carry: {exc}"
            ) from exc
        return text

    def for_retry(self, now: float) -> Payload | None:
        """This payload as ``php artisan queue:retry`` pushes it back, or None when it
        would push it unchanged: ``attempts`` (a key Redis payloads carry) reset to 0, and
        a ``retryUntil`` window started again from ``now`` — Laravel asks the job's
        ``retryUntil()`` method, which Python cannot call, so the window kept is the one
        the job was dispatched with (``retryUntil − createdAt``, Laravel 11+); a payload
        without ``createdAt`` keeps its ``retryUntil`` (see ``docs/operations.md``)."""
        data = dict(self.data)
        if isinstance(data.get("attempts"), int) and data["attempts"] != 0:
            data["attempts"] = 0
        until, created = self.data.get("retryUntil"), self.created_at
        if type(until) is int and created is not None and created <= until:
            data["retryUntil"] = int(now) + (until - created)
            data["createdAt"] = int(now)
        return None if data == self.data else Payload(data)

    # Laravel's keys, read-only views.
    @property
    def uuid(self) -> str | None:
        return self.data.get("uuid")

    @property
    def display_name(self) -> str | None:
        return self.data.get("displayName")

    @property
    def job(self) -> str:
        return str(self.data["job"])

    @property
    def max_tries(self) -> int | None:
        return self.data.get("maxTries")

    @property
    def max_exceptions(self) -> int | None:
        return self.data.get("maxExceptions")

    @property
    def fail_on_timeout(self) -> bool:
        return bool(self.data.get("failOnTimeout"))

    @property
    def timeout(self) -> int | None:
        return self.data.get("timeout")

    @property
    def retry_until(self) -> int | None:
        return self.data.get("retryUntil")

    @property
    def backoff(self) -> list[int]:
        """Seconds to wait before each retry (Laravel writes ``"7"`` or ``"1,5,10"``).

        As ``Job::backoff()``: the payload's ``backoff``, else its ``delay`` (the dispatch
        delay, which Laravel 12+ writes: a ``->delay(30)`` job is retried after 30 s)."""
        raw = self.data.get("backoff")
        if raw is None:
            raw = self.data.get("delay")
        if raw is None or raw == "":
            return []
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise PayloadError(f"bad backoff {short_repr(raw)} in the payload: not a string")
        try:
            return [_seconds_of(part) for part in str(raw).split(",")]
        except (ValueError, OverflowError) as exc:
            raise PayloadError(f"bad backoff {short_repr(raw)} in the payload: {exc}") from exc

    @property
    def command_name(self) -> str | None:
        data = self.data.get("data")
        return data.get("commandName") if isinstance(data, dict) else None

    @property
    def command_text(self) -> str | None:
        """``data.command`` as stored: serialized PHP, or Laravel-encrypted."""
        data = self.data.get("data")
        return data.get("command") if isinstance(data, dict) else None

    @property
    def batch_id(self) -> str | None:
        data = self.data.get("data")
        return data.get("batchId") if isinstance(data, dict) else None

    @property
    def created_at(self) -> int | None:
        """When the job was dispatched (unix seconds; Laravel 11+ writes it)."""
        value = self.data.get("createdAt")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def delete_when_missing_models(self) -> bool:
        """Laravel 13's payload key (earlier: the class's property, which Python cannot see).
        Python never reloads models, so never meets a missing one; read for completeness."""
        return self.data.get("deleteWhenMissingModels") is True

    @property
    def is_encrypted(self) -> bool:
        """Laravel's rule: a command not starting with ``O:`` is encrypted."""
        text = self.command_text
        return isinstance(text, str) and not text.startswith("O:")

    def command(self, encrypter: Encrypter | None = None) -> JobCommand:
        """The decoded job object; an encrypted command needs the app's ``encrypter``.

        Laravel takes a command not starting with ``O:`` for encrypted; here one that is
        not base64 of an ``{iv, value, mac}`` object either is called what it is.
        """
        text = self.command_text
        if not isinstance(text, str):
            raise PayloadError("payload has no data.command string")
        if self.is_encrypted and looks_encrypted(text):
            if encrypter is None:
                raise PayloadError("the command is encrypted; pass the app key's Encrypter")
            inner = encrypter.decrypt(text)  # Laravel encrypts serialize(serialize($job))
            if not isinstance(inner, (str, bytes)):
                raise PayloadError("the decrypted command is not a serialized object")
            return JobCommand.loads(inner)
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:  # a lone surrogate escaped in the JSON
            raise PayloadError(f"data.command is not text PHP wrote: {exc}") from exc
        try:
            return JobCommand.loads(raw)
        except PayloadTooDeep:
            raise
        except PayloadError as exc:
            if not self.is_encrypted or not isinstance(exc.__cause__, PhpSerializeError):
                raise
            raise PayloadError(
                "data.command is neither PHP serialize() data nor a Laravel-encrypted string: "
                f"{exc.__cause__} (it starts {short_repr(text[:24])})"
            ) from exc

    @classmethod
    def build(
        cls,
        command: JobCommand,
        *,
        uuid: str | None = None,
        max_tries: int | None = None,
        max_exceptions: int | None = None,
        fail_on_timeout: bool = False,
        backoff: int | list[int] | str | None = None,
        timeout: int | None = None,
        retry_until: int | datetime | None = None,
        encrypter: Encrypter | None = None,
        display_name: str | None = None,
        laravel_version: int = DEFAULT_LARAVEL_VERSION,
        delay: int | None = None,
        created_at: int | None = None,
    ) -> Payload:
        """The payload Laravel's ``Queue::createObjectPayload`` writes for ``command``, in
        the key set of ``laravel_version`` (8-11 share one; 12 adds ``data.batchId``,
        ``createdAt`` and the dispatch ``delay``; 13 adds ``deleteWhenMissingModels``)."""
        if laravel_version not in LARAVEL_VERSIONS:
            raise LaravelBridgeError(
                f"laravel_version must be one of {', '.join(map(str, LARAVEL_VERSIONS))}, "
                f"got {laravel_version!r}"
            )
        serialized = command.dumps()
        if encrypter is not None:
            text = encrypter.encrypt(serialized.decode("utf-8", "surrogateescape"))
        else:
            text = serialized.decode("utf-8", "surrogateescape")
        if isinstance(retry_until, datetime):
            retry_until = int(retry_until.timestamp())
        data: dict[str, Any] = {
            "uuid": uuid or str(uuid_module.uuid4()),
            "displayName": display_name or command.class_name,
            "job": CALL_QUEUED_HANDLER,
            "maxTries": max_tries,
            "maxExceptions": max_exceptions,
            "failOnTimeout": fail_on_timeout,
            "backoff": _backoff_text(backoff),
            "timeout": timeout,
            "retryUntil": retry_until,
        }
        if laravel_version >= 13:
            data["deleteWhenMissingModels"] = command.obj.get("deleteWhenMissingModels") is True
        data["data"] = {"commandName": command.class_name, "command": text}
        if laravel_version >= 12:
            data["data"]["batchId"] = command.obj.get("batchId")
            data["createdAt"] = int(time.time()) if created_at is None else created_at
            data["delay"] = delay
        return cls(data)

    @property
    def laravel_version(self) -> int:
        """The oldest Laravel version whose key set this payload has (8 for 8-11)."""
        if "deleteWhenMissingModels" in self.data:
            return 13
        if "createdAt" in self.data or "delay" in self.data:
            return 12
        return 8


def _json_kind(value: Any) -> str:
    return {str: "string", int: "number", float: "number", bool: "true/false", list: "array"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _seconds_of(part: str) -> int:
    """One entry of a backoff list: whole seconds, finite (Laravel casts with ``(int)``)."""
    part = part.strip()
    try:
        return int(part)
    except ValueError:
        value = float(part)  # "1.5", "1e3"; ValueError for the rest
    if not math.isfinite(value):
        raise ValueError(f"{part!r} is not a number of seconds")
    return int(value)
