"""A stored job summarized for a person (``peek``, ``failed show``): Celery tasks, Kombu
messages and Laravel jobs by name; any other bytes summarized as unreadable, never raised."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from kombu import Connection

from kombu_sqlqueue.ops.summary import summarize
from laravel_bridge import JobCommand, Payload


def stored_kombu_message(body: object, **kw: object) -> bytes:
    """What the transport stores for a publish (Kombu's own message, as JSON)."""
    with Connection("memory://") as conn:
        channel = conn.default_channel
        message = channel.prepare_message(
            json.dumps(body), content_type="application/json", content_encoding="utf-8", **kw
        )
        message["properties"]["body_encoding"] = "base64"
        message["body"] = channel.codecs["base64"].encode(message["body"])
    return json.dumps(message).encode()


def test_a_celery_task_by_name_and_arguments() -> None:
    stored = stored_kombu_message(
        [[1, "two"], {"three": 3}, {}], headers={"task": "tasks.add", "id": "t-1"}
    )
    found = summarize(stored)
    assert (found.kind, found.name, found.detail) == (
        "celery",
        "tasks.add",
        "args=[1, 'two'] kwargs={'three': 3}",
    )


def test_a_plain_kombu_message_by_content_type() -> None:
    found = summarize(stored_kombu_message({"hello": "world"}))
    assert (found.kind, found.name) == ("kombu", "application/json")
    assert "hello" in found.detail


def test_a_laravel_job_by_class_and_properties_on_either_layout() -> None:
    payload = Payload.build(JobCommand.build("App\\Jobs\\Send", {"invoiceId": 7})).to_json()
    for layout in ("askr", "laravel"):
        found = summarize(payload.encode() if layout == "askr" else payload, layout)
        assert (found.kind, found.name, found.detail) == (
            "laravel",
            "App\\Jobs\\Send",
            "{'invoiceId': 7}",
        )


def test_a_laravel_job_s_retry_rules_follow_its_properties() -> None:
    payload = Payload.build(
        JobCommand.build("App\\Jobs\\Send", {"invoiceId": 7}), max_tries=3, backoff=[10, 30]
    ).to_json()
    found = summarize(payload, "laravel")
    assert found.detail == "{'invoiceId': 7} (tries=3 backoff=10,30)"


def test_long_arguments_are_abbreviated() -> None:
    stored = stored_kombu_message([["x" * 10_000], {}, {}], headers={"task": "t", "id": "i"})
    assert len(summarize(stored).detail) < 120


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.binary(max_size=300), st.text(max_size=300)), st.sampled_from(["askr", "laravel"])
)
def test_any_stored_bytes_are_summarized_never_raised(payload: bytes | str, layout: str) -> None:
    found = summarize(payload, layout)
    assert found.kind in ("celery", "kombu", "laravel", "unreadable")
    assert isinstance(found.detail, str)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSONISH, st.sampled_from(["askr", "laravel"]))
def test_any_json_shaped_row_is_summarized_never_raised(value: object, layout: str) -> None:
    shapes = [
        value,
        {"job": "x", "data": value, "displayName": value},
        {"properties": value, "headers": value, "body": value, "content-type": "application/json"},
    ]
    for shape in shapes:
        found = summarize(json.dumps(shape), layout)
        assert found.kind in ("celery", "kombu", "laravel", "unreadable")
