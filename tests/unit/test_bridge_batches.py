"""A batch's stored options read without PHP (the e2e tests read Laravel's own), and the
queued closure that hands its callbacks to PHP."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laravel_bridge import Payload, PhpObject, php_serialize
from laravel_bridge.batches import CALLBACKS_CODE, BatchOptions, callbacks_job
from laravel_bridge.encryption import Encrypter
from laravel_bridge.exceptions import LaravelBridgeError

KEY = "base64:" + base64.b64encode(b"k" * 32).decode()
CLOSURE = PhpObject("Laravel\\SerializableClosure\\SerializableClosure", {"serializable": "x"})
OPTIONS = php_serialize.dumps(
    {"then": [CLOSURE], "catch": [], "finally": [CLOSURE, CLOSURE], "allowFailures": True,
     "queue": "batches"}
).decode()  # fmt: skip


def test_options_as_mysql_and_sqlite_store_them() -> None:
    options = BatchOptions.parse(OPTIONS)
    assert (options.then, options.catch, options.finally_) == (1, 0, 2)
    assert options.allow_failures and options.queue == "batches"
    assert options.has("finally") and not options.has("catch")


def test_options_as_postgresql_stores_them_base64() -> None:
    assert BatchOptions.parse(base64.b64encode(OPTIONS.encode()).decode()).then == 1


@pytest.mark.parametrize("stored", [None, "", "a:0:{}", base64.b64encode(b"a:0:{}").decode()])
def test_no_options_is_no_callback(stored: str | None) -> None:
    """None or empty, and PHP's empty array: what ``Bus::batch([...])->dispatch()`` with no
    callbacks and no queue stores (it was refused as "not an array", so such a batch's
    jobs were never recorded by a Python consumer)."""
    assert BatchOptions.parse(stored) == BatchOptions()


@pytest.mark.parametrize(
    ("stored", "reason"),
    [("not php at all", "not PHP data"), ("i:5;", "not an array"), ("a:1:{", "not PHP data")],
)
def test_unreadable_options_are_a_named_error(stored: str, reason: str) -> None:
    with pytest.raises(LaravelBridgeError, match=reason):
        BatchOptions.parse(stored)


@given(st.one_of(st.text(), st.binary()))
def test_any_stored_options_are_read_or_refused_with_the_named_error(stored: str | bytes) -> None:
    with contextlib.suppress(LaravelBridgeError):
        BatchOptions.parse(stored)


def test_the_callbacks_closure_is_signed_as_laravel_signs_queued_closures() -> None:
    job = callbacks_job("b-1", "catch", "default", signing_key=Encrypter(KEY).key, message="boom")
    payload = Payload.parse(job.payload)
    assert payload.display_name == "Closure (laravel_bridge: batch catch callbacks)"
    command = payload.command()
    assert command.class_name == "Illuminate\\Queue\\CallQueuedClosure"
    signed = command.obj["closure"]["serializable"]
    assert signed.class_name == "Laravel\\SerializableClosure\\Serializers\\Signed"
    expected = hmac.new(Encrypter(KEY).key, signed["serializable"].encode(), hashlib.sha256)
    assert signed["hash"] == base64.b64encode(expected.digest()).decode()
    native = php_serialize.loads(signed["serializable"])
    assert native["use"] == {"batchId": "b-1", "kind": "catch", "message": "boom"}
    assert native["function"] == CALLBACKS_CODE


def test_without_a_key_the_closure_is_unsigned() -> None:
    job = callbacks_job("b-2", "then", "default", signing_key=None)
    native = Payload.parse(job.payload).command().obj["closure"]["serializable"]
    assert native.class_name == "Laravel\\SerializableClosure\\Serializers\\Native"
