"""Laravel's queue payload (the JSON in a ``jobs.payload`` column) and the job command inside it.

A payload built here for a given job is byte-identical to the one Laravel 8
writes (uuid aside): keys in Laravel's order, ``json_encode`` with
``JSON_UNESCAPED_UNICODE`` (``\\/`` escaped, UTF-8 raw, U+2028/U+2029 escaped).
Parsing keeps every key, known or not, so a payload re-encodes untouched.
"""

from __future__ import annotations

import json
import re
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from . import php_serialize
from .encryption import Encrypter
from .exceptions import DecryptError, PayloadError, PhpSerializeError
from .php_serialize import PhpObject, plain_name

#: The handler Laravel names in ``job`` for every queued command object.
CALL_QUEUED_HANDLER = "Illuminate\\Queue\\CallQueuedHandler@call"
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
MODEL_IDENTIFIER = "Illuminate\\Contracts\\Database\\ModelIdentifier"
CARBON_CLASSES = (
    "Carbon\\Carbon",
    "Carbon\\CarbonImmutable",
    "Illuminate\\Support\\Carbon",  # what Laravel's now() and today() return
    "DateTime",
    "DateTimeImmutable",
)

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

    @classmethod
    def from_php(cls, obj: PhpObject) -> ModelIdentifier:
        relations = obj.get("relations") or []
        rel = tuple(relations.values() if isinstance(relations, dict) else relations)
        return cls(obj.get("class"), obj.get("id"), rel, obj.get("connection"))

    def to_php(self) -> PhpObject:
        return PhpObject(
            MODEL_IDENTIFIER,
            {
                "class": self.class_name,
                "id": self.id,
                "relations": list(self.relations),
                "connection": self.connection,
            },
        )


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
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise PayloadError(f"unknown time zone {name!r} in a date") from exc


def date_from_php(obj: PhpObject) -> datetime:
    """An aware ``datetime`` from a serialized Carbon/DateTime object."""
    try:
        naive = datetime.strptime(obj.get("date"), "%Y-%m-%d %H:%M:%S.%f")
        return naive.replace(tzinfo=_zone(int(obj.get("timezone_type")), obj.get("timezone")))
    except (TypeError, ValueError, AttributeError) as exc:
        raise PayloadError(f"bad serialized date {obj.plain()!r}: {exc}") from exc


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


def to_python(value: Any) -> Any:
    """A friendlier view of a PHP value: dates → ``datetime``, models → ``ModelIdentifier``."""
    if isinstance(value, PhpObject):
        if value.class_name in CARBON_CLASSES:
            return date_from_php(value)
        if value.class_name == MODEL_IDENTIFIER:
            return ModelIdentifier.from_php(value)
        return value
    if isinstance(value, list):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    return value


def to_php(value: Any) -> Any:
    """The PHP value for a Python one: ``datetime`` → Carbon, ``ModelIdentifier`` → its object."""
    if isinstance(value, datetime):
        return date_to_php(value)
    if isinstance(value, ModelIdentifier):
        return value.to_php()
    if isinstance(value, (list, tuple)):
        return [to_php(v) for v in value]
    if isinstance(value, dict):
        return {k: to_php(v) for k, v in value.items()}
    return value


# -- the command -------------------------------------------------------------------------


@dataclass
class JobCommand:
    """A queued job object (``data.command``): class, own properties, Queueable settings."""

    obj: PhpObject

    @property
    def class_name(self) -> str:
        return self.obj.class_name

    @property
    def properties(self) -> dict[str, Any]:
        """The job's own properties by plain name as Python values (Queueable ones excluded)."""
        return {
            name: to_python(value)
            for name, value in self.obj.plain().items()
            if name not in QUEUEABLE_PROPERTIES and name != "job"
        }

    def queueable(self, name: str) -> Any:
        """One of Laravel's Queueable properties (``queue``, ``delay``, ``chained`` …)."""
        if name not in QUEUEABLE_PROPERTIES:
            raise KeyError(f"{name!r} is not a Queueable property")
        return to_python(self.obj.get(name))

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
        return [JobCommand.loads(item) for item in items]

    @classmethod
    def loads(cls, data: bytes | str) -> JobCommand:
        """Decode a serialized command; raise :class:`PayloadError` if it is not an object."""
        try:
            value = php_serialize.loads(data)
        except PhpSerializeError as exc:
            raise PayloadError(f"the command is not PHP-serialized data: {exc}") from exc
        if not isinstance(value, PhpObject):
            raise PayloadError(f"the command is a {type(value).__name__}, not a PHP object")
        return cls(value)

    def dumps(self) -> bytes:
        return php_serialize.dumps(self.obj)

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
    def parse(cls, raw: str | bytes) -> Payload:
        """Parse a ``payload`` column; :class:`PayloadError` says what is wrong."""
        try:
            data = json.loads(raw)
        except (ValueError, TypeError) as exc:
            raise PayloadError(f"payload is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise PayloadError(f"payload is JSON {type(data).__name__}, not an object")
        if not isinstance(data.get("job"), str):
            raise PayloadError("payload has no 'job' (the handler Laravel calls)")
        return cls(data)

    def to_json(self) -> str:
        """The payload as Laravel's ``json_encode`` writes it."""
        return laravel_json(self.data)

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
        """Seconds to wait before each retry (Laravel writes ``"7"`` or ``"1,5,10"``)."""
        raw = self.data.get("backoff")
        if raw is None or raw == "":
            return []
        try:
            return [int(float(part)) for part in str(raw).split(",")]
        except ValueError as exc:
            raise PayloadError(f"bad backoff {raw!r} in the payload") from exc

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
        return self.data.get("createdAt")

    @property
    def is_encrypted(self) -> bool:
        """Laravel's rule: a command not starting with ``O:`` is encrypted."""
        text = self.command_text
        return isinstance(text, str) and not text.startswith("O:")

    def command(self, encrypter: Encrypter | None = None) -> JobCommand:
        """The decoded job object; an encrypted command needs the app's ``encrypter``."""
        text = self.command_text
        if not isinstance(text, str):
            raise PayloadError("payload has no data.command string")
        if not self.is_encrypted:
            try:
                raw = text.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError as exc:  # a lone surrogate escaped in the JSON
                raise PayloadError(f"data.command is not text PHP wrote: {exc}") from exc
            return JobCommand.loads(raw)
        if encrypter is None:
            raise PayloadError("the command is encrypted; pass the app key's Encrypter")
        try:
            inner = encrypter.decrypt(text)  # Laravel encrypts serialize(serialize($job))
        except DecryptError:
            raise
        if not isinstance(inner, (str, bytes)):
            raise PayloadError("the decrypted command is not a serialized object")
        return JobCommand.loads(inner)

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
    ) -> Payload:
        """The payload Laravel's ``Queue::createObjectPayload`` writes for ``command``."""
        serialized = command.dumps()
        if encrypter is not None:
            text = encrypter.encrypt(serialized.decode("utf-8", "surrogateescape"))
        else:
            text = serialized.decode("utf-8", "surrogateescape")
        if isinstance(retry_until, datetime):
            retry_until = int(retry_until.timestamp())
        return cls(
            {
                "uuid": uuid or str(uuid_module.uuid4()),
                "displayName": display_name or command.class_name,
                "job": CALL_QUEUED_HANDLER,
                "maxTries": max_tries,
                "maxExceptions": max_exceptions,
                "failOnTimeout": fail_on_timeout,
                "backoff": _backoff_text(backoff),
                "timeout": timeout,
                "retryUntil": retry_until,
                "data": {"commandName": command.class_name, "command": text},
            }
        )
