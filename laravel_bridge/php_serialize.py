"""PHP's ``serialize()`` format, complete: ``loads`` and ``dumps``, byte-exact with PHP 8.

Value mapping (PHP → Python):

* ``N;`` → ``None``; ``b:`` → ``bool``; ``i:`` → ``int``; ``d:`` → ``float``
  (``INF``, ``-INF``, ``NAN``, ``-0`` included);
* ``s:`` → ``str`` when the bytes are valid UTF-8, else ``bytes`` (PHP strings
  are bytes; either way ``dumps`` writes the same bytes back);
* ``a:`` → ``list`` when the keys are exactly ``0 … n−1`` in order, else
  ``dict`` (int and str keys, order kept);
* ``O:`` → :class:`PhpObject` (class name + properties keyed by PHP's mangled
  names: ``"name"``, ``"\\0*\\0name"``, ``"\\0Class\\0name"``);
* ``C:`` → :class:`PhpSerializable` (class name + its raw ``serialize()`` data);
* ``E:`` → :class:`PhpEnum`;
* ``r:`` → the same Python object again (identity kept);
* ``R:`` → a :class:`PhpReference` box shared by every position of the PHP
  reference set (``&``).

The decoder never instantiates a Python class named by the input, never
recurses (nesting is bounded by ``max_depth``, PHP's own
``unserialize_max_depth`` default; past it :class:`.PayloadTooDeep`, a
:class:`PhpSerializeError`), and reads no length it has not checked
against the input, so memory stays bounded by the input's size. Every
malformed input raises :class:`PhpSerializeError` with the byte offset.
The encoder does not recurse either, and refuses nesting past ``max_depth``
with the same :class:`.PayloadTooDeep`. (Laravel's jobs are read with a much
lower limit: :data:`laravel_bridge.payload.MAX_COMMAND_DEPTH`.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .exceptions import PayloadTooDeep, PhpSerializeError

__all__ = [
    "PhpEnum",
    "PhpObject",
    "PhpReference",
    "PhpSerializable",
    "PhpSerializeError",
    "dumps",
    "loads",
    "private",
    "protected",
]

#: PHP's ``unserialize_max_depth`` default.
DEFAULT_MAX_DEPTH = 4096
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

_FLOAT = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
# One match reads the head of any common token; its group number says which.
# (C:, E:, r:, R: and malformed input take the slow path, _Reader.rare.)
_TOKEN = re.compile(
    rb's:([0-9]{1,19}):"|i:([+-]?[0-9]{1,19});|a:([0-9]{1,19}):\{|O:([0-9]{1,19}):"'
    rb"|d:([^;]{1,64});|b:([01]);|(N;)|(\})"
)
_OBJECT_TAIL = re.compile(rb'":([0-9]{1,19}):\{')


@dataclass(eq=True)
class PhpObject:
    """A PHP object: its class name and its properties, in order.

    Property keys are PHP's mangled names: ``"name"`` (public),
    ``"\\0*\\0name"`` (protected), ``"\\0Class\\0name"`` (private to
    ``Class``). :meth:`get` and ``obj["name"]`` read by plain name whatever the
    visibility.
    """

    class_name: str
    properties: dict[str | int, Any] = field(default_factory=dict)

    def _mangled(self, name: str) -> str | int | None:
        if name in self.properties:
            return name
        for key in self.properties:
            if isinstance(key, str) and key.startswith("\0") and key.rsplit("\0", 1)[-1] == name:
                return key
        return None

    def get(self, name: str, default: Any = None) -> Any:
        """The property ``name`` (plain name, any visibility), or ``default``."""
        key = self._mangled(name)
        return default if key is None else self.properties[key]

    def __getitem__(self, name: str) -> Any:
        key = self._mangled(name)
        if key is None:
            raise KeyError(name)
        return self.properties[key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._mangled(name) is not None

    def plain(self) -> dict[str, Any]:
        """Properties by plain name (visibility stripped), in order."""
        return {plain_name(k): v for k, v in self.properties.items()}

    def visibility(self, name: str) -> str:
        """``public``, ``protected`` or ``private`` for the property ``name``."""
        key = self._mangled(name)
        if key is None:
            raise KeyError(name)
        if isinstance(key, str) and key.startswith("\0*\0"):
            return "protected"
        if isinstance(key, str) and key.startswith("\0"):
            return "private"
        return "public"


@dataclass(frozen=True)
class PhpEnum:
    """A PHP 8.1 enum case (``E:``). PHP enum cases are singletons: equal means same."""

    class_name: str
    case: str


@dataclass(eq=True)
class PhpSerializable:
    """An object of a class implementing ``Serializable`` (``C:``): class name and raw data."""

    class_name: str
    data: bytes


@dataclass(eq=False)
class PhpReference:
    """A PHP reference (``&``): every position holding this same box is one reference set."""

    value: Any

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PhpReference):
            return bool(self.value == other.value)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def protected(name: str) -> str:
    """The mangled key of a protected property ``name``."""
    return f"\0*\0{name}"


def private(class_name: str, name: str) -> str:
    """The mangled key of a property ``name`` private to ``class_name``."""
    return f"\0{class_name}\0{name}"


def plain_name(key: str | int) -> str:
    """A property's plain name from its mangled key."""
    key = str(key)
    return key.rsplit("\0", 1)[-1] if key.startswith("\0") else key


# -- decoding -----------------------------------------------------------------------------


def _text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _name(raw: bytes) -> str:
    # Class and property names: str always; undecodable bytes survive via surrogateescape.
    return raw.decode("utf-8", "surrogateescape")


class _Reader:
    __slots__ = ("data", "max_depth", "n")

    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = data
        self.n = len(data)
        self.max_depth = max_depth

    def fail(self, pos: int, what: str) -> PhpSerializeError:
        return PhpSerializeError(f"{what} at offset {pos} of {self.n} bytes")

    def number(self, start: int, end_char: int, what: str) -> tuple[int, int]:
        """An unsigned number from ``start`` up to ``end_char``: (value, index of the end)."""
        end = self.data.find(end_char, start)
        raw = self.data[start:end] if end >= 0 else b""
        if end < 0 or not raw.isdigit() or len(raw) > 19:
            raise self.fail(start, f"bad {what}")
        return int(raw), end

    def string(self, pos: int) -> tuple[bytes, int]:
        """``s:N:"...";`` (or the quoted part of O:/C:/E:) at ``pos`` = after the tag's colon."""
        length, colon = self.number(pos, 0x3A, "string length")
        start = colon + 2
        end = start + length
        data = self.data
        if data[colon + 1 : start] != b'"' or end + 1 > self.n or data[end : end + 1] != b'"':
            raise self.fail(pos, "bad string (length does not match)")
        return data[start:end], end + 1

    def loads(self) -> Any:
        data, n = self.data, self.n
        match = _TOKEN.match
        pos = 0
        # Storing a finished value into its frame is written out inline at its three
        # places (closing '}', an R:, any other value): this loop is the hot path.
        # A frame is [container, remaining, obj, key, slot, box]: an array (list, or
        # dict once keys stop being 0..n-1) or an object's property dict being filled;
        # its value's slot number, and the PhpReference boxing it if an R: inside it
        # pointed back at it while it was still open.
        stack: list[list[Any]] = []
        frame: list[Any] | None = None
        expect_key = False
        slots: list[Any] = []  # every value but R:, in order: what r:/R: numbers refer to
        # Where each slot's value sits, for R: to box it in place (only if R: may occur).
        where: list[tuple[list[Any] | None, Any]] | None = [] if b"R:" in data else None
        while True:
            if frame is not None:
                if frame[1] == 0:
                    if data[pos : pos + 1] != b"}":
                        raise self.fail(pos, "expected '}'")
                    pos += 1
                    stack.pop()
                    value = frame[5] or (frame[0] if frame[2] is None else frame[2])
                    if not stack:
                        result = value
                        break
                    frame = stack[-1]
                    container = frame[0]
                    if type(container) is list:
                        container.append(value)
                    else:
                        container[frame[3]] = value
                    frame[1] -= 1
                    expect_key = True
                    continue
                if expect_key:
                    m = match(data, pos)
                    if m is None:
                        raise self.fail(pos, "expected an integer or string key")
                    kind = m.lastindex
                    if kind == 2:
                        key: Any = int(m.group(2))
                        if not INT_MIN <= key <= INT_MAX:
                            raise self.fail(pos, "integer key out of the 64-bit range")
                        pos = m.end()
                    elif kind == 1:
                        start = m.end()
                        stop = start + int(m.group(1))
                        if data[stop : stop + 2] != b'";':
                            raise self.fail(pos, "bad string key (length does not match)")
                        raw = data[start:stop]
                        key = _name(raw) if frame[2] is not None else _text(raw)
                        pos = stop + 2
                    else:
                        raise self.fail(pos, "expected an integer or string key")
                    frame[3] = key
                    expect_key = False
                    container = frame[0]
                    if type(container) is list and key != len(container):
                        frame[0] = container = dict(enumerate(container))
                        if frame[2] is not None:
                            frame[2].properties = container
                        elif frame[5] is not None:
                            frame[5].value = container
                        elif where is not None:
                            slots[frame[4]] = container
                    continue
            # A value.
            m = match(data, pos)
            opened: list[Any] | None = None
            if m is None:
                value, pos, boxed = self.rare(pos, stack, slots, where)
                if boxed:  # an R:, which takes no slot
                    if frame is None:
                        raise self.fail(pos, "a reference cannot be the outermost value")
                    container = frame[0]
                    if type(container) is list:
                        container.append(value)
                    else:
                        container[frame[3]] = value
                    frame[1] -= 1
                    expect_key = True
                    continue
            else:
                kind = m.lastindex
                if kind == 1:  # s:
                    start = m.end()
                    stop = start + int(m.group(1))
                    if data[stop : stop + 2] != b'";':
                        raise self.fail(pos, "bad string (length does not match)")
                    raw = data[start:stop]
                    try:
                        value = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        value = raw
                    pos = stop + 2
                elif kind == 2:  # i:
                    value = int(m.group(2))
                    if not INT_MIN <= value <= INT_MAX:
                        raise self.fail(pos, "integer out of the 64-bit range")
                    pos = m.end()
                elif kind == 3:  # a:
                    value = []
                    opened = [value, int(m.group(3)), None, None, len(slots), None]
                    pos = m.end()
                elif kind == 4:  # O:
                    start = m.end()
                    stop = start + int(m.group(4))
                    tail = _OBJECT_TAIL.match(data, stop)
                    if tail is None:
                        raise self.fail(pos, "bad object header")
                    props: dict[str | int, Any] = {}
                    value = PhpObject(_name(data[start:stop]), props)
                    opened = [props, int(tail.group(1)), value, None, len(slots), None]
                    pos = tail.end()
                elif kind == 5:  # d:
                    value = _float(m.group(5))
                    if value is None:
                        raise self.fail(pos, "bad float")
                    pos = m.end()
                elif kind == 6:  # b:
                    value = m.group(6) == b"1"
                    pos = m.end()
                elif kind == 7:  # N;
                    value = None
                    pos = m.end()
                else:
                    raise self.fail(pos, "unexpected '}'")
            slots.append(value)
            if where is not None:
                where.append((frame, frame[3] if frame is not None else None))
            if opened is not None:
                if len(stack) >= self.max_depth:
                    raise PayloadTooDeep(
                        f"nesting deeper than {self.max_depth} at offset {pos} of {self.n} bytes"
                    )
                stack.append(opened)
                frame = opened
                expect_key = True
                continue
            if frame is None:
                result = value
                break
            container = frame[0]
            if type(container) is list:
                container.append(value)
            else:
                container[frame[3]] = value
            frame[1] -= 1
            expect_key = True
        if pos != n:
            raise self.fail(pos, "trailing data after the value")
        return result

    def rare(
        self,
        pos: int,
        stack: list[list[Any]],
        slots: list[Any],
        where: list[tuple[list[Any] | None, Any]] | None,
    ) -> tuple[Any, int, bool]:
        """C:, E:, r: and R: (and every malformed token): (value, new position, is an R:)."""
        data, n = self.data, self.n
        if pos >= n:
            raise self.fail(pos, "unexpected end of data")
        tag_byte = data[pos]
        if data[pos + 1 : pos + 2] != b":":
            raise self.fail(pos, f"bad or unknown value {data[pos : pos + 12]!r}")
        if tag_byte == 0x43:  # C
            raw_class, end = self.string(pos + 2)
            if data[end : end + 1] != b":":
                raise self.fail(end, "expected ':'")
            length, end = self.number(end + 1, 0x3A, "Serializable data length")
            start = end + 2
            stop = start + length
            if data[end + 1 : start] != b"{" or stop >= n or data[stop] != 0x7D:
                raise self.fail(pos, "bad Serializable data (length does not match)")
            return PhpSerializable(_name(raw_class), data[start:stop]), stop + 1, False
        if tag_byte == 0x45:  # E
            raw_enum, end = self.string(pos + 2)
            if data[end : end + 1] != b";":
                raise self.fail(end, "expected ';'")
            class_name, sep, case = _name(raw_enum).partition(":")
            if not sep or not class_name or not case:
                raise self.fail(pos, "bad enum (expected Class:Case)")
            return PhpEnum(class_name, case), end + 1, False
        if tag_byte in (0x72, 0x52):  # r, R
            end = data.find(b";", pos + 2)
            raw = data[pos + 2 : end] if end >= 0 else b""
            if not raw.isdigit() or len(raw) > 19:
                raise self.fail(pos, "bad back-reference")
            index = int(raw) - 1
            if not 0 <= index < len(slots):
                raise self.fail(pos, "back-reference to a value that does not exist")
            target = slots[index]
            if tag_byte == 0x72:  # r: the same object again (never a PHP reference)
                if isinstance(target, PhpReference):
                    target = target.value
                if not isinstance(target, (PhpObject, PhpEnum, PhpSerializable)):
                    raise self.fail(pos, "r: back-reference to something that is not an object")
                return target, end + 1, False
            if isinstance(target, PhpReference):
                return target, end + 1, True
            box = PhpReference(target)
            if isinstance(target, (PhpObject, PhpEnum, PhpSerializable)):
                # PHP writes R: to an object it has seen; boxing the earlier position
                # is not needed to write the same bytes again (see dumps).
                slots[index] = box
                return box, end + 1, True
            assert where is not None  # R: in the data means positions are tracked
            open_frame = next((f for f in stack if f[4] == index and f[2] is None), None)
            if open_frame is not None:  # R: to an array still being filled: box it on close
                open_frame[5] = box
            else:
                holder, at = where[index]
                if holder is None:
                    raise self.fail(pos, "reference to the outermost array")
                holder[0][at] = box
            slots[index] = box
            return box, end + 1, True
        if tag_byte in b"sia":
            raise self.fail(pos, f"bad {chr(tag_byte)}: value (malformed number or length)")
        if tag_byte in b"Odb":
            raise self.fail(pos, f"bad {chr(tag_byte)}: value")
        raise self.fail(pos, f"unknown type tag {chr(tag_byte)!r}")


def _float(raw: bytes) -> float | None:
    if raw == b"INF":
        return math.inf
    if raw == b"-INF":
        return -math.inf
    if raw == b"NAN":
        return math.nan
    if not _FLOAT.match(raw):
        return None
    return float(raw)


def loads(data: bytes | bytearray | memoryview | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode PHP ``serialize()`` output. Raises :class:`PhpSerializeError` on bad input
    (:class:`.PayloadTooDeep` past ``max_depth``)."""
    if isinstance(data, str):
        try:  # bytes that are not UTF-8 travel in a str as surrogate escapes
            data = data.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise PhpSerializeError(f"the text holds a lone surrogate: {exc}") from exc
    elif isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    elif not isinstance(data, bytes):  # bytes(n) of an int would allocate n bytes
        raise TypeError(f"PHP serialize() data is bytes or str, not {type(data).__name__}")
    return _Reader(data, max_depth).loads()


# -- encoding -----------------------------------------------------------------------------


def php_float(value: float) -> str:
    """PHP 8's text for a double in ``serialize()`` (``serialize_precision = -1``)."""
    text = repr(value)
    if "e" not in text and "n" not in text:
        # Python's repr and php_gcvt agree on plain notation between 1e-4 and 1e16;
        # PHP just drops a ".0".
        return text[:-2] if text.endswith(".0") else text
    if value != value:
        return "NAN"
    if value in (math.inf, -math.inf):
        return "INF" if value > 0 else "-INF"
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    every = whole + frac
    stripped = every.lstrip("0")
    decpt = len(whole) + (int(exp) if exp else 0) - (len(every) - len(stripped))
    digits = stripped.rstrip("0") or "0"
    # php_gcvt with mode 0 (shortest round trip), ndigit 17.
    if (decpt < -3) if decpt < 0 else (decpt > 17):
        e = decpt - 1
        out = digits[0] + "." + (digits[1:] or "0") + "E" + ("-" if e < 0 else "+") + str(abs(e))
    elif decpt <= 0:
        out = "0." + "0" * (-decpt) + digits
    else:
        head = digits[:decpt].ljust(decpt, "0")
        tail = digits[decpt:]
        out = head + ("." + tail if tail else "")
    return sign + out


_SUPPORTED = (
    "use None, bool, int, float, str, bytes, list, tuple, dict, PhpObject, PhpEnum, "
    "PhpSerializable or PhpReference"
)


# PHP stores an array key that is a canonical decimal integer string as an int.
_INT_KEY = re.compile(r"-?[1-9][0-9]{0,18}|0")


def _array_key(key: Any) -> Any:
    """The key PHP's array holds for ``key``: ints stay, "5" becomes 5, text stays text."""
    if type(key) is str:
        if key and key[0] in "-0123456789" and _INT_KEY.fullmatch(key):
            number = int(key)
            if INT_MIN <= number <= INT_MAX:
                return number
        return key
    if isinstance(key, bytes):
        try:
            return _array_key(key.decode("utf-8", "surrogateescape"))
        except UnicodeDecodeError:  # pragma: no cover - surrogateescape never fails
            return key
    return key


def _array_items(array: dict[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """A dict's items with keys as PHP's array keeps them; refuses keys PHP would merge."""
    for key in array:  # the common case: int keys and str keys that cannot be numbers
        kind = type(key)
        if kind is str:
            if key and key[0] in "-0123456789":
                break
        elif kind is not int:
            break
    else:
        return iter(array.items())
    keys = [_array_key(k) for k in array]
    if len(set(keys)) != len(keys):
        raise PhpSerializeError(
            "two keys of a dict are one key in a PHP array (e.g. 'a' and b'a', or '5' and 5)"
        )
    return zip(keys, array.values(), strict=True)


def dumps(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """Encode ``value`` as PHP ``serialize()`` would. Raises :class:`PhpSerializeError`
    (:class:`.PayloadTooDeep` for nesting past ``max_depth``, a cycle included).

    Objects met again are written as ``r:`` (same Python object), enum cases
    met again as ``r:`` (equal cases: PHP enum cases are singletons), and a
    :class:`PhpReference` met again as ``R:``, numbering values as PHP does.
    """
    try:
        return _dumps(value, max_depth)
    except UnicodeEncodeError as exc:
        raise PhpSerializeError(f"a string cannot be written as UTF-8: {exc}") from exc


#: ``s:N:"key";`` of string keys seen before: property names repeat in every job.
_KEY_TOKENS: dict[str, bytes] = {}
_KEY_TOKENS_MAX = 4096


def _dumps(value: Any, max_depth: int) -> bytes:
    out: list[bytes] = []
    append = out.append
    slot = 0  # PHP numbers every value written, except R:
    memo: dict[Any, int] = {}
    keep: list[Any] = []  # memoized objects stay alive, so their ids stay unique
    stack: list[Iterator[tuple[Any, Any]]] = []
    items: Iterator[tuple[Any, Any]] = iter(((None, value),))
    top = True
    while True:
        for key, item in items:
            if top:
                top = False
            else:
                kt = type(key)
                if kt is str:
                    encoded = _KEY_TOKENS.get(key)
                    if encoded is None:
                        raw = key.encode("utf-8", "surrogateescape")
                        encoded = b's:%d:"%s";' % (len(raw), raw)
                        if len(_KEY_TOKENS) < _KEY_TOKENS_MAX and len(raw) <= 64:
                            _KEY_TOKENS[key] = encoded
                    append(encoded)
                elif kt is int:
                    if not INT_MIN <= key <= INT_MAX:
                        raise PhpSerializeError(f"integer key {key} does not fit PHP's 64-bit int")
                    append(b"i:%d;" % key)
                elif isinstance(key, bytes):
                    append(b's:%d:"%s";' % (len(key), key))
                elif isinstance(key, int) and not isinstance(key, bool):
                    if not INT_MIN <= key <= INT_MAX:
                        raise PhpSerializeError(f"integer key {key} does not fit PHP's 64-bit int")
                    append(b"i:%d;" % key)
                else:
                    raise PhpSerializeError(
                        f"array keys must be int or str, got {type(key).__name__}"
                    )
            while True:  # a value (loops only to unwrap a PhpReference)
                slot += 1
                t = type(item)
                opened: Iterator[tuple[Any, Any]] | None = None
                if t is str:
                    raw = item.encode("utf-8", "surrogateescape")
                    append(b's:%d:"%s";' % (len(raw), raw))
                elif t is int:
                    if not INT_MIN <= item <= INT_MAX:
                        raise PhpSerializeError(f"integer {item} does not fit PHP's 64-bit int")
                    append(b"i:%d;" % item)
                elif item is None:
                    append(b"N;")
                elif t is bool:
                    append(b"b:1;" if item else b"b:0;")
                elif t is float:
                    append(b"d:%s;" % php_float(item).encode("ascii"))
                elif t is list or t is tuple:
                    append(b"a:%d:{" % len(item))
                    opened = enumerate(item)
                elif t is dict:
                    append(b"a:%d:{" % len(item))
                    opened = _array_items(item)
                elif t is PhpObject:
                    seen = memo.get(id(item))
                    if seen is not None:
                        append(b"r:%d;" % seen)
                    else:
                        memo[id(item)] = slot
                        keep.append(item)
                        cls = item.class_name.encode("utf-8", "surrogateescape")
                        append(b'O:%d:"%s":%d:{' % (len(cls), cls, len(item.properties)))
                        opened = iter(item.properties.items())
                elif t is PhpEnum:
                    enum_key = ("enum", item.class_name, item.case)
                    seen = memo.get(enum_key)
                    if seen is not None:
                        append(b"r:%d;" % seen)
                    else:
                        memo[enum_key] = slot
                        raw = f"{item.class_name}:{item.case}".encode("utf-8", "surrogateescape")
                        append(b'E:%d:"%s";' % (len(raw), raw))
                elif t is PhpReference:
                    inner = item.value
                    # PHP keys a reference to an object by the object itself.
                    ref_key = (
                        id(inner)
                        if type(inner) in (PhpObject, PhpSerializable)
                        else ("enum", inner.class_name, inner.case)
                        if type(inner) is PhpEnum
                        else id(item)
                    )
                    seen = memo.get(ref_key)
                    if seen is not None:
                        slot -= 1  # R: takes no number
                        append(b"R:%d;" % seen)
                    else:
                        if ref_key == id(item):
                            memo[ref_key] = slot
                            keep.append(item)
                        slot -= 1  # the boxed value takes this number
                        item = inner
                        continue
                elif t is PhpSerializable:
                    seen = memo.get(id(item))
                    if seen is not None:
                        append(b"r:%d;" % seen)
                    else:
                        memo[id(item)] = slot
                        keep.append(item)
                        cls = item.class_name.encode("utf-8", "surrogateescape")
                        data = item.data
                        append(b'C:%d:"%s":%d:{%s}' % (len(cls), cls, len(data), data))
                elif isinstance(item, (bytes, bytearray, memoryview)):
                    raw = bytes(item)
                    append(b's:%d:"%s";' % (len(raw), raw))
                elif isinstance(item, str):
                    raw = str(item).encode("utf-8", "surrogateescape")
                    append(b's:%d:"%s";' % (len(raw), raw))
                elif isinstance(item, int) and not isinstance(item, bool):
                    if not INT_MIN <= item <= INT_MAX:
                        raise PhpSerializeError(f"integer {item} does not fit PHP's 64-bit int")
                    append(b"i:%d;" % item)
                elif isinstance(item, float):
                    append(b"d:%s;" % php_float(float(item)).encode("ascii"))
                else:
                    raise PhpSerializeError(f"cannot serialize {t.__name__}: {_SUPPORTED}")
                break
            if opened is not None:
                if len(stack) >= max_depth:
                    raise PayloadTooDeep(f"nesting deeper than {max_depth}")
                stack.append(items)
                items = opened
                break
        else:
            if not stack:
                return b"".join(out)
            append(b"}")
            items = stack.pop()
