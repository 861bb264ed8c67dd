"""A stored job as a person reads it: what will run and with what, abbreviated.

A row of contract v1's table holds a Kombu message (a Celery task: its name, args and
kwargs) or a payload of another runtime that an installed layout reads; a row of that
layout's own table, its payload (the layout summarizes it). A row nothing reads is shown
as such, with the reason: summarizing never raises.
"""

from __future__ import annotations

import json
from typing import Any

from kombu.transport.virtual.base import Base64

from ..envelope import read_message
from ..exceptions import MalformedMessage
from ..store.layouts import CONTRACT_LAYOUT, JobSummary, installed_layouts, short, table_layout

__all__ = ["JobSummary", "short", "summarize"]

_CODECS = {"base64": Base64()}


def summarize(payload: bytes | str, layout: str = CONTRACT_LAYOUT) -> JobSummary:
    """What ``payload`` (a stored row's) runs, for ``peek`` and ``failed show``: on
    contract v1's tables a Kombu message, or else a payload an installed layout reads (a
    package's worker may keep its own payloads there); on another layout's, that layout's."""
    if layout != CONTRACT_LAYOUT:
        return table_layout(layout).summarize(payload)
    raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    try:
        return _kombu(read_message(raw, _CODECS))
    except MalformedMessage as exc:
        kombu_error = str(exc)
    except Exception as exc:  # a codec's own error: still only a summary
        kombu_error = f"{type(exc).__name__}: {exc}"
    for other in installed_layouts():
        found = other.summarize(payload)
        if found.kind != "unreadable":
            return found
    return JobSummary("unreadable", "-", kombu_error)


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
