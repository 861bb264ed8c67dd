"""Property-based tests (hypothesis) of ``loads``/``dumps``, and one that sends a
batch of generated values to PHP, which must re-serialize them to the same bytes."""

from __future__ import annotations

import math
import re
from typing import Any

from _codec_helpers import check_in_php, has_nan, normalize, php_array_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laravel_bridge.php_serialize import PhpEnum, PhpObject, dumps, loads, private, protected

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
CLASS = st.sampled_from(["stdClass", "App\\Bridge\\Bag", "Not\\Loaded\\Thing"])
ENUMS = st.sampled_from(
    [
        PhpEnum("App\\Bridge\\Suit", "Hearts"),
        PhpEnum("App\\Bridge\\Suit", "Spades"),
        PhpEnum("App\\Bridge\\Status", "Active"),
        PhpEnum("App\\Bridge\\Level", "High"),
    ]
).map(lambda e: PhpEnum(e.class_name, e.case))  # a fresh (equal) instance each time


def _prop_key(draw_name: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        draw_name,
        draw_name.map(protected),
        st.tuples(st.sampled_from(["stdClass", "App\\Parent"]), draw_name).map(
            lambda t: private(*t)
        ),
    )


def values(*, php_safe: bool) -> st.SearchStrategy[Any]:
    """Codec values. ``php_safe`` leaves out what PHP itself rewrites on a round trip:
    numeric-string array keys (PHP makes them ints) and int property names."""
    if php_safe:
        str_key: st.SearchStrategy[Any] = st.text(max_size=8).filter(
            lambda k: re.fullmatch(r"-?[1-9][0-9]*|0", k) is None
        )
        obj_key = _prop_key(NAME)
    else:
        str_key = st.text(max_size=8)
        obj_key = st.one_of(_prop_key(st.text(min_size=1, max_size=8)), INT64)
    scalars = st.one_of(
        st.none(), st.booleans(), INT64, FLOATS, st.text(max_size=20), st.binary(max_size=20)
    )
    keys = st.one_of(INT64, str_key)

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(children, max_size=5),
            st.lists(children, max_size=3).map(tuple),
            # Keys PHP would merge (0 and "0") are refused by dumps; see the regressions.
            st.dictionaries(keys, children, max_size=5).filter(
                lambda d: len({php_array_key(k) for k in d}) == len(d)
            ),
            st.builds(PhpObject, CLASS, st.dictionaries(obj_key, children, max_size=4)),
        )

    return st.recursive(st.one_of(scalars, ENUMS), extend, max_leaves=25)


def _same_bits(a: Any, b: Any) -> bool:
    """Equality that also tells -0.0 from 0.0 and NaN from anything but NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same_bits, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(map(_same_bits, a.values(), b.values()))
    if isinstance(a, PhpObject) and isinstance(b, PhpObject):
        return a.class_name == b.class_name and _same_bits(a.properties, b.properties)
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(values(php_safe=False))
def test_dumps_loads_dumps_is_stable(value: Any) -> None:
    data = dumps(value)
    assert dumps(loads(data)) == data


@settings(max_examples=400, deadline=None)
@given(values(php_safe=False))
def test_loads_dumps_gives_the_value_back_modulo_the_mapping(value: Any) -> None:
    data = dumps(value)
    back = loads(data)
    if not has_nan(value):
        assert back == normalize(value)
    assert _same_bits(back, normalize(value))


@settings(max_examples=200, deadline=None)
@given(FLOATS)
def test_floats_round_trip_bit_exact(value: float) -> None:
    back = loads(dumps(value))
    assert _same_bits(back, value)


@settings(max_examples=200, deadline=None)
@given(INT64)
def test_ints_round_trip(value: int) -> None:
    assert dumps(value) == b"i:%d;" % value and loads(dumps(value)) == value


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(values(php_safe=True), min_size=30, max_size=60))
def test_php_reserializes_generated_values_identically(run_php: Any, batch: list[Any]) -> None:
    """One PHP process per example: every value's bytes survive PHP's unserialize/serialize."""
    cases = [(str(i), dumps(value), None) for i, value in enumerate(batch)]
    report = check_in_php(run_php, cases)
    bad = [
        (data, report[name]["reserialized"], report[name]["error"])
        for name, data, _ in cases
        if not report[name]["same_bytes"]
    ]
    assert not bad
