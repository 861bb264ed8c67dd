"""The documented limits on a Laravel payload, enforced with named errors: no input makes the
codec, the payload model or the conversion to Python raise ``RecursionError`` (or allocate
by a number the input names), even called under a deep stack."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from laravel_support import APP_KEY

from laravel_bridge import Encrypter, JobCommand, Payload, PayloadError, PhpObject, dumps, loads
from laravel_bridge.encryption import looks_encrypted
from laravel_bridge.exceptions import DecryptError, PayloadTooDeep, PayloadTooLarge
from laravel_bridge.job import chain_successor
from laravel_bridge.payload import (
    CALL_QUEUED_HANDLER,
    MAX_COMMAND_DEPTH,
    MAX_JSON_DEPTH,
    ModelIdentifier,
    to_php,
    to_python,
)
from laravel_bridge.php_serialize import PhpSerializeError

T = TypeVar("T")


def nested_php(depth: int, leaf: str = "N;") -> bytes:
    return ("a:1:{i:0;" * depth + leaf + "}" * depth).encode()


def command_in_object(depth: int) -> bytes:
    """A job object whose one property nests ``depth`` arrays (``depth + 1`` levels)."""
    return b'O:5:"App\\X":1:{s:1:"a";' + nested_php(depth) + b"}"


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def under_a_deep_stack(call: Callable[[], T], spare: int = 400) -> T:
    """``call()`` run with all but ``spare`` frames of the recursion limit in use."""
    frames = sys.getrecursionlimit() - spare - len(_stack())

    def descend(n: int) -> T:
        return call() if n <= 0 else descend(n - 1)

    return descend(frames)


def _stack() -> list[Any]:
    import inspect

    return inspect.stack(0)


# -- PHP nesting -------------------------------------------------------------------------------


def test_the_named_error_is_both_a_codec_and_a_payload_error() -> None:
    assert issubclass(PayloadTooDeep, PhpSerializeError)
    assert issubclass(PayloadTooDeep, PayloadError)


def test_a_command_is_read_up_to_max_command_depth_and_refused_past_it() -> None:
    at_limit = JobCommand.loads(command_in_object(MAX_COMMAND_DEPTH - 1))
    assert at_limit.class_name == "App\\X"
    assert under_a_deep_stack(lambda: at_limit.properties)["a"] is not None
    with pytest.raises(PayloadTooDeep, match=f"deeper than {MAX_COMMAND_DEPTH} levels"):
        JobCommand.loads(command_in_object(MAX_COMMAND_DEPTH))
    with pytest.raises(PayloadTooDeep):
        JobCommand.loads(command_in_object(600))  # the row of the issue


def test_codec_default_stays_phps_own_and_dumps_refuses_deep_and_cyclic_values() -> None:
    assert loads(nested_php(4000)) is not None  # PHP's unserialize_max_depth, 4096
    with pytest.raises(PayloadTooDeep):
        loads(nested_php(5000))
    with pytest.raises(PayloadTooDeep):
        dumps(nested_list(100_000))
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(PayloadTooDeep):
        dumps(cycle)
    with pytest.raises(PayloadTooDeep):
        JobCommand.build("App\\X", {"a": nested_list(MAX_COMMAND_DEPTH + 5)}).dumps()


def test_loads_refuses_a_number_as_input_instead_of_allocating_it() -> None:
    with pytest.raises(TypeError):
        loads(10**12)  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="string, not a int"):
        JobCommand.loads(10**12)  # type: ignore[arg-type]


def test_conversion_to_python_and_back_is_iterative_and_bounded() -> None:
    deep = loads(nested_php(3000))  # decodable with the codec's PHP default
    with pytest.raises(PayloadTooDeep):
        to_python(deep)
    copy = under_a_deep_stack(lambda: to_python(deep, max_depth=5000))
    assert copy is not deep and dumps(copy, max_depth=5000) == nested_php(3000)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(PayloadTooDeep):
        to_php(cycle)
    when = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)
    mixed = {"b": [1, (2, when)], "a": {"m": ModelIdentifier("App\\User", 7)}}
    php = to_php(mixed)
    assert list(php) == ["b", "a"] and php["b"][1][0] == 2
    assert to_python(php) == {"b": [1, [2, when]], "a": {"m": ModelIdentifier("App\\User", 7)}}


def test_a_model_identifier_with_unreadable_relations_is_a_payload_error() -> None:
    obj = PhpObject("Illuminate\\Contracts\\Database\\ModelIdentifier", {"relations": 7})
    with pytest.raises(PayloadError, match="relations are a int"):
        to_python(obj)


# -- the payload's JSON ------------------------------------------------------------------------


def payload_nesting(depth: int) -> str:
    """A payload whose JSON nests ``depth`` levels (the payload object is the first)."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return '{"uuid":"u","job":"X@handle","data":{"x":' + inner + "}}"


def test_payload_json_is_read_up_to_max_json_depth_and_refused_past_it() -> None:
    assert under_a_deep_stack(lambda: Payload.parse(payload_nesting(MAX_JSON_DEPTH))).uuid == "u"
    with pytest.raises(PayloadTooDeep, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        Payload.parse(payload_nesting(MAX_JSON_DEPTH + 1))
    with pytest.raises(PayloadTooDeep):
        Payload.parse("[" * 100_000)


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        (b'{"uuid":"\xff"}', PayloadError, "payload is not valid UTF-8"),
        (b"\xef\xbb\xbf{}", PayloadError, "payload is not JSON"),  # a BOM: PHP refuses it too
        (b"\x00{\x00}", PayloadError, "payload is not JSON"),  # no UTF-16 guessing
        ("", PayloadError, "payload is empty"),
        ("  \n", PayloadError, "payload is empty"),
        ("1" * 5000, PayloadError, "payload is not JSON"),  # past Python's int digits limit
        ("null", PayloadError, "payload is JSON null"),
        ('"x"' + " " * 40, PayloadTooLarge, "larger than the 40 bytes"),
        ("é" * 25, PayloadTooLarge, "larger than the 40 bytes"),  # 25 characters, 50 bytes
    ],
)
def test_payload_parse_names_what_is_wrong(raw: str | bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Payload.parse(raw, max_bytes=40 if error is PayloadTooLarge else 1 << 24)


def test_a_payload_just_under_the_size_limit_is_read() -> None:
    assert Payload.parse('{"job":"X@handle"}', max_bytes=18).job == "X@handle"
    with pytest.raises(PayloadTooLarge):
        Payload.parse('{"job":"X@handlé"}', max_bytes=18)  # 18 characters, 19 bytes


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [("1,5,10", [1, 5, 10]), (" 7 ", [7]), ("1.5", [1]), ("1e3", [1000]), (5, [5]), ("", [])],
)
def test_backoff_reads_what_laravel_writes(backoff: object, expected: list[int]) -> None:
    assert Payload({"job": "X", "backoff": backoff}).backoff == expected


@pytest.mark.parametrize("backoff", ["1,inf", "nan", "1e400", "x", [1, 2], True, {"a": 1}])
def test_backoff_that_is_no_number_of_seconds_is_a_payload_error(backoff: object) -> None:
    with pytest.raises(PayloadError, match="bad backoff"):
        Payload({"job": "X", "backoff": backoff}).backoff  # noqa: B018


# -- data.command: garbage or encrypted --------------------------------------------------------


def with_command(command: Any) -> Payload:
    return Payload({"uuid": "u", "job": CALL_QUEUED_HANDLER, "data": {"command": command}})


@pytest.mark.parametrize("command", ["xyz", "\x8d\x01garbage", "eyJpdiI6IngifQ==", "   "])
def test_a_garbage_command_is_called_what_it_is_not_encrypted(command: str) -> None:
    with pytest.raises(PayloadError, match="neither PHP serialize\\(\\) data nor a Laravel-enc"):
        with_command(command).command()


def test_an_encrypted_command_still_asks_for_the_key_and_decrypts_with_it() -> None:
    encrypter = Encrypter(APP_KEY)
    text = encrypter.encrypt(JobCommand.build("App\\X", {"n": 1}).dumps().decode())
    assert looks_encrypted(text)
    with pytest.raises(PayloadError, match="the command is encrypted; pass the app key"):
        with_command(text).command()
    assert with_command(text).command(encrypter).properties == {"n": 1}


def test_a_command_that_is_php_data_but_no_object_says_so() -> None:
    with pytest.raises(PayloadError, match="the command is a list, not a PHP object"):
        with_command("a:0:{}").command()


@pytest.mark.parametrize(
    "envelope",
    [
        "[" * 100_000,  # nested past MAX_JSON_DEPTH
        '{"iv":"AAAAAAAAAAAAAAAAAAAAAA==","value":"","mac":"\u00e9"}',  # a mac that is not ASCII
        '{"iv":"AAAAAAAAAAAAAAAAAAAAAA==","value":"","mac":"ab","tag":5}',
        '{"iv":"AAAAAAAAAAAA","value":"","mac":"","tag":"%%%"}',
        "[1, 2]",
    ],
)
def test_decrypt_reports_any_envelope_as_decrypt_error(envelope: str) -> None:
    text = base64.b64encode(envelope.encode()).decode()
    for cipher in ("AES-256-CBC", "AES-256-GCM"):
        with pytest.raises(DecryptError):
            Encrypter(APP_KEY, cipher).decrypt(text)


# -- a chain's next job ------------------------------------------------------------------------


def chained_with(chained: Any = None, **next_props: Any) -> JobCommand:
    first = JobCommand.build("App\\A", {}, chained=[JobCommand.build("App\\B", {})])
    if chained is not None:
        first.obj.properties["chained"] = chained
    if next_props:
        nxt = JobCommand.build("App\\B", {})
        nxt.obj.properties.update(next_props)
        first.obj.properties["chained"] = [nxt.dumps().decode()]
    return first


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (chained_with(chained=[10**12]), "a serialized command is a string"),
        (chained_with(chained="O:1:x"), "chained is a str, not a list"),
        (chained_with(queue=["a"]), "the next job's queue"),
        (chained_with(queue="bad\nname"), "the next job's queue"),
        (chained_with(delay=float("inf")), "the next job's delay"),
        (chained_with(delay=10**15), "the next job's delay"),
        (chained_with(retryUntil=float("inf")), "out of range for a unix time"),
        (chained_with(retryUntil=float("nan")), "must be a unix time"),
    ],
)
def test_a_chain_link_the_queue_cannot_store_is_a_payload_error(
    command: JobCommand, message: str
) -> None:
    with pytest.raises(PayloadError, match=message):
        chain_successor(command, None, 1_800_000_000)


def test_the_issue_rows_raise_named_errors_only() -> None:
    """The exact rows of issue 11: each raises a PayloadError, none RecursionError."""
    deep_php = json.dumps(
        {
            "uuid": "u",
            "job": CALL_QUEUED_HANDLER,
            "data": {"command": command_in_object(600).decode()},
        }
    )
    with pytest.raises(PayloadTooDeep):
        Payload.parse(deep_php).command()
    with pytest.raises(PayloadTooDeep):
        Payload.parse('{"job":"X","data":' + "[" * 1000 + "]" * 1000 + "}")
