"""Values built in Python: ``dumps`` → PHP ``unserialize()`` → PHP ``serialize()``
gives back Python's bytes exactly, i.e. Python writes what PHP writes.
Some cases also pin the exact bytes, and the Laravel job and Carbon date built
by hand equal PHP's own serialization of the real objects."""

from __future__ import annotations

import math
from typing import Any

import pytest
from _codec_helpers import check_in_php, need_case

from laravel_bridge.php_serialize import (
    PhpEnum,
    PhpObject,
    PhpReference,
    PhpSerializable,
    dumps,
    loads,
    private,
    protected,
)

POINT = "App\\Bridge\\Point"
SUIT = "App\\Bridge\\Suit"
STATUS = "App\\Bridge\\Status"
JOB = "App\\Jobs\\ProcessPodcast"


def point(x: Any = 1, y: Any = 2, z: Any = 3) -> PhpObject:
    return PhpObject(POINT, {"x": x, protected("y"): y, private(POINT, "z"): z})


def laravel_job(podcast_id: int, options: Any, token: str) -> PhpObject:
    """ProcessPodcast (Queueable + InteractsWithQueue + SerializesModels), Laravel 8.83."""
    return PhpObject(
        JOB,
        {
            "podcastId": podcast_id,
            protected("options"): options,
            private(JOB, "token"): token,
            "connection": None,
            "queue": None,
            "chainConnection": None,
            "chainQueue": None,
            "chainCatchCallbacks": None,
            "delay": None,
            "afterCommit": None,
            "middleware": [],
            "chained": [],
            "job": None,
        },
    )


def _cycle() -> PhpObject:
    node = PhpObject("App\\Bridge\\Node", {"value": "self", "next": None})
    node.properties["next"] = node
    return node


def _shared_reference() -> list[Any]:
    box = PhpReference("shared")
    return [box, "other", box, {"k": box}]


def _shared_object() -> dict[str, Any]:
    p = point()
    return {"a": p, "b": [p, p]}


CASES: dict[str, Any] = {
    "null": None,
    "bools": [True, False],
    "ints": [0, -1, 2**63 - 1, -(2**63), 2**31],
    "floats": [0.1, -0.0, 3.0, 1e16, 1e17, 1e-5, 5e-324, math.inf, -math.inf, math.nan, 1 / 3],
    "strings": ["", "utf8 ✓ 日本", 'quote"semi;brace}', "nul\0byte", 's:1:"x";'],
    "bytes": [b"\xff\xfe", b"\x00\x80", bytearray(b"ba\xffr")],
    "nested lists and dicts": {"a": [1, [2, [3, {"b": {}}]]], "c": {-1: [], 7: {"d": None}}},
    "tuple": (1, (2, 3)),
    "dict keyed 0..n-1": {0: "a", 1: "b"},
    "sparse dict": {0: "a", 2: "c", -5: "neg"},
    "binary keys": {b"\xff": 1, "é": 2, "": 3, "a\0b": 4},
    "stdClass": PhpObject("stdClass", {"a": 1, "b": [1, 2]}),
    "Point protected and private": point(1, "two", [3.5]),
    "nested objects": point(point(), None, PhpObject("stdClass")),
    # In PHP's order: unserialize() puts a declared class's properties in
    # declaration order (parent's first), whatever order the input had.
    "same-named private props of parent and child": PhpObject(
        "App\\Bridge\\Child",
        {
            private("App\\Bridge\\Base", "secret"): "base",
            protected("shared"): 1,
            "pub": "p",
            private("App\\Bridge\\Child", "secret"): "child",
            "extra": [],
        },
    ),
    "unknown class (PHP: __PHP_Incomplete_Class)": PhpObject("Not\\Loaded\\Anywhere", {"a": 1}),
    "enum pure": PhpEnum(STATUS, "Active"),
    "enum backed": PhpEnum(SUIT, "Spades"),
    "enum repeated (separately built)": [
        PhpEnum(SUIT, "Hearts"),
        PhpEnum(SUIT, "Hearts"),
        PhpEnum(STATUS, "Inactive"),
        PhpEnum(SUIT, "Hearts"),
        PhpEnum(STATUS, "Inactive"),
    ],
    "enum repeated inside objects": [
        point(PhpEnum(SUIT, "Hearts")),
        point(PhpEnum(SUIT, "Hearts")),
    ],
    "same object twice": _shared_object(),
    "self-referencing object": _cycle(),
    "references": _shared_reference(),
    "Serializable (C:)": PhpSerializable("App\\Bridge\\Legacy", dumps({"k": [1, 2]})),
    "Serializable twice": [PhpSerializable("App\\Bridge\\Legacy", b"N;")] * 2,
    "Carbon": PhpObject(
        "Carbon\\Carbon",
        {"date": "2024-01-02 03:04:05.678000", "timezone_type": 3, "timezone": "Europe/Paris"},
    ),
    "DateTimeImmutable": PhpObject(
        "DateTimeImmutable",
        {"date": "1999-12-31 23:59:59.000000", "timezone_type": 1, "timezone": "+05:30"},
    ),
    "Laravel job": laravel_job(42, {"quality": "high", "tags": ["a", "b"]}, "s\0cret"),
    "Laravel job with enum and delay": PhpObject(
        JOB,
        {
            **laravel_job(7, [PhpEnum(SUIT, "Spades")], "tok").properties,
            "queue": "podcasts",
            "delay": PhpObject(
                "Illuminate\\Support\\Carbon",
                {"date": "2030-01-01 12:00:00.000000", "timezone_type": 3, "timezone": "UTC"},
            ),
        },
    ),
}

EXACT = {
    "same-named private props of parent and child": (
        b'O:16:"App\\Bridge\\Child":5:{s:23:"\0App\\Bridge\\Base\0secret";s:4:"base";'
        b's:9:"\0*\0shared";i:1;s:3:"pub";s:1:"p";'
        b's:24:"\0App\\Bridge\\Child\0secret";s:5:"child";s:5:"extra";a:0:{}}'
    ),
    "enum repeated (separately built)": (
        b'a:5:{i:0;E:22:"App\\Bridge\\Suit:Hearts";i:1;r:2;'
        b'i:2;E:26:"App\\Bridge\\Status:Inactive";i:3;r:2;i:4;r:4;}'
    ),
    "Point protected and private": (
        b'O:16:"App\\Bridge\\Point":3:{s:1:"x";i:1;s:4:"\0*\0y";s:3:"two";'
        b's:19:"\0App\\Bridge\\Point\0z";a:1:{i:0;d:3.5;}}'
    ),
    "self-referencing object": (
        b'O:15:"App\\Bridge\\Node":2:{s:5:"value";s:4:"self";s:4:"next";r:1;}'
    ),
    "references": b'a:4:{i:0;s:6:"shared";i:1;s:5:"other";i:2;R:2;i:3;a:1:{s:1:"k";R:2;}}',
    "same object twice": (
        b'a:2:{s:1:"a";O:16:"App\\Bridge\\Point":3:{s:1:"x";i:1;s:4:"\0*\0y";i:2;'
        b's:19:"\0App\\Bridge\\Point\0z";i:3;}s:1:"b";a:2:{i:0;r:2;i:1;r:2;}}'
    ),
    "tuple": b"a:2:{i:0;i:1;i:1;a:2:{i:0;i:2;i:1;i:3;}}",
    "bytes": b'a:3:{i:0;s:2:"\xff\xfe";i:1;s:2:"\x00\x80";i:2;s:4:"ba\xffr";}',
}


@pytest.fixture(scope="module")
def php_report(run_php: Any) -> dict[str, dict[str, Any]]:
    return check_in_php(run_php, [(name, dumps(value), None) for name, value in CASES.items()])


@pytest.mark.parametrize("name", list(CASES))
def test_php_reserializes_python_bytes_identically(
    name: str, php_report: dict[str, dict[str, Any]]
) -> None:
    row = php_report[name]
    assert row["unserialized"], row["error"]
    assert row["same_bytes"], (dumps(CASES[name]), row["reserialized"])


@pytest.mark.parametrize("name", list(EXACT))
def test_exact_bytes(name: str) -> None:
    assert dumps(CASES[name]) == EXACT[name]


def test_enum_repeat_is_r_even_when_built_separately() -> None:
    a, b = PhpEnum(SUIT, "Hearts"), PhpEnum(SUIT, "Hearts")
    assert a is not b
    data = dumps([a, b])
    assert data == b'a:2:{i:0;E:22:"App\\Bridge\\Suit:Hearts";i:1;r:2;}'
    back = loads(data)
    assert back[0] is back[1]


def test_built_laravel_job_and_carbon_equal_php_own_bytes(corpus: dict[str, bytes]) -> None:
    assert dumps(CASES["Laravel job"]) == need_case(corpus, "Laravel job")
    assert dumps(CASES["Carbon"]) == need_case(corpus, "Carbon")
    assert loads(corpus["Laravel job"]) == CASES["Laravel job"]
