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
``unserialize_max_depth`` default), and reads no length it has not checked
against the input, so memory stays bounded by the input's size. Every
malformed input raises :class:`PhpSerializeError` with the byte offset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .exceptions import PhpSerializeError

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
_INT = re.compile(rb"[+-]?[0-9]+\Z")


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


class _Frame:
    """An array or object being filled: where the next key and value go."""

    __slots__ = ("container", "key", "need_key", "obj", "remaining")

    def __init__(self, container: Any, remaining: int, obj: Any) -> None:
        self.container = container  # list, or dict once keys stop being 0..n-1
        self.remaining = remaining
        self.obj = obj  # the PhpObject for O:, else None
        self.need_key = True
        self.key: Any = None


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
        pos = 0
        stack: list[_Frame] = []
        slots: list[Any] = []  # every value but R:, in order: what r:/R: numbers refer to
        where: list[tuple[_Frame | None, Any]] = []  # where each slot's value sits
        result: Any = None
        while True:
            frame = stack[-1] if stack else None
            if frame is not None:
                if frame.remaining == 0:
                    if data[pos : pos + 1] != b"}":
                        raise self.fail(pos, "expected '}'")
                    pos += 1
                    stack.pop()
                    value = frame.obj if frame.obj is not None else frame.container
                    parent = stack[-1] if stack else None
                    if parent is None:
                        result = value
                        break
                    self._store(parent, value)
                    continue
                if frame.need_key:
                    tag = data[pos : pos + 2]
                    if tag == b"i:":
                        end = data.find(b";", pos + 2)
                        raw = data[pos + 2 : end] if end >= 0 else b""
                        if not _INT.match(raw):
                            raise self.fail(pos, "bad integer key")
                        key: Any = int(raw)
                        pos = end + 1
                    elif tag == b"s:":
                        raw_key, pos = self.string(pos + 2)
                        if data[pos : pos + 1] != b";":
                            raise self.fail(pos, "expected ';'")
                        pos += 1
                        key = _name(raw_key) if frame.obj is not None else _text(raw_key)
                    else:
                        raise self.fail(pos, "expected an integer or string key")
                    frame.key = key
                    frame.need_key = False
                    container = frame.container
                    if type(container) is list and key != len(container):
                        frame.container = dict(enumerate(container))
                        if frame.obj is not None:
                            frame.obj.properties = frame.container
                    continue
            # A value.
            if pos >= n:
                raise self.fail(pos, "unexpected end of data")
            tag_byte = data[pos]
            if data[pos + 1 : pos + 2] != b":" and tag_byte != 0x4E:  # 'N'
                raise self.fail(pos, "expected ':' after the type tag")
            value = None
            opened: _Frame | None = None
            if tag_byte == 0x73:  # s
                raw, pos = self.string(pos + 2)
                if data[pos : pos + 1] != b";":
                    raise self.fail(pos, "expected ';'")
                pos += 1
                value = _text(raw)
            elif tag_byte == 0x69:  # i
                end = data.find(b";", pos + 2)
                raw = data[pos + 2 : end] if end >= 0 else b""
                if not _INT.match(raw):
                    raise self.fail(pos, "bad integer")
                value = int(raw)
                if not INT_MIN <= value <= INT_MAX:
                    raise self.fail(pos, "integer out of the 64-bit range")
                pos = end + 1
            elif tag_byte == 0x4E:  # N
                if data[pos + 1 : pos + 2] != b";":
                    raise self.fail(pos, "bad null")
                pos += 2
            elif tag_byte == 0x62:  # b
                flag = data[pos + 2 : pos + 4]
                if flag == b"1;":
                    value = True
                elif flag == b"0;":
                    value = False
                else:
                    raise self.fail(pos, "bad boolean")
                pos += 4
            elif tag_byte == 0x64:  # d
                end = data.find(b";", pos + 2)
                raw = data[pos + 2 : end] if end >= 0 else b""
                value = _float(raw)
                if value is None:
                    raise self.fail(pos, "bad float")
                pos = end + 1
            elif tag_byte == 0x61:  # a
                count, end = self.number(pos + 2, 0x3A, "array size")
                if data[end + 1 : end + 2] != b"{":
                    raise self.fail(pos, "expected '{'")
                pos = end + 2
                opened = _Frame([], count, None)
                value = opened.container
            elif tag_byte == 0x4F:  # O
                raw_class, end = self.string(pos + 2)
                if data[end : end + 1] != b":":
                    raise self.fail(end, "expected ':'")
                count, end = self.number(end + 1, 0x3A, "property count")
                if data[end + 1 : end + 2] != b"{":
                    raise self.fail(pos, "expected '{'")
                pos = end + 2
                props: dict[str | int, Any] = {}
                value = PhpObject(_name(raw_class), props)
                opened = _Frame(props, count, value)
                opened.container = props  # objects keep a dict from the start
            elif tag_byte == 0x43:  # C
                raw_class, end = self.string(pos + 2)
                if data[end : end + 1] != b":":
                    raise self.fail(end, "expected ':'")
                length, end = self.number(end + 1, 0x3A, "Serializable data length")
                start = end + 2
                stop = start + length
                if data[end + 1 : start] != b"{" or stop >= n or data[stop] != 0x7D:
                    raise self.fail(pos, "bad Serializable data (length does not match)")
                value = PhpSerializable(_name(raw_class), data[start:stop])
                pos = stop + 1
            elif tag_byte == 0x45:  # E
                raw_enum, end = self.string(pos + 2)
                if data[end : end + 1] != b";":
                    raise self.fail(end, "expected ';'")
                class_name, sep, case = _name(raw_enum).partition(":")
                if not sep or not class_name or not case:
                    raise self.fail(pos, "bad enum (expected Class:Case)")
                value = PhpEnum(class_name, case)
                pos = end + 1
            elif tag_byte in (0x72, 0x52):  # r, R
                end = data.find(b";", pos + 2)
                raw = data[pos + 2 : end] if end >= 0 else b""
                if not raw.isdigit() or len(raw) > 19:
                    raise self.fail(pos, "bad back-reference")
                index = int(raw) - 1
                if not 0 <= index < len(slots):
                    raise self.fail(pos, "back-reference to a value that does not exist")
                pos = end + 1
                if tag_byte == 0x72:
                    value = slots[index]
                else:
                    target = slots[index]
                    if not isinstance(target, PhpReference):
                        target = PhpReference(target)
                        slots[index] = target
                        holder, at = where[index]
                        if holder is not None:
                            holder.container[at] = target
                        else:  # R: to the top-level value: only from inside itself
                            raise self.fail(pos, "reference to the outermost value")
                    value = target
                    if frame is None:
                        raise self.fail(pos, "a reference cannot be the outermost value")
                    self._store(frame, value)
                    continue
            else:
                raise self.fail(pos, f"unknown type tag {chr(tag_byte)!r}")
            slots.append(value)
            where.append((frame, frame.key if frame is not None else None))
            if opened is not None:
                if len(stack) >= self.max_depth:
                    raise self.fail(pos, f"nesting deeper than {self.max_depth}")
                stack.append(opened)
                continue
            if frame is None:
                result = value
                break
            self._store(frame, value)
        if pos != n:
            raise self.fail(pos, "trailing data after the value")
        return result

    @staticmethod
    def _store(frame: _Frame, value: Any) -> None:
        container = frame.container
        if type(container) is list:
            container.append(value)
        else:
            container[frame.key] = value
        frame.remaining -= 1
        frame.need_key = True


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
    """Decode PHP ``serialize()`` output. Raises :class:`PhpSerializeError` on bad input."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif not isinstance(data, bytes):
        data = bytes(data)
    return _Reader(data, max_depth).loads()


# -- encoding -----------------------------------------------------------------------------


def php_float(value: float) -> str:
    """PHP 8's text for a double in ``serialize()`` (``serialize_precision = -1``)."""
    if value != value:
        return "NAN"
    if value in (math.inf, -math.inf):
        return "INF" if value > 0 else "-INF"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    text = repr(value)
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


def _utf8(value: str | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogateescape")


class _Writer:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.slot = 0
        self.memo: dict[Any, int] = {}
        self.keep: list[Any] = []  # keeps memoized objects alive so ids stay unique

    def key(self, key: Any) -> None:
        if type(key) is int or (isinstance(key, int) and not isinstance(key, bool)):
            self.out.append(b"i:%d;" % key)
        elif isinstance(key, (str, bytes)):
            raw = _utf8(key)
            self.out.append(b's:%d:"%s";' % (len(raw), raw))
        else:
            raise PhpSerializeError(f"array keys must be int or str, got {type(key).__name__}")

    def value(self, value: Any) -> Iterator[tuple[Any, Any]] | None:
        """Write ``value``; for a container, write its head and return its items."""
        self.slot += 1
        out = self.out
        kind = type(value)
        if value is None:
            out.append(b"N;")
        elif kind is bool:
            out.append(b"b:1;" if value else b"b:0;")
        elif kind is int or (isinstance(value, int) and not isinstance(value, bool)):
            if not INT_MIN <= value <= INT_MAX:
                raise PhpSerializeError(f"integer {value} does not fit PHP's 64-bit int")
            out.append(b"i:%d;" % value)
        elif kind is float:
            out.append(b"d:" + php_float(value).encode("ascii") + b";")
        elif kind is str or kind is bytes or isinstance(value, (str, bytes, bytearray)):
            raw = _utf8(value) if not isinstance(value, bytearray) else bytes(value)
            out.append(b's:%d:"%s";' % (len(raw), raw))
        elif kind is list or kind is tuple:
            out.append(b"a:%d:{" % len(value))
            return enumerate(value)
        elif kind is dict:
            out.append(b"a:%d:{" % len(value))
            items: Iterator[tuple[Any, Any]] = iter(value.items())
            return items
        elif kind is PhpObject:
            seen = self.memo.get(id(value))
            if seen is not None:
                out.append(b"r:%d;" % seen)
                return None
            self.memo[id(value)] = self.slot
            self.keep.append(value)
            cls = _utf8(value.class_name)
            out.append(b'O:%d:"%s":%d:{' % (len(cls), cls, len(value.properties)))
            props: Iterator[tuple[Any, Any]] = iter(value.properties.items())
            return props
        elif kind is PhpEnum:
            enum_key = ("enum", value.class_name, value.case)
            seen = self.memo.get(enum_key)
            if seen is not None:
                out.append(b"r:%d;" % seen)
                return None
            self.memo[enum_key] = self.slot
            raw = _utf8(f"{value.class_name}:{value.case}")
            out.append(b'E:%d:"%s";' % (len(raw), raw))
        elif kind is PhpSerializable:
            seen = self.memo.get(id(value))
            if seen is not None:
                out.append(b"r:%d;" % seen)
                return None
            self.memo[id(value)] = self.slot
            self.keep.append(value)
            cls = _utf8(value.class_name)
            out.append(b'C:%d:"%s":%d:{%s}' % (len(cls), cls, len(value.data), value.data))
        elif kind is PhpReference:
            seen = self.memo.get(id(value))
            if seen is not None:
                self.slot -= 1  # PHP does not count an R: as a value
                out.append(b"R:%d;" % seen)
                return None
            self.memo[id(value)] = self.slot
            self.keep.append(value)
            self.slot -= 1  # the boxed value takes this slot
            return self.value(value.value)
        else:
            raise PhpSerializeError(
                f"cannot serialize {kind.__name__}: use None, bool, int, float, str, bytes, "
                "list, dict, PhpObject, PhpEnum, PhpSerializable or PhpReference"
            )
        return None


def dumps(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """Encode ``value`` as PHP ``serialize()`` would. Raises :class:`PhpSerializeError`."""
    writer = _Writer()
    first = writer.value(value)
    if first is not None:
        stack: list[Iterator[tuple[Any, Any]]] = [first]
        key_out = writer.key
        value_out = writer.value
        out = writer.out
        while stack:
            for key, item in stack[-1]:
                key_out(key)
                items = value_out(item)
                if items is not None:
                    if len(stack) >= max_depth:
                        raise PhpSerializeError(f"nesting deeper than {max_depth}")
                    stack.append(items)
                    break
            else:
                stack.pop()
                out.append(b"}")
    return b"".join(writer.out)
