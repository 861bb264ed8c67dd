"""The ``laravel`` queue format's pure parts: PHP values through a Celery message's JSON
(both readers: ours and Kombu's), and ``write`` given any message (hypothesis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st
from kombu.utils import json as kombu_json

from kombu_sqlqueue.exceptions import MalformedMessage
from kombu_sqlqueue.store import NewJob
from laravel_bridge import ModelIdentifier, PhpEnum, PhpObject
from laravel_bridge.messages import LaravelFormat, from_message, register_json_types, to_message
from laravel_bridge.payload import Payload

register_json_types()

dates = st.builds(
    lambda ts, zone: datetime.fromtimestamp(ts, UTC).astimezone(zone),
    st.integers(0, 4_000_000_000),
    st.sampled_from([UTC, ZoneInfo("Europe/Paris"), timezone(timedelta(hours=5, minutes=30))]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    dates,
    st.builds(PhpEnum, st.just("App\\Enums\\Status"), st.sampled_from(["Paid", "Open"])),
    st.builds(
        ModelIdentifier,
        st.just("App\\Models\\User"),
        st.integers(1, 99),
        st.just(("posts",)),
        st.sampled_from([None, "mysql"]),
    ),
)
php_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(-5, 5)), children, max_size=3),
        st.builds(
            PhpObject,
            st.just("App\\Support\\Thing"),
            st.dictionaries(st.text(min_size=1, max_size=5), children, max_size=3),
        ),
    ),
    max_leaves=10,
)


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, datetime):
        return a == b and a.utcoffset() == b.utcoffset() and a.tzinfo == b.tzinfo
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, PhpObject):
        return a.class_name == b.class_name and same(a.properties, b.properties)
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(value=php_values)
def test_php_values_cross_a_celery_message_type_exact(value: Any) -> None:
    text = json.dumps(to_message(value))
    assert same(from_message(json.loads(text)), value)  # the format's reader (write)
    assert same(kombu_json.loads(text), value)  # Kombu's, as a Celery worker decodes a body


def test_a_dict_shaped_like_a_kombu_marker_stays_a_dict() -> None:
    value = {"__type__": "datetime", "__value__": "2024-01-01"}
    assert kombu_json.loads(json.dumps(to_message(value))) == value


FORMAT = LaravelFormat({})

messages = st.fixed_dictionaries(
    {},
    optional={
        "body": st.one_of(st.text(max_size=30), st.integers(), st.none()),
        "content-type": st.sampled_from(
            ["application/json", "application/x-python-serialize", None]
        ),
        "headers": st.one_of(
            st.none(),
            st.text(max_size=5),
            st.fixed_dictionaries(
                {},
                optional={
                    "task": st.one_of(st.text(max_size=12), st.integers(), st.none()),
                    "id": st.one_of(st.uuids().map(str), st.integers(), st.none()),
                    "retries": st.one_of(st.integers(-3, 300), st.text(max_size=3), st.none()),
                    "eta": st.one_of(st.text(max_size=10), st.none()),
                    "laravel": st.one_of(
                        st.none(),
                        st.text(max_size=3),
                        st.dictionaries(
                            st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers())
                        ),
                    ),
                },
            ),
        ),
        "properties": st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from(["body_encoding", "priority"]), st.text(max_size=6)),
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(
    message=messages,
    body=st.one_of(
        st.none(), st.just([[], {"label": "x"}, {}]), st.just([["a"], {}, {}]), st.just({"a": 1})
    ),
)
def test_write_refuses_what_it_cannot_hold_with_a_named_error(
    message: dict[str, Any], body: Any
) -> None:
    if body is not None:
        message = {**message, "body": json.dumps(body)}
    try:
        job = FORMAT.write("php", message)
    except MalformedMessage:
        return
    assert isinstance(job, NewJob) and job.queue == "php"
    assert Payload.parse(job.payload).uuid == (message.get("headers") or {}).get("id")


def test_send_task_of_a_well_formed_message_writes_a_laravel_payload() -> None:
    message = {
        "body": json.dumps([[], {"label": "x"}, {}]),
        "content-type": "application/json",
        "headers": {"task": "App\\Jobs\\Ping", "id": "u-1", "retries": 0},
        "properties": {},
    }
    job = FORMAT.write("php", message)
    payload = Payload.parse(job.payload)
    assert (payload.display_name, payload.uuid, job.attempts) == ("App\\Jobs\\Ping", "u-1", 0)
    assert payload.command().properties == {"label": "x"}
