"""A stored job as a person reads it: what will run and with what, abbreviated.

A row of contract v1's table holds a Kombu message (a Celery task: its name, args and
kwargs) or, for the Laravel bridge, a Laravel payload; a row of Laravel's table holds a
Laravel payload (its class and properties). A row neither reads as is shown as such,
with the reason: summarizing never raises.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass
from typing import Any

from kombu.transport.virtual.base import Base64

from ..envelope import read_message
from ..exceptions import MalformedMessage

_SHORT = reprlib.Repr()
_SHORT.maxstring = 40
_SHORT.maxother = 40
_SHORT.maxlevel = 3
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = 6
_CODECS = {"base64": Base64()}


def short(value: Any) -> str:
    """``repr(value)``, abbreviated."""
    return _SHORT.repr(value)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """``kind``: ``celery``, ``kombu``, ``laravel`` or ``unreadable``; ``name``: the task or
    class; ``detail``: its arguments (or content type and body; or why it is unreadable)."""

    kind: str
    name: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail}


def summarize(payload: bytes | str, layout: str = "askr") -> JobSummary:
    """What ``payload`` (a stored row's) runs, for ``peek`` and ``failed show``."""
    if layout == "askr":
        raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
        try:
            return _kombu(read_message(raw, _CODECS))
        except MalformedMessage as exc:
            kombu_error = str(exc)
        except Exception as exc:  # a codec's own error: still only a summary
            kombu_error = f"{type(exc).__name__}: {exc}"
        laravel = _laravel(payload)
        if laravel.kind == "laravel":
            return laravel
        return JobSummary("unreadable", "-", kombu_error)
    return _laravel(payload)


def _kombu(message: dict[str, Any]) -> JobSummary:
    headers = message.get("headers") or {}
    body = message.get("body")
    decoded = _body(message)
    if "task" in headers:  # Celery's protocol 2: [args, kwargs, embed]
        args, kwargs = ([], {})
        if isinstance(decoded, list) and len(decoded) >= 2:
            args, kwargs = decoded[0], decoded[1]
        detail = f"args={short(args)} kwargs={short(kwargs)}"
        return JobSummary("celery", str(headers["task"]), detail)
    if isinstance(decoded, dict) and "task" in decoded:  # protocol 1
        return JobSummary(
            "celery",
            str(decoded["task"]),
            f"args={short(decoded.get('args'))} kwargs={short(decoded.get('kwargs'))}",
        )
    content = message.get("content-type") or "-"
    shown = decoded if decoded is not None else body
    return JobSummary("kombu", str(content), short(shown))


def _body(message: dict[str, Any]) -> Any:
    """The JSON body of a message, decoded; None for other content or an unreadable body."""
    if message.get("content-type") != "application/json":
        return None
    body = message.get("body") or ""
    properties = message.get("properties") or {}
    try:
        if properties.get("body_encoding") == "base64":
            body = _CODECS["base64"].decode(body)  # type: ignore[no-untyped-call]
        if (message.get("headers") or {}).get("compression"):
            return None
        return json.loads(body)
    except Exception:  # shown as stored instead
        return None


def _laravel(payload: bytes | str) -> JobSummary:
    from laravel_bridge.exceptions import LaravelBridgeError
    from laravel_bridge.payload import Payload

    try:
        parsed = Payload.parse(payload)
    except LaravelBridgeError as exc:
        return JobSummary("unreadable", "-", str(exc))
    name = parsed.display_name or parsed.job
    if parsed.is_encrypted:
        return JobSummary("laravel", name, "(encrypted: needs APP_KEY)")
    try:
        properties = parsed.command().properties
    except Exception as exc:  # a command PHP wrote that we cannot read: still a summary
        return JobSummary("laravel", name, f"(command unreadable: {exc})")
    return JobSummary("laravel", name, short(properties))
