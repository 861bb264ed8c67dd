"""A Celery task message's side of a Laravel job: PHP values in JSON, the body and headers.

The ``laravel`` queue format (:mod:`laravel_bridge.messages`) reads a Laravel job into the
message :func:`task_message` builds and reads a task sent to a Laravel queue back with
:func:`task_arguments`. Values outside JSON travel as Kombu JSON's ``{"__type__": …,
"__value__": …}`` objects, under this module's markers, registered with Kombu's decoder
when the transport loads the format (:func:`register_json_types`).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from reprlib import Repr
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kombu.utils import json as kombu_json

from kombu_sqlqueue.exceptions import MalformedMessage
from kombu_sqlqueue.store import ClaimedJob

from . import celery_signals
from .payload import ModelIdentifier
from .php_serialize import PhpEnum, PhpObject, PhpReference, PhpSerializable

#: The message header holding Laravel's metadata of a delivered job.
HEADER = celery_signals.HEADER
#: Kombu JSON markers of the PHP values that JSON cannot hold.
DATE, MODEL, ENUM, OBJECT, ARRAY, SERIALIZABLE, REFERENCE = (
    "php.date",
    "laravel.model",
    "php.enum",
    "php.object",
    "php.array",
    "php.serializable",
    "php.reference",
)
#: The embed part of a task body (no callbacks, chain or chord).
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
brief = Repr()  # argsrepr/kwargsrepr as Celery shows them: short
brief.maxstring = brief.maxother = 100
brief.maxlist = brief.maxdict = 8


def _tag(marker: str, value: Any) -> dict[str, Any]:
    return {"__type__": marker, "__value__": value}


def to_message(value: Any) -> Any:
    """A payload-model value as JSON a Celery message carries: JSON's own types as they are,
    the rest (dates, models, enums, PHP objects, arrays with non-text keys) tagged."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [to_message(v) for v in value]
    if isinstance(value, tuple):
        return [to_message(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and set(value) != {"__type__", "__value__"}:
            return {k: to_message(v) for k, v in value.items()}
        return _tag(ARRAY, [[k, to_message(v)] for k, v in value.items()])
    if isinstance(value, datetime):
        zone = getattr(value.tzinfo, "key", None)
        return _tag(DATE, {"iso": value.isoformat(), "zone": zone})
    if isinstance(value, ModelIdentifier):
        return _tag(
            MODEL,
            {
                "class": value.class_name,
                "id": to_message(value.id),
                "relations": list(value.relations),
                "connection": value.connection,
                "collection_class": value.collection_class,
            },
        )
    if isinstance(value, PhpEnum):
        return _tag(ENUM, {"class": value.class_name, "case": value.case})
    if isinstance(value, PhpObject):
        props = [[k, to_message(v)] for k, v in value.properties.items()]
        return _tag(OBJECT, {"class": value.class_name, "properties": props})
    if isinstance(value, PhpSerializable):
        data = base64.b64encode(value.data).decode("ascii")
        return _tag(SERIALIZABLE, {"class": value.class_name, "data": data})
    if isinstance(value, PhpReference):
        return _tag(REFERENCE, to_message(value.value))
    raise MalformedMessage(f"a {type(value).__name__} cannot travel in a Laravel job")


def _decode_date(value: Any) -> datetime:
    when = datetime.fromisoformat(value["iso"])
    zone = value.get("zone")
    if zone:
        try:
            return when.astimezone(ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError):
            return when
    return when


def _decode_model(value: Any) -> ModelIdentifier:
    return ModelIdentifier(
        value["class"],
        value["id"],
        tuple(value.get("relations") or ()),
        value.get("connection"),
        value.get("collection_class"),
    )


def _decode_object(value: Any) -> PhpObject:
    return PhpObject(value["class"], {k: v for k, v in value["properties"]})


_DECODERS: dict[str, Callable[[Any], Any]] = {
    DATE: _decode_date,
    MODEL: _decode_model,
    ENUM: lambda v: PhpEnum(v["class"], v["case"]),
    OBJECT: _decode_object,
    ARRAY: lambda v: {k: item for k, item in v},
    SERIALIZABLE: lambda v: PhpSerializable(v["class"], base64.b64decode(v["data"])),
    REFERENCE: PhpReference,
}


def from_message(value: Any) -> Any:
    """Python values from a message's JSON (as :func:`to_message` and Kombu's own
    ``datetime``/``date``/``decimal``/``uuid`` markers write them), for a message whose body
    was not decoded by Kombu."""
    if isinstance(value, list):
        return [from_message(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__type__", "__value__"}:
            inner = from_message(value["__value__"])
            decoder = _DECODERS.get(value["__type__"]) or kombu_json._decoders.get(
                value["__type__"]
            )
            if decoder is None:
                raise MalformedMessage(f"unknown JSON type {value['__type__']!r} in the message")
            return decoder(inner)
        return {k: from_message(v) for k, v in value.items()}
    return value


_registered = False
_register_lock = threading.Lock()


def register_json_types() -> None:
    """Teach Kombu's JSON these values both ways: a consumer decodes the markers, a producer
    encodes :class:`ModelIdentifier`, :class:`PhpEnum`, :class:`PhpObject` …"""
    global _registered
    with _register_lock:
        if _registered:
            return
        kinds: list[tuple[type, str]] = [
            (ModelIdentifier, MODEL),
            (PhpEnum, ENUM),
            (PhpObject, OBJECT),
            (PhpSerializable, SERIALIZABLE),
            (PhpReference, REFERENCE),
            # Written only by this module (a Python datetime goes as Kombu's own "datetime",
            # a dict with text keys as a dict): decoders, under a type nobody has.
            (_DateMarker, DATE),
            (_ArrayMarker, ARRAY),
        ]
        for kind, marker in kinds:
            kombu_json.register_type(kind, marker, _inner, _DECODERS[marker])
        _registered = True


class _DateMarker:
    pass


class _ArrayMarker:
    pass


def _inner(value: Any) -> Any:
    """What Kombu's JSON wraps in ``{"__type__": marker, "__value__": …}`` for ``value``."""
    return to_message(value)["__value__"]


def task_arguments(queue: str, message: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A task message's ``args`` and ``kwargs``, PHP values decoded (:func:`from_message`)."""
    if message.get("content-type") != "application/json":
        raise MalformedMessage(
            f"queue {queue!r} holds Laravel jobs: a task sent there must be JSON "
            f"(task_serializer='json'), not {message.get('content-type')!r}"
        )
    if (message.get("headers") or {}).get("compression"):
        raise MalformedMessage(f"queue {queue!r} holds Laravel jobs: send them uncompressed")
    body = message.get("body") or ""
    properties = message.get("properties")
    encoding = properties.get("body_encoding") if isinstance(properties, Mapping) else None
    try:
        raw = base64.b64decode(body) if encoding == "base64" else str(body).encode("utf-8")
        decoded = from_message(json.loads(raw))
    except (ValueError, TypeError, KeyError) as exc:
        raise MalformedMessage(f"the task's body cannot be read: {exc}") from exc
    if (
        not isinstance(decoded, list)
        or len(decoded) != 3
        or not isinstance(decoded[0], list)
        or not isinstance(decoded[1], dict)
    ):
        raise MalformedMessage("the task's body is not Celery's [args, kwargs, embed]")
    return decoded[0], decoded[1]


def task_message(
    name: str,
    task_id: str,
    job: ClaimedJob,
    args: list[Any],
    kwargs: dict[str, Any],
    meta: dict[str, Any],
    timeout: int | None,
) -> dict[str, Any]:
    """The Celery task message (protocol 2) of a claimed Laravel job: task ``name``, its
    ``args``/``kwargs`` as JSON, Laravel's ``meta`` in the :data:`HEADER` header, its
    ``timeout`` as the soft time limit."""
    try:
        body = json.dumps([to_message(args), to_message(kwargs), EMBED])
    except (MalformedMessage, ValueError, RecursionError) as exc:
        raise MalformedMessage(f"the job's values cannot be a Celery message: {exc}") from exc
    headers = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": max(0, job.attempts - 1),
        # [hard, soft]: Laravel's timeout is the soft limit, raised in the task (so its
        # failure is settled by Laravel's rules), the hard one a grace period later.
        "timelimit": [
            timeout + celery_signals.HARD_LIMIT_GRACE if timeout else None,
            timeout or None,
        ],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": brief.repr(args),
        "kwargsrepr": brief.repr(kwargs),
        "origin": f"laravel:{job.queue}",
        "ignore_result": False,
        HEADER: meta,
    }
    return {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "reply_to": None,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": job.queue},
            "priority": 0,
        },
    }
