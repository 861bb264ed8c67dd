"""A Kombu message's stored form: the row written on publish, the message read back.

Writing: :func:`new_job` maps a message Kombu publishes to the row it is stored as
(priority, Celery's ``eta`` as a delay, time to live, the task id as the row's uuid).

Reading: a stored row is checked before anything else touches it.

Kombu's ``virtual.Message`` and Celery's worker read a message's fields without
checking their types: a ``headers`` that is a string, a ``body`` that is a number,
a ``body`` that is not the base64 its ``body_encoding`` says, a Celery task body that
is not ``[args, kwargs, embed]`` — each raised out of the consumer's loop and killed
the worker. :func:`read_message` checks every field they rely on and raises
:class:`~kombu_sqlqueue.exceptions.MalformedMessage` with a reason a person can act
on instead; the channel dead-letters the row with that reason.

Pure: no SQL and no database; Kombu only for its codecs. The checks cost a few
microseconds per message (the body of a JSON message is parsed once more here).
"""

from __future__ import annotations

import bz2
import json
import logging
import lzma
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kombu import compression as kombu_compression
from kombu import serialization as kombu_serialization

from .exceptions import MalformedMessage, PayloadLimitExceeded
from .limits import MAX_JSON_DEPTH, json_depth_exceeds
from .store import ClaimedJob, NewJob, Receipt
from .store.controls import check_concurrency_key

logger = logging.getLogger(__name__)

#: AMQP's delivery_mode of a message a broker may lose on a crash.
TRANSIENT = 1

#: The most bytes a compressed body may decompress to.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

#: Decompressors that can stop at a size, by Kombu's compression content type.
_BOUNDED: dict[str, Any] = {
    "application/x-gzip": zlib.decompressobj,  # Kombu's "zlib"/"gzip": the zlib format
    "application/x-bz2": bz2.BZ2Decompressor,
    "application/x-lzma": lzma.LZMADecompressor,
}

#: Kombu clamps message priorities to 0..9 (``virtual.Channel.max_priority``), default 0.
MAX_PRIORITY = 9

#: Content types whose body is checked here (what Celery and Kombu send by default).
#: Others (pickle, yaml, msgpack) are the consumer's to decode: Celery refuses those it
#: does not accept by itself, and unpickling here would run the payload's code.
JSON_CONTENT_TYPES = frozenset({"application/json"})


# -- writing -------------------------------------------------------------------------


def eta_delay(headers: dict[str, Any] | None, now: datetime | None = None) -> float:
    """Seconds until a Celery message's ``eta`` header (0 when absent or past).

    A naive ``eta`` is taken as UTC, as Celery writes UTC unless told otherwise.
    """
    eta = (headers or {}).get("eta")
    if not eta:
        return 0.0
    try:
        when = eta if isinstance(eta, datetime) else datetime.fromisoformat(str(eta))
    except ValueError:
        logger.warning("ignoring unparsable eta header %r; delivering now", eta)
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())


def time_to_live(properties: dict[str, Any], queue_ttl: float | None) -> float | None:
    """Seconds a message is kept: the shorter of its ``expiration`` property (AMQP:
    milliseconds, as a string) and its queue's x-message-ttl (``queue_ttl``, seconds)."""
    ttl = queue_ttl
    expiration = properties.get("expiration")
    if expiration is not None:
        try:
            own = float(expiration) / 1000.0
        except (TypeError, ValueError):
            logger.warning("ignoring unparsable expiration property %r", expiration)
        else:
            ttl = own if ttl is None else min(ttl, own)
    return ttl


def stored_priority(properties: dict[str, Any], order: str = "high_first") -> int:
    """The message's priority (clamped to 0..9 as Kombu does) in contract order (higher
    first); ``low_first`` is Redis's order (0 first), stored reversed."""
    try:
        priority = max(min(int(properties["priority"]), MAX_PRIORITY), 0)
    except (TypeError, ValueError, KeyError):
        priority = 0
    return MAX_PRIORITY - priority if order == "low_first" else priority


def new_job(
    queue: str,
    message: dict[str, Any],
    *,
    max_attempts: int,
    queue_ttl: float | None = None,
    priority_order: str = "high_first",
) -> NewJob:
    """The row a message Kombu publishes to ``queue`` is stored as."""
    headers = message.get("headers") or {}
    properties = message.get("properties") or {}
    task_id = headers.get("id") or properties.get("correlation_id")
    # A Celery task's ``expiration`` is its ``expires``: the worker that receives it late
    # marks it REVOKED in the result backend, as on Redis. Discarded here, unseen, it would
    # stay PENDING forever. Other messages (replies, events, Kombu's) expire here.
    own = {} if is_celery_task(headers) else properties
    return NewJob(
        queue=queue,
        payload=json.dumps(message).encode(),
        priority=stored_priority(properties, priority_order),
        delay=eta_delay(headers),
        max_attempts=max_attempts,
        uuid=str(task_id) if task_id else None,
        expires_in=time_to_live(own, queue_ttl),
        concurrency_key=check_concurrency_key(headers.get("concurrency_key")),
    )


def dedupe_identity(message: dict[str, Any]) -> str | None:
    """What a publish is deduplicated by: the header ``dedupe_key`` a producer set, else a
    Celery task's id; None for a message with neither (never deduplicated)."""
    headers = message.get("headers") or {}
    key = headers.get("dedupe_key")
    if isinstance(key, str) and key:
        return key
    task_id = headers.get("id")
    if is_celery_task(headers) and isinstance(task_id, str) and task_id:
        return task_id
    return None


def is_celery_task(headers: dict[str, Any]) -> bool:
    """A Celery task message (protocol 2: the task's name and id are headers)."""
    return bool(headers.get("task")) and bool(headers.get("id"))


def is_transient(message: dict[str, Any]) -> bool:
    """A message a broker may lose on a crash (Celery's events and control messages)."""
    return bool((message.get("properties") or {}).get("delivery_mode") == TRANSIENT)


# -- reading -------------------------------------------------------------------------


def delivery_tag(receipt: Receipt) -> str:
    """The Kombu delivery tag of one delivery: its row id and reservation token."""
    return f"{receipt.job_id}:{receipt.token}"


def receipt_of(tag: str) -> Receipt:
    """The receipt a :func:`delivery_tag` names."""
    job_id, _, token = tag.partition(":")
    return Receipt(int(job_id), token)


#: The ``delivery_info`` key naming the queue a message was delivered from (Kombu's SQS
#: transport says ``sqs_queue`` the same way): a task reads it in ``properties`` — what
#: Celery hands a prefork child — to find the table its delivery lives in (``complete()``).
QUEUE_INFO = "sqlqueue_queue"


def delivery(job: ClaimedJob, message: dict[str, Any]) -> dict[str, Any]:
    """``message`` (read from ``job`` by :func:`read_message`) as a delivery: its tag names
    the row and its reservation; ``redelivered`` when an earlier delivery may have run;
    :data:`QUEUE_INFO` the queue."""
    properties = message["properties"]
    properties["delivery_tag"] = delivery_tag(job.receipt)
    redelivered = job.attempts > 1
    info = properties.get("delivery_info")
    if not isinstance(info, dict):  # null or absent: Kombu reads either as {}
        info = properties["delivery_info"] = {}
    info["redelivered"] = redelivered
    info[QUEUE_INFO] = job.queue
    message["redelivered"] = redelivered
    return message


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _require(value: Any, kinds: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kinds):
        names = kinds if isinstance(kinds, tuple) else (kinds,)
        wanted = " or ".join("null" if k is type(None) else k.__name__ for k in names)
        raise MalformedMessage(f"{what} is {_type_name(value)}, not {wanted}")


def parse_json(data: bytes | str, what: str) -> Any:
    """JSON ``data`` as Python values, within :data:`MAX_JSON_DEPTH`."""
    if json_depth_exceeds(data):
        raise PayloadLimitExceeded(
            f"{what} nests arrays/objects deeper than {MAX_JSON_DEPTH} levels (the limit)"
        )
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedMessage(f"{what} is not JSON: {exc}") from exc


def read_message(payload: bytes, body_codecs: Mapping[str, Any]) -> dict[str, Any]:
    """The Kombu message stored in ``payload``, checked for all that Kombu and Celery use.

    ``body_codecs`` are the channel's ``body_encoding`` codecs (Kombu's ``base64``).
    Raises :class:`MalformedMessage` (or :class:`PayloadLimitExceeded`) naming the
    first field that is wrong.
    """
    message = parse_json(payload, "payload")
    _require(message, dict, "payload")
    properties = message.get("properties")
    if properties is None:
        raise MalformedMessage("payload is JSON but not a Kombu message (no properties)")
    _require(properties, dict, "properties")
    _require(properties.get("delivery_info"), (dict, type(None)), "properties.delivery_info")
    headers = message.get("headers")
    _require(headers, (dict, type(None)), "headers")
    for key in ("content-type", "content-encoding"):
        _require(message.get(key), (str, type(None)), key)
    raw = _body_bytes(message, properties, body_codecs)
    compression = (headers or {}).get("compression")
    if compression is not None:
        _require(compression, str, "headers.compression")
        raw = _decompress(raw, compression)
    body = _decoded_body(message, raw)
    if headers and "task" in headers:
        _check_celery_task(headers, body, message.get("content-type"))
    elif isinstance(body, dict) and "task" in body:
        _check_celery_task_v1(body)
    checked: dict[str, Any] = message
    return checked


def _body_bytes(
    message: dict[str, Any], properties: dict[str, Any], body_codecs: Mapping[str, Any]
) -> bytes:
    """The body as Kombu's ``virtual.Message`` will decode it (``body_encoding``)."""
    body = message.get("body")
    _require(body, (str, type(None)), "body")
    if not body:
        return b""
    encoding = properties.get("body_encoding")
    _require(encoding, (str, type(None)), "properties.body_encoding")
    if encoding and encoding.lower() != "utf-8":
        codec = body_codecs.get(encoding)
        if codec is None:
            known = ", ".join(sorted(body_codecs)) or "none"
            raise MalformedMessage(f"body_encoding {encoding!r} is unknown (known: {known})")
        try:
            decoded = codec.decode(body)
        except Exception as exc:  # binascii.Error, UnicodeEncodeError …
            raise MalformedMessage(f"body is not valid {encoding}: {exc}") from exc
        as_bytes: bytes = decoded.encode() if isinstance(decoded, str) else bytes(decoded)
        return as_bytes
    text: str = body
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (\ud800) in the JSON text
        raise MalformedMessage(f"body is not encodable as UTF-8: {exc}") from exc


def _decompress(raw: bytes, compression: str) -> bytes:
    """The body decompressed as Kombu will, refused past MAX_DECOMPRESSED_BYTES (a small
    row that inflates to gigabytes would take the consumer's memory, again at every try)."""
    make = _BOUNDED.get(kombu_compression._aliases.get(compression, compression))
    try:
        if make is not None:
            head = make().decompress(raw, MAX_DECOMPRESSED_BYTES + 1)
            if len(head) > MAX_DECOMPRESSED_BYTES:
                raise PayloadLimitExceeded(
                    f"body decompresses ({compression}) past {MAX_DECOMPRESSED_BYTES:,} bytes "
                    "(the limit)"
                )
        decompressed: bytes = kombu_compression.decompress(raw, compression)  # type: ignore[no-untyped-call]
    except PayloadLimitExceeded:
        raise
    except Exception as exc:  # any codec's error: the body cannot be read
        raise MalformedMessage(f"body cannot be decompressed ({compression}): {exc}") from exc
    return decompressed


def _decoded_body(message: dict[str, Any], raw: bytes) -> Any:
    """The decoded body of a JSON message (None for other content types, or no body)."""
    if message.get("content-type") not in JSON_CONTENT_TYPES or not raw:
        return None
    encoding = message.get("content-encoding") or "utf-8"
    if json_depth_exceeds(raw):
        raise PayloadLimitExceeded(
            f"body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels (the limit)"
        )
    try:
        if encoding.lower() in ("utf-8", "utf8") and b'"__type__"' not in raw:
            return json.loads(raw.decode("utf-8"))  # what Kombu's reader gives, faster
        # Otherwise exactly as Kombu decodes it: its text decoding, its object hooks.
        return kombu_serialization.loads(raw, "application/json", encoding)  # type: ignore[no-untyped-call]
    except Exception as exc:  # UnicodeDecodeError, ValueError, DecodeError, a hook's error
        raise MalformedMessage(f"body is not readable JSON ({encoding}): {exc}") from exc


def _check_task_fields(fields: dict[str, Any], where: str) -> None:
    """The fields Celery's ``Request`` reads (protocol 2 headers, or a protocol 1 body)."""
    _require(fields["task"], str, f"{where}.task")
    _require(fields.get("id"), str, f"{where}.id (the task id)")
    _require(fields.get("shadow"), (str, type(None)), f"{where}.shadow")
    _require(fields.get("retries"), (int, type(None)), f"{where}.retries")
    for key in ("eta", "expires"):
        _check_date(fields.get(key), f"{where}.{key}")
    timelimit = fields.get("timelimit")
    if timelimit:
        ok = isinstance(timelimit, list | tuple) and len(timelimit) == 2
        if not ok or not all(
            v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in timelimit
        ):
            raise MalformedMessage(
                f"{where}.timelimit is {timelimit!r}, not [soft, hard] seconds (or null)"
            )


def _check_date(value: Any, what: str) -> None:
    """Celery parses a date string itself (refusing what it cannot parse), but crashes on
    an empty or non-string value, and on a date at the edge of the calendar that its
    time-zone arithmetic carries past year 1 or 9999."""
    if value is None:
        return
    _require(value, str, what)
    if value == "":
        raise MalformedMessage(f"{what} is an empty string, not a date or null")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return  # Celery's own parser decides, and refuses it with InvalidTaskError
    try:
        when - timedelta(days=2)
        when + timedelta(days=2)
    except OverflowError:
        raise MalformedMessage(f"{what} {value!r} is too near the end of the calendar") from None


def _check_celery_task(headers: dict[str, Any], body: Any, content_type: Any) -> None:
    """Celery task message protocol 2: what ``celery.worker.request.Request`` reads."""
    _check_task_fields(headers, "headers")
    if not content_type:
        # Kombu hands such a body over undecoded (bytes): Celery cannot unpack it.
        raise MalformedMessage("Celery task message has no content-type")
    if content_type not in JSON_CONTENT_TYPES:
        return
    if not isinstance(body, list) or len(body) != 3:
        raise MalformedMessage(
            f"Celery task body is {_type_name(body)}"
            f"{f' of {len(body)} items' if isinstance(body, list) else ''}, "
            "not [args, kwargs, embed]"
        )
    args, kwargs, embed = body
    _require(args, list, "Celery task body args")
    _require(kwargs, dict, "Celery task body kwargs")
    _require(embed, (dict, type(None)), "Celery task body embed")


def _check_celery_task_v1(body: dict[str, Any]) -> None:
    """Celery task message protocol 1 (the task in the body)."""
    _check_task_fields(body, "body")
    _require(body.get("args", []), list, "body.args")
    _require(body.get("kwargs", {}), dict, "body.kwargs")


__all__ = [
    "JSON_CONTENT_TYPES",
    "MAX_PRIORITY",
    "TRANSIENT",
    "delivery",
    "delivery_tag",
    "eta_delay",
    "is_transient",
    "new_job",
    "parse_json",
    "read_message",
    "receipt_of",
    "stored_priority",
    "time_to_live",
]
