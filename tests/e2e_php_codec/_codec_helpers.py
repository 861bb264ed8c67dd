"""Helpers shared by the codec tests: walking decoded values, the documented
PHP → Python mapping, and asking PHP to check Python's bytes."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from support import unavailable

from laravel_bridge.php_serialize import PhpObject, PhpReference, PhpSerializable

RunPhp = Callable[..., list[dict[str, Any]]]

PHP_DIR = Path(__file__).resolve().parent / "php"
#: Random doubles PHP draws for the corpus (seeded), besides the listed floats.
CORPUS_RANDOM_DOUBLES = 2000
CORPUS_SEED = 20240611


def children(value: Any) -> Iterator[Any]:
    if isinstance(value, list | tuple):
        yield from value
    elif isinstance(value, dict):
        yield from value.values()
    elif isinstance(value, PhpObject):
        yield from value.properties.values()
    elif isinstance(value, PhpReference):
        yield value.value


def walk(value: Any) -> Iterator[Any]:
    """Every node once (cycles and shared nodes visited once), iteratively."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, list | tuple | dict | PhpObject | PhpReference):
            if id(node) in seen:
                continue
            seen.add(id(node))
        yield node
        todo.extend(children(node))


def has_nan(value: Any) -> bool:
    return any(isinstance(node, float) and math.isnan(node) for node in walk(value))


def has_objects(value: Any) -> bool:
    """PHP's ``===`` compares objects by identity: no ``===`` across two unserialize()s."""
    return any(isinstance(node, PhpObject | PhpSerializable) for node in walk(value))


def is_cyclic(value: Any) -> bool:
    """Does a container contain itself (PHP's ``==`` then throws "Nesting level too deep")?"""
    containers = (list, tuple, dict, PhpObject, PhpReference)
    done: set[int] = set()
    on_path: set[int] = set()
    stack: list[tuple[Any, Iterator[Any]]] = [(value, children(value))]
    on_path.add(id(value))
    while stack:
        node, kids = stack[-1]
        for kid in kids:
            if not isinstance(kid, containers):
                continue
            if id(kid) in on_path:
                return True
            if id(kid) not in done:
                on_path.add(id(kid))
                stack.append((kid, children(kid)))
                break
        else:
            stack.pop()
            on_path.discard(id(node))
            done.add(id(node))
    return False


def _text(value: bytes | str) -> bytes | str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def php_array_key(key: Any) -> Any:
    """The key ``loads`` gives back for a dict key ``dumps`` wrote into a PHP array."""
    raw = key if isinstance(key, bytes) else str(key).encode("utf-8", "surrogateescape")
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    text = _text(raw)
    if isinstance(text, str) and re.fullmatch(r"-?[1-9][0-9]{0,18}|0", text):
        number = int(text)
        if -(2**63) <= number < 2**63:
            return number
    return text


def normalize(value: Any) -> Any:
    """What ``loads(dumps(value))`` gives by the documented mapping (acyclic values):
    UTF-8 bytes → str, tuple → list, an array key that is a decimal integer string → int
    (as PHP's arrays hold it), a dict keyed 0 … n−1 in order → list."""
    if isinstance(value, bytes | bytearray):
        return _text(bytes(value))
    if isinstance(value, list | tuple):
        return [normalize(item) for item in value]
    if isinstance(value, dict):
        out = {php_array_key(k): normalize(v) for k, v in value.items()}
        if list(out) == list(range(len(out))):
            return list(out.values())
        return out
    if isinstance(value, PhpObject):
        props = {k: normalize(v) for k, v in value.properties.items()}
        return PhpObject(value.class_name, props)
    return value


def need_case(corpus: dict[str, bytes], name: str) -> bytes:
    """A corpus case that needs an optional PHP library (Carbon, Laravel): fail
    under CI=true when it is missing, skip elsewhere."""
    if name not in corpus:
        unavailable(f"corpus case {name!r} needs a PHP library that is not installed")
    return corpus[name]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_in_php(
    run_php: RunPhp, cases: Iterable[tuple[str, bytes, bytes | None]]
) -> dict[str, dict[str, Any]]:
    """One PHP process: unserialize Python's bytes, re-serialize, compare with PHP's value."""
    rows = [
        {"name": name, "py": b64(py), "php": None if theirs is None else b64(theirs)}
        for name, py, theirs in cases
    ]
    out = run_php("check.php", rows)
    assert len(out) == len(rows)
    return {row["name"]: row for row in out}
