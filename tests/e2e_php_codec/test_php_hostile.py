"""Hostile and malformed input: every one raises :class:`PhpSerializeError`
(never another exception), quickly, with bounded memory, and without recursion.
Where it helps, PHP's own ``unserialize()`` is asked too
(``tests/e2e_php_codec/php/reject.php``)."""

from __future__ import annotations

import base64
import random
import tracemalloc
from typing import Any

import pytest

from laravel_bridge.php_serialize import PhpSerializeError, dumps, loads

HOSTILE: dict[str, bytes] = {
    "empty": b"",
    "lying string length": b's:10:"abc";',
    "string length short": b's:1:"abc";',
    "string length 10**12": b's:1000000000000:"abc";',
    "string length 10**30": b"s:" + b"9" * 30 + b':"abc";',
    "negative string length": b's:-1:"";',
    "string without quotes": b"s:3:abc;",
    "string single quotes": b"s:3:'abc';",
    "string missing ;": b's:3:"abc"',
    "array size -1": b"a:-1:{}",
    "array size 10**12": b"a:1000000000000:{i:0;N;}",
    "array too few items": b"a:2:{i:0;N;}",
    "array too many items": b"a:0:{i:0;i:1;}",
    "array unclosed": b"a:1:{i:0;i:1;",
    "array float key": b"a:1:{d:1.0;i:0;}",
    "array null key": b"a:1:{N;i:0;}",
    "array array key": b"a:1:{a:0:{}i:0;}",
    "array key without value": b'a:1:{s:1:"a"}',
    "bool 2": b"b:2;",
    "bool 01": b"b:01;",
    "bool unterminated": b"b:1",
    "int too big": b"i:9223372036854775808;",
    "int too small": b"i:-9223372036854775809;",
    "int 20 digits": b"i:99999999999999999999;",
    "int empty": b"i:;",
    "int float text": b"i:1.5;",
    "int unterminated": b"i:1",
    "r:0": b"r:0;",
    "r:1 outermost": b"r:1;",
    "r:99": b"r:99;",
    "r:0 inside": b"a:1:{i:0;r:0;}",
    "r:99 inside": b"a:1:{i:0;r:99;}",
    "R:1 outermost": b"R:1;",
    "R:99 inside": b"a:1:{i:0;R:99;}",
    "float letters": b"d:abc;",
    "float exponent only": b"d:1e;",
    "float hex": b"d:0x1A;",
    "float space": b"d: 1;",
    "float empty": b"d:;",
    "float two dots": b"d:1.5.5;",
    "float lowercase inf": b"d:inf;",
    "float -NAN": b"d:-NAN;",
    "float +INF": b"d:+INF;",
    "float unterminated": b"d:0.5",
    "unknown tag": b"x:1;",
    "unknown tag S": b'S:1:"a";',
    "lowercase o": b'o:8:"stdClass":0:{}',
    "null unterminated": b"N",
    "trailing value": b"N;N;",
    "trailing byte": b"i:1;x",
    "trailing newline": b"i:1;\n",
    "trailing brace": b"a:0:{}}",
    "leading space": b" N;",
    "object negative count": b'O:8:"stdClass":-1:{}',
    "object lying name length": b'O:9:"stdClass":0:{}',
    "object count 10**12": b'O:8:"stdClass":1000000000000:{}',
    "object unclosed": b'O:8:"stdClass":1:{s:1:"a";N;',
    "Serializable lying length": b'C:3:"Foo":10:{abc}',
    "Serializable unclosed": b'C:3:"Foo":3:{abc',
    "Serializable length 10**12": b'C:3:"Foo":1000000000000:{abc}',
    "enum without case": b'E:3:"Foo";',
    "enum empty case": b'E:4:"Foo:";',
    "enum missing ;": b'E:7:"Foo:Bar"',
    "space in array head": b"a:1 :{i:0;N;}",
}

# Hostile input must fail fast: a hang here fails the test (no timed assertions).
pytestmark = pytest.mark.timeout(60)


def _raises_quickly(data: bytes, **kwargs: Any) -> PhpSerializeError:
    # "Quickly" is the module's pytest-timeout: a hang fails; no timed assertion.
    with pytest.raises(PhpSerializeError) as caught:
        loads(data, **kwargs)
    return caught.value


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_raises_php_serialize_error(name: str) -> None:
    error = _raises_quickly(HOSTILE[name])
    assert "offset" in str(error)


#: Inputs PHP 8.2's unserialize() accepts but the codec rejects on purpose:
#: PHP ignores trailing bytes and clamps out-of-range integers to PHP_INT_MAX/MIN
#: (silently changing the value); PHP never writes S: (escaped strings).
PYTHON_STRICTER = {
    "int too big", "int too small", "int 20 digits", "unknown tag S",
    "trailing value", "trailing byte", "trailing newline", "trailing brace",
}  # fmt: skip


def test_php_rejects_the_same_inputs(run_php: Any) -> None:
    rows = run_php("reject.php", [{"b64": base64.b64encode(d).decode()} for d in HOSTILE.values()])
    accepted_by_php = {name for name, row in zip(HOSTILE, rows, strict=True) if row["accepted"]}
    assert accepted_by_php == PYTHON_STRICTER


CORPUS_SAMPLES = [
    "Point",
    "Laravel job",
    "Laravel job queued with delay and chain",
    "enum repeated in list",
    "reference to int (R:)",
    "same object twice (r:)",
    "Legacy nested in array",
    "string utf8",
    "array nested",
    "Carbon",
    "float 0.1",
    "int -9223372036854775808",
]


def test_every_truncation_raises(corpus: dict[str, bytes]) -> None:
    count = 0
    expected = sum(len(corpus[name]) for name in CORPUS_SAMPLES)
    for name in CORPUS_SAMPLES:
        data = corpus[name]
        for cut in range(len(data)):
            try:
                loads(data[:cut])
            except PhpSerializeError:
                count += 1
            else:
                pytest.fail(f"{name} cut at {cut} decoded: {data[:cut]!r}")
    assert count == expected > 2000


def test_100k_unclosed_nesting_raises_without_recursion() -> None:
    for head in (b"a:1:{i:0;", b'O:8:"stdClass":1:{s:1:"a";'):
        _raises_quickly(head * 100_000)
        _raises_quickly(head * 100_000 + b"N;")


def test_100k_closed_nesting_raises_at_the_depth_limit() -> None:
    data = b"a:1:{i:0;" * 100_000 + b"N;" + b"}" * 100_000
    assert "deeper than 4096" in str(_raises_quickly(data))
    objects = b'O:8:"stdClass":1:{s:1:"a";' * 100_000 + b"N;" + b"}" * 100_000
    _raises_quickly(objects)


def test_100k_nesting_decodes_and_encodes_iteratively_when_allowed() -> None:
    data = b"a:1:{i:0;" * 100_000 + b"i:7;" + b"}" * 100_000
    value = loads(data, max_depth=100_000)
    assert dumps(value, max_depth=100_000) == data
    with pytest.raises(PhpSerializeError):
        dumps(value)  # default max_depth, like PHP's unserialize_max_depth
    with pytest.raises(PhpSerializeError):
        loads(data, max_depth=99_999)


def test_depth_limit_is_php_s(run_php: Any) -> None:
    cases = []
    for depth in (4095, 4096, 4097):
        cases.append(b"a:1:{i:0;" * depth + b"N;" + b"}" * depth)
        cases.append(b'O:8:"stdClass":1:{s:1:"a";' * depth + b"N;" + b"}" * depth)
    rows = run_php("reject.php", [{"b64": base64.b64encode(d).decode()} for d in cases])
    php_accepts = [row["accepted"] for row in rows]
    assert php_accepts == [True, True, True, True, False, False]
    ours = []
    for data in cases:
        try:
            loads(data)
            ours.append(True)
        except PhpSerializeError:
            ours.append(False)
    assert ours == php_accepts


@pytest.mark.parametrize(
    "data",
    [
        b's:1000000000000:"abc";',
        b"a:1000000000000:{" + b"i:0;N;" * 1000,
        b'O:8:"stdClass":1000000000000:{',
        b'C:3:"Foo":1000000000000:{abc}',
        b"a:999999999:{" * 3000,
    ],
)
def test_memory_stays_bounded_by_the_input(data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(PhpSerializeError):
            loads(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000 + 50 * len(data), peak


# -- fuzz ---------------------------------------------------------------------------------

_TOKENS = [b"r:1;", b"r:2;", b"R:2;", b"R:3;", b"N;", b"a:0:{}", b"i:0;", b'"', b"}", b"{", b";"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        op = rng.randrange(6)
        if op == 0 and out:  # bit flip
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1:  # insertion
            out[at:at] = bytes([rng.choice(b'0123456789:;{}"aisdNbOCErR-.\0\xff')])
        elif op == 2 and out:  # deletion
            del out[min(at, len(out) - 1)]
        elif op == 3:  # a length/count/index digit changed
            digits = [i for i, c in enumerate(out) if 0x30 <= c <= 0x39]
            if digits:
                out[rng.choice(digits)] = rng.choice(b"0123456789")
        elif op == 4:  # a token spliced in after a ';'
            semis = [i for i, c in enumerate(out) if c == 0x3B]
            if semis:
                i = rng.choice(semis) + 1
                out[i:i] = rng.choice(_TOKENS)
        else:  # a slice duplicated
            i = rng.randrange(len(out) + 1)
            j = min(len(out), i + rng.randint(1, 12))
            out[i:i] = out[i:j]
    return bytes(out)


def _mutants(corpus: dict[str, bytes], count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    seeds = [d for n, d in corpus.items() if not n.startswith("random double") and len(d) < 4000]
    return [_mutate(rng, rng.choice(seeds)) for _ in range(count)]


def _fuzz(mutants: list[bytes]) -> None:
    outcomes = {"decoded": 0, "rejected": 0}
    failures = []
    for mutant in mutants:
        try:
            loads(mutant)
            outcomes["decoded"] += 1
        except PhpSerializeError:
            outcomes["rejected"] += 1
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}: {mutant[:200]!r}")
    assert not failures, f"{len(failures)} mutants:\n" + "\n".join(failures[:20])
    assert outcomes["decoded"] > 100 and outcomes["rejected"] > 1000


def test_fuzzed_corpus_raises_only_php_serialize_error(corpus: dict[str, bytes]) -> None:
    _fuzz(_mutants(corpus, 5000, seed=1))


def test_reference_to_enclosing_list_minimal() -> None:
    data = b"a:1:{i:0;a:2:{i:0;i:1;i:1;R:2;}}"  # PHP: $a = [[1]]; $a[0][1] = &$a[0];
    assert dumps(loads(data)) == data
