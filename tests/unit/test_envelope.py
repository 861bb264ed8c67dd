"""Reading stored rows as Kombu messages (``kombu_sqlqueue.envelope``): no database.

The property tests hold the reader to its promise: a row it accepts is one that
Kombu's ``virtual.Message`` and Celery's worker (``Request``) read without raising
anything but the errors Celery itself handles; a row it refuses is refused with
:class:`MalformedMessage`, never another exception.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import InvalidTaskError
from celery.worker.request import Request
from celery.worker.strategy import proto1_to_proto2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.transport.virtual import Channel as VirtualChannel

from kombu_sqlqueue.envelope import (
    delivery,
    new_job,
    read_message,
    stored_priority,
    time_to_live,
)
from kombu_sqlqueue.exceptions import MalformedMessage, PayloadLimitExceeded
from kombu_sqlqueue.limits import MAX_JSON_DEPTH, json_depth_exceeds
from kombu_sqlqueue.store import ClaimedJob

CODECS = VirtualChannel.codecs
# Not UTC: Celery's time-zone arithmetic on eta/expires is part of what must not crash.
APP = Celery("envelope_tests", set_as_current=False)
APP.conf.timezone = "America/New_York"


@APP.task(name="t.add", shared=False)
def add(x: int, y: int) -> int:
    return x + y


def celery_message(args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> dict:
    """A task message exactly as Celery publishes it and Kombu's virtual channel stores it."""
    task = APP.amqp.as_task_v2("6f1c0a54-1111-4c4e-9c39-6e0a3c1b0001", "t.add", args or [1, 2],
                               kwargs or {})  # fmt: skip
    body = json.dumps(task.body).encode()
    return {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": dict(task.headers),
        "properties": {
            "correlation_id": task.headers["id"],
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": "celery"},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": "x",
        },
    }


def stored(message: Any) -> bytes:
    return json.dumps(message).encode()


def test_a_real_celery_message_is_read() -> None:
    message = celery_message()
    assert read_message(stored(message), CODECS) == message


def test_a_plain_kombu_message_without_body_or_headers_is_read() -> None:
    assert read_message(b'{"properties": {}}', CODECS) == {"properties": {}}


def mutate(path: str, value: Any) -> dict:
    message = celery_message()
    node: Any = message
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return message


def body_of(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (mutate("body", "!!!not base64"), "body is not valid base64"),
        (mutate("body", 12345), "body is int, not str or null"),
        (mutate("body", body_of([[1, 2], {}])), r"Celery task body is list of 2 items"),
        (mutate("body", body_of("x")), "Celery task body is str"),
        (mutate("body", body_of([{}, {}, {}])), "Celery task body args is dict, not list"),
        (mutate("body", body_of([[], [], {}])), "Celery task body kwargs is list, not dict"),
        (mutate("body", base64.b64encode(b"\xff\xfe").decode()), "body is not readable JSON"),
        (mutate("body", base64.b64encode(b"{nope").decode()), "body is not readable JSON"),
        (mutate("headers", "a string"), "headers is str, not dict or null"),
        (mutate("headers.task", ["t.add"]), "headers.task is list, not str"),
        (mutate("headers.id", None), r"headers.id \(the task id\) is null, not str"),
        (mutate("headers.timelimit", [1, 2, 3]), "headers.timelimit is"),
        (mutate("headers.compression", "no-such-codec"), "cannot be decompressed"),
        (mutate("properties.body_encoding", "rot13"), "body_encoding 'rot13' is unknown"),
        (mutate("properties.delivery_info", [1]), "properties.delivery_info is list"),
        (mutate("properties", "x"), "properties is str, not dict"),
        (mutate("content-type", 7), "content-type is int"),
    ],
)
def test_a_wrong_field_is_refused_with_a_reason_naming_it(message: dict, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        read_message(stored(message), CODECS)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "payload is not JSON"),
        (b"\xff\xfe{}", "payload is not JSON"),
        (b"[1, 2]", "payload is list, not dict"),
        (b"42", "payload is int, not dict"),
        (b'{"body": "x"}', "no properties"),
    ],
)
def test_a_row_that_is_no_message_is_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        read_message(payload, CODECS)


def test_nesting_past_the_limit_is_refused_with_the_limit_named() -> None:
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(PayloadLimitExceeded, match=f"deeper than {MAX_JSON_DEPTH}"):
        read_message(b'{"properties": {}, "headers": {"x": ' + deep + b"}}", CODECS)
    # Far past what Python's JSON reader survives: still the named error.
    with pytest.raises(PayloadLimitExceeded):
        read_message(b"[" * 100_000, CODECS)
    nested: Any = [1]
    for _ in range(MAX_JSON_DEPTH + 5):
        nested = [nested]
    with pytest.raises(PayloadLimitExceeded, match="body nests"):
        read_message(stored(mutate("body", body_of([nested, {}, {}]))), CODECS)


def test_depth_check_counts_brackets_outside_strings_only() -> None:
    assert not json_depth_exceeds('"' + "[" * 500 + '"', limit=10)
    assert not json_depth_exceeds('["\\"[[[[[[[[[[[["]', limit=5)
    assert json_depth_exceeds("[" * 11, limit=10)
    assert not json_depth_exceeds("[" * 10 + "]" * 10 + "{}" * 50, limit=10)


# -- properties: what the reader accepts, Kombu and Celery can read --------------------

channel = Connection("memory://").default_channel
CELERY_HANDLED = (InvalidTaskError, ContentDisallowed, DecodeError)


def kombu_and_celery_read(message: dict[str, Any]) -> None:
    """What the channel, a Kombu consumer and Celery's worker do with a delivery."""
    message = delivery(ClaimedJob(1, "q", b"", 0, 2, 25, "tok", None), copy.deepcopy(message))
    msg = channel.Message(message, channel=channel)
    assert not msg.errors, msg.errors
    msg.accept = {"application/json"}
    try:
        headers = msg.headers
        if "task" in headers:  # protocol 2: celery.worker.strategy, then Request
            assert "args" not in msg.payload  # the strategy's test for a hybrid body
            Request(msg, app=APP, task=add, hostname="h")
        else:
            payload = msg.decode()
            if isinstance(payload, dict) and "task" in payload:  # protocol 1
                body, task_headers, decoded, utc = proto1_to_proto2(msg, payload)
                Request(msg, app=APP, task=add, hostname="h", body=body,
                        headers=task_headers, decoded=decoded, utc=utc)  # fmt: skip
    except CELERY_HANDLED:
        pass


def read_or_refuse(payload: bytes) -> None:
    try:
        message = read_message(payload, CODECS)
    except MalformedMessage:
        return
    kombu_and_celery_read(message)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)

FIELDS = [
    "body",
    "headers",
    "content-type",
    "content-encoding",
    "properties",
    "properties.body_encoding",
    "properties.delivery_info",
    "headers.task",
    "headers.id",
    "headers.timelimit",
    "headers.retries",
    "headers.compression",
    "headers.shadow",
    "headers.eta",
    "headers.expires",
    "headers.retries",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_any_field_of_a_real_message_replaced_by_any_value_is_read_or_refused(
    field: str, value: Any
) -> None:
    read_or_refuse(stored(mutate(field, value)))


@settings(max_examples=200, deadline=None)
@given(body=json_values)
def test_any_json_as_a_celery_task_body_is_read_or_refused(body: Any) -> None:
    read_or_refuse(stored(mutate("body", body_of(body))))


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=300) | json_values.map(stored))
def test_any_bytes_as_a_row_are_read_or_refused(payload: bytes) -> None:
    read_or_refuse(payload)


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(min_value=0, max_value=3000), opener=st.sampled_from(["[", '{"a":']))
def test_any_nesting_depth_is_read_or_refused_never_a_recursion_error(
    depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    inner = opener * depth + "1" + closer * depth
    read_or_refuse(stored(mutate("body", body_of([[], {}, {}])))[:-1] + b', "x": ' +
                   inner.encode() + b"}")  # fmt: skip
    read_or_refuse(stored(mutate("body", base64.b64encode(f"[[{inner}], {{}}, {{}}]".encode())
                                 .decode())))  # fmt: skip


# -- writing: the row a published message is stored as --------------------------------


def test_new_job_maps_priority_eta_ttl_and_task_id() -> None:
    message = celery_message()
    message["properties"].update(priority=7, expiration="1500")
    message["headers"]["eta"] = "2999-01-01T00:00:00+00:00"
    job = new_job("q", message, max_attempts=3, queue_ttl=10.0)
    assert job.queue == "q" and job.max_attempts == 3 and job.priority == 7
    # A Celery task's expiration is left to the worker (it marks the task REVOKED):
    # only the queue's TTL applies to the row.
    assert job.uuid == message["headers"]["id"] and job.expires_in == 10.0
    assert job.delay > 3600 and json.loads(job.payload) == message
    low = new_job("q", message, max_attempts=3, priority_order="low_first")
    assert low.priority == 2 and low.expires_in is None


def test_a_message_that_is_not_a_celery_task_expires_with_the_shorter_ttl() -> None:
    message = celery_message()
    message["properties"].update(expiration="1500")
    del message["headers"]["task"]
    assert new_job("q", message, max_attempts=3, queue_ttl=10.0).expires_in == 1.5
    assert new_job("q", message, max_attempts=3).expires_in == 1.5
    message["properties"]["expiration"] = "20000"
    assert new_job("q", message, max_attempts=3, queue_ttl=10.0).expires_in == 10.0


@pytest.mark.parametrize(
    ("priority", "stored"), [(None, 0), ("x", 0), (-4, 0), (3, 3), (12, 9), ("5", 5)]
)
def test_priorities_are_clamped_as_kombu_does(priority: Any, stored: int) -> None:
    assert stored_priority({"priority": priority}) == stored
    assert stored_priority({"priority": priority}, "low_first") == 9 - stored


def test_time_to_live_is_the_shorter_and_ignores_garbage() -> None:
    assert time_to_live({}, None) is None
    assert time_to_live({"expiration": "2000"}, None) == 2.0
    assert time_to_live({"expiration": "2000"}, 1.0) == 1.0
    assert time_to_live({"expiration": "soon"}, 4.0) == 4.0


def test_a_delivery_names_its_row_and_reservation() -> None:
    job = ClaimedJob(7, "q", b"", 0, 2, 25, "tok", None)
    message = delivery(job, {"properties": {}})
    assert message["properties"]["delivery_tag"] == "7:tok"
    assert message["redelivered"] and message["properties"]["delivery_info"]["redelivered"]


def test_a_reason_is_cut_to_the_failed_tables_column_on_a_character_boundary() -> None:
    from kombu_sqlqueue.limits import fit_utf8

    assert fit_utf8("short", 100) == "short"
    cut = fit_utf8("é" * 100, 61)
    assert len(cut.encode()) <= 61 and cut.endswith("(cut to fit the failed table's column)")
    assert cut.startswith("é") and "\ufffd" not in cut


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (mutate("headers.eta", "0001-01-01T00:00:00"), "too near the end of the calendar"),
        (mutate("headers.expires", "9999-12-31T23:59:59+05:00"), "end of the calendar"),
        (mutate("headers.eta", ""), "empty string"),
    ],
)
def test_dates_celery_crashes_on_are_refused(message: dict, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        read_message(stored(message), CODECS)


def v1_message(**fields: Any) -> dict:
    body = {"task": "t.add", "id": "x", "args": [1, 2], "kwargs": {}, **fields}
    message = celery_message()
    message["headers"] = {}
    message["body"] = body_of(body)
    return message


@pytest.mark.parametrize(("field", "value"), [("eta", ""), ("expires", False), ("eta", 0)])
def test_a_protocol_1_task_gets_the_same_date_checks(field: str, value: Any) -> None:
    with pytest.raises(MalformedMessage, match=f"body.{field}"):
        read_message(stored(v1_message(**{field: value})), CODECS)
    read_message(stored(v1_message(eta="2030-01-01T00:00:00")), CODECS)


def test_a_body_that_inflates_past_the_limit_is_refused_unread() -> None:
    import zlib

    from kombu_sqlqueue.envelope import MAX_DECOMPRESSED_BYTES

    bomb = zlib.compress(b"[" + b" " * (MAX_DECOMPRESSED_BYTES + 10) + b"]", 9)
    message = mutate("headers.compression", "application/x-gzip")
    message["body"] = base64.b64encode(bomb).decode()
    with pytest.raises(PayloadLimitExceeded, match="decompresses"):
        read_message(stored(message), CODECS)
    fine = mutate("headers.compression", "zlib")
    fine["body"] = base64.b64encode(zlib.compress(json.dumps([[1], {}, {}]).encode())).decode()
    read_message(stored(fine), CODECS)


def test_a_body_in_another_text_encoding_is_read_as_kombu_reads_it() -> None:
    utf16 = mutate("content-encoding", "utf-16")
    utf16["body"] = base64.b64encode(json.dumps([[1], {}, {}]).encode("utf-16")).decode()
    read_or_refuse(stored(utf16))  # whatever the answer, Kombu and Celery agree with it
    binary = mutate("content-encoding", "binary")
    read_message(stored(binary), CODECS)  # Kombu reads a binary JSON body as UTF-8
