"""The codec against PHP's own ``serialize()`` output, made by PHP at test time
(``tests/e2e_php_codec/php/corpus.php``), in both directions:

* PHP → Python: every corpus case decodes, and ``dumps(loads(x)) == x`` byte for byte;
* Python → PHP: PHP unserializes Python's re-encoding, re-serializes it to the
  same bytes, and finds it ``==`` (and ``===`` where PHP can) to its own value;
* doubles: PHP's ``d:`` text for random and edge-case doubles drawn in PHP and
  in Python is exactly what ``dumps`` writes.
"""

from __future__ import annotations

import base64
import math
import random
import struct
from typing import Any

import pytest
from _codec_helpers import (
    CORPUS_RANDOM_DOUBLES,
    check_in_php,
    has_nan,
    has_objects,
    is_cyclic,
    need_case,
    walk,
)

from laravel_bridge.php_serialize import (
    PhpEnum,
    PhpObject,
    PhpReference,
    PhpSerializable,
    dumps,
    loads,
    php_float,
    private,
    protected,
)

#: PHP's own output for PHP references (R:) in shapes that once tripped the codec.
REFERENCE_CASES = (
    "reference to map array (R:)",
    "reference to enclosing array, map (R:)",
    "reference to enclosing array, list (R:)",
    "reference then object copy (R: r:)",
    "object then reference (r: and R:)",
    "object property referencing the object (R:1)",
)
#: PHP itself re-serializes these differently from what it wrote: `$o->self = &$o` is
#: written with R:1 but, once unserialized, serializes with r:1.
PHP_REWRITES = {"object property referencing the object (R:1)"}
#: PHP's == is false between two unserialize()s of these (not a codec matter):
#: SplObjectStorage compares its stored objects by identity; DateInterval cannot be compared.
PHP_NOT_EQ = {"SplObjectStorage", "DateInterval"}


def test_corpus_has_every_type_tag(corpus: dict[str, bytes]) -> None:
    everything = b"".join(corpus.values())
    for tag in (b"N;", b"b:", b"i:", b"d:", b"s:", b"a:", b"O:", b"C:", b"E:", b"r:", b"R:"):
        assert tag in everything, tag
    doubles = [name for name in corpus if name.startswith("random double")]
    assert len(doubles) == CORPUS_RANDOM_DOUBLES


def test_every_corpus_case_round_trips_byte_exact(corpus: dict[str, bytes]) -> None:
    failures = []
    for name, data in corpus.items():
        try:
            again = dumps(loads(data))
        except Exception as exc:  # report every failing case at once
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if again != data:
            failures.append(f"{name}:\n  php    {data[:300]!r}\n  python {again[:300]!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", REFERENCE_CASES)
def test_php_reference_shapes_round_trip(corpus: dict[str, bytes], name: str) -> None:
    data = corpus[name]
    assert dumps(loads(data)) == data


def test_php_reads_back_what_python_writes(corpus: dict[str, bytes], run_php: Any) -> None:
    decoded = {name: loads(data) for name, data in corpus.items()}
    cases = [
        # PHP's == on a cyclic value is a fatal error: compare those by bytes only.
        (name, dumps(value), None if is_cyclic(value) else corpus[name])
        for name, value in decoded.items()
    ]
    report = check_in_php(run_php, cases)
    failures = []
    for name, value in decoded.items():
        row = report[name]
        compare = not is_cyclic(value) and not has_nan(value)
        problems = [
            not row["unserialized"] and f"unserialize failed: {row['error']}",
            not row["same_bytes"]
            and name not in PHP_REWRITES
            and f"PHP re-serialized differently: {row['reserialized']}",
            compare and name not in PHP_NOT_EQ and row["eq"] is not True and f"== {row['eq']}",
            compare
            and not has_objects(value)
            and row["identical"] is not True
            and f"=== {row['identical']}",
        ]
        if any(problems):
            failures.append(f"{name}: {[p for p in problems if p]}")
    assert not failures, "\n".join(failures)


# -- doubles ------------------------------------------------------------------------------


def _edge_doubles() -> list[float]:
    values = [0.0, -0.0, math.inf, -math.inf, 5e-324, -5e-324, 2.2250738585072014e-308]
    values += [2.2250738585072009e-308, 1.7976931348623157e308, 0.1, 0.2, 0.3, 1 / 3]
    for exponent in range(-30, 30):
        base = 10.0**exponent
        values += [base, -base, math.nextafter(base, 0), math.nextafter(base, math.inf)]
        values += [1.5 * base, 9.999999999999999 * base, 1.2345678901234567 * base]
    for bits in range(50, 66):
        values += [2.0**bits, 2.0**bits - 1, 2.0**bits + 2]
    return values


def _random_doubles(count: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out: list[float] = []
    while len(out) < count:
        (value,) = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))
        if not math.isnan(value):
            out.append(value)
    # Ordinary magnitudes too: random.random() and friends print very differently.
    out += [rng.random() for _ in range(200)]
    out += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    out += [round(rng.uniform(-1000, 1000), rng.randint(0, 6)) for _ in range(200)]
    return out


def test_python_doubles_match_php_text(run_php: Any) -> None:
    values = _edge_doubles() + _random_doubles(2000, seed=7)
    hexes = [struct.pack(">d", v).hex() for v in values]
    rows = run_php("floats.php", hexes)
    assert [row["hex"] for row in rows] == hexes
    failures = []
    for value, row in zip(values, rows, strict=True):
        theirs = base64.b64decode(row["b64"])
        ours = dumps(value)
        back = loads(theirs)
        if ours != theirs or struct.pack(">d", back) != struct.pack(">d", value):
            failures.append(f"{value!r}: php {theirs!r} python {ours!r} loads {back!r}")
        assert theirs == b"d:" + php_float(value).encode() + b";"
    assert not failures, "\n".join(failures[:50])
    assert len(values) > 2500


def test_php_random_doubles_decode_to_the_same_bits(corpus: dict[str, bytes]) -> None:
    for name, data in corpus.items():
        if name.startswith("random double"):
            expected = bytes.fromhex(name.rsplit(" ", 1)[1])
            assert struct.pack(">d", loads(data)) == expected, name


def test_float_specials(corpus: dict[str, bytes]) -> None:
    assert corpus["float NAN"] == b"d:NAN;" and math.isnan(loads(b"d:NAN;"))
    assert corpus["float INF"] == b"d:INF;" and loads(b"d:INF;") == math.inf
    assert corpus["float -INF"] == b"d:-INF;" and loads(b"d:-INF;") == -math.inf
    assert corpus["float -0.0"] == b"d:-0;"
    assert math.copysign(1, loads(corpus["float -0.0"])) == -1
    assert dumps(-0.0) == b"d:-0;" and dumps(0.0) == b"d:0;"
    # Every NaN payload is PHP's NAN.
    assert dumps(struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]) == b"d:NAN;"


# -- the decoded values are what the mapping says ----------------------------------------------


def test_scalars_and_strings_decode_per_mapping(corpus: dict[str, bytes]) -> None:
    assert loads(corpus["null"]) is None
    assert loads(corpus["true"]) is True and loads(corpus["false"]) is False
    assert loads(corpus[f"int {2**63 - 1}"]) == 2**63 - 1
    assert loads(corpus[f"int {-(2**63)}"]) == -(2**63)
    assert loads(corpus["string utf8"]) == "héllo wörld — ✓ 日本語 🎉"
    assert loads(corpus["string invalid utf8"]) == b"\xff\xfe\x80abc\xc3"
    assert loads(corpus["string nul bytes"]) == "a\0b\0\0c"
    assert loads(corpus["string surrogate utf8"]) == b"\xed\xa0\x80"  # not UTF-8 to Python
    assert loads(corpus["string binary 0-255"]) == bytes(range(256))
    assert loads(corpus["string quotes"]) == 'say "hi"; it\'s {ok}'


def test_arrays_decode_per_mapping(corpus: dict[str, bytes]) -> None:
    assert loads(corpus["array empty"]) == []
    assert loads(corpus["array list"]) == [1, "two", 3.0, None, True]
    mixed = loads(corpus["array mixed keys"])
    # PHP itself turned the canonical numeric string keys "10" and "-5" into ints.
    assert mixed == {0: "a", "k": "b", 1: "c", 10: "d", -5: "e", "05": "f"}
    assert list(mixed) == [0, "k", 1, 10, -5, "05"]
    assert loads(corpus["array sparse"]) == {0: "a", 2: "c", 5: "f"}
    assert loads(corpus["array reversed keys"]) == {1: "b", 0: "a"}
    assert loads(corpus["array unset hole"]) == {0: 1, 2: 3}
    assert loads(corpus["array negative keys"]) == {
        -1: "a",
        -2: "b",
        -(2**63): "min",
        2**63 - 1: "max",
    }
    assert loads(corpus["array binary keys"]) == {b"\xff": 1, "\0": 2, "": 3, "é": 4, "a\0b": 5}
    assert loads(corpus["array big"]) == list(range(1000))


def test_objects_decode_per_mapping(corpus: dict[str, bytes]) -> None:
    point = loads(corpus["Point"])
    assert point == PhpObject(
        "App\\Bridge\\Point",
        {"x": 1, protected("y"): "two", private("App\\Bridge\\Point", "z"): [3]},
    )
    assert [point.visibility(n) for n in "xyz"] == ["public", "protected", "private"]
    assert point.plain() == {"x": 1, "y": "two", "z": [3]}
    child = loads(corpus["Child same-named private props"])
    assert child.properties[private("App\\Bridge\\Child", "secret")] == "child secret"
    assert child.properties[private("App\\Bridge\\Base", "secret")] == "base secret"
    magic = loads(corpus["Magic __serialize int keys"])
    assert list(magic.properties) == ["a", 0, 5, "k"]
    legacy = loads(corpus["Legacy Serializable C:"])
    assert legacy == PhpSerializable("App\\Bridge\\Legacy", b'a:2:{s:1:"k";s:1:"v";s:1:"n";i:1;}')
    assert loads(legacy.data) == {"k": "v", "n": 1}
    assert loads(corpus["stdClass props"]).properties["0"] == "numeric name"


def test_enums_and_identity_decode_per_mapping(corpus: dict[str, bytes]) -> None:
    enums = loads(corpus["enum repeated in list"])
    hearts = PhpEnum("App\\Bridge\\Suit", "Hearts")
    assert enums[0] == hearts and enums[1] is enums[0] and enums[5] is enums[0]
    assert enums[4] is enums[2] == PhpEnum("App\\Bridge\\Status", "Active")
    shared = loads(corpus["same object twice (r:)"])
    assert shared[0] is shared[1] is shared["x"]
    node = loads(corpus["self-referencing object (r:)"])
    assert node["next"] is node
    cycle = loads(corpus["object cycle a-b-a (r:)"])
    assert cycle["next"]["next"] is cycle
    refs = loads(corpus["reference to int (R:)"])
    assert isinstance(refs[0], PhpReference) and refs[0] is refs[1] is refs["y"]
    assert refs[0].value == 1
    props = loads(corpus["reference between properties (R:)"])
    assert props["p"] is props["q"] and props["p"].value == 5


def test_dates_and_laravel_job_decode(corpus: dict[str, bytes]) -> None:
    carbon = loads(need_case(corpus, "Carbon"))
    assert carbon.class_name == "Carbon\\Carbon"
    assert carbon.plain() == {
        "date": "2024-01-02 03:04:05.678000",
        "timezone_type": 3,
        "timezone": "Europe/Paris",
    }
    assert loads(corpus["DateTime"])["date"] == "2024-02-29 13:14:15.123456"
    job = loads(need_case(corpus, "Laravel job"))
    assert job.class_name == "App\\Jobs\\ProcessPodcast"
    assert job["podcastId"] == 42 and job.visibility("options") == "protected"
    assert job[private("App\\Jobs\\ProcessPodcast", "token")] == "s\0cret"
    assert {"connection", "queue", "delay", "chained"} <= set(job.plain())
    queued = loads(corpus["Laravel job queued with delay and chain"])
    assert queued["queue"] == "podcasts" and queued["connection"] == "database"
    assert queued["delay"].class_name == "Illuminate\\Support\\Carbon"
    chained = queued["chained"]
    assert len(chained) == 1 and loads(chained[0]).class_name == "App\\Jobs\\ProcessPodcast"
    assert queued["options"] == [PhpEnum("App\\Bridge\\Suit", "Spades")]
    assert any(isinstance(node, PhpObject) for node in walk(queued))
