"""Minimal reproductions of codec bugs this suite found (all fixed), one test each, so
they stay fixed. The PHP-written reference (R:) shapes are in test_php_corpus.py."""

from __future__ import annotations

from typing import Any

import pytest
from _codec_helpers import check_in_php

from laravel_bridge.php_serialize import PhpSerializeError, dumps, loads


def test_reference_to_map_array_keeps_its_items() -> None:
    data = b'a:2:{i:0;a:1:{s:1:"k";i:1;}i:1;R:2;}'  # PHP: $x = ['k' => 1]; [&$x, &$x]
    value = loads(data)
    assert value[0].value == {"k": 1}
    assert dumps(value) == data


def test_object_copy_after_reference_stays_r() -> None:
    data = b'a:3:{i:0;O:8:"stdClass":0:{}i:1;R:2;i:2;r:2;}'  # PHP: $o; [&$o, &$o, $o]
    assert dumps(loads(data)) == data


def test_lone_surrogate_raises_php_serialize_error() -> None:
    with pytest.raises(PhpSerializeError):
        dumps("\ud800")


def test_dumps_rejects_out_of_range_int_key() -> None:
    with pytest.raises(PhpSerializeError):
        dumps({2**63: 0})


def test_loads_rejects_out_of_range_int_key() -> None:
    # Values out of range raise; PHP clamps keys (and values) to PHP_INT_MAX.
    with pytest.raises(PhpSerializeError):
        loads(b"a:1:{i:9999999999999999999;i:0;}")


def test_r_to_an_array_is_rejected() -> None:
    # Decodes to a list containing itself, which dumps() then cannot write.
    with pytest.raises(PhpSerializeError):
        loads(b"a:1:{i:0;r:1;}")


def test_dumps_rejects_keys_equal_in_php() -> None:
    with pytest.raises(PhpSerializeError):
        dumps({"a": 1, b"a": 2})  # both are the PHP key "a": PHP would keep one


def test_numeric_string_keys_are_written_as_php_does(run_php: Any) -> None:
    value = {"5": "a", "-3": "b", "05": "c", "1.5": "d", "-0": "e"}
    data = dumps(value)
    row = check_in_php(run_php, [("numeric keys", data, None)])["numeric keys"]
    # PHP re-serializes as a:5:{i:5;...i:-3;...s:2:"05";...s:3:"1.5";...s:2:"-0";...}
    assert row["same_bytes"], row["reserialized"]
