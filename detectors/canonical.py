"""Canonical JSON: the exact text OpenClaw's stableStringify writes, so hashes match.

Rules: docs/semantics.md §3.

A Python `str` stands for the JavaScript string of its code points' UTF-16 units: an astral
character and a surrogate pair written as two code points are the same JavaScript string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, ClassVar, Final, TypeAlias

import orjson
from orjson import dumps as _orjson_dumps  # compiled: a global, no module getattr a call

from loopguard_fleet.detectors.errors import DetectorError

__all__ = [
    "JSON",
    "SURROGATE",
    "UNDEFINED",
    "JSONLike",
    "canonical_json",
    "canonical_json_bytes",
    "js_number_text",
]

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None


class _Undefined:
    """JavaScript's `undefined`: a field the hashing reads that is absent."""

    __slots__ = ()
    _instance: ClassVar[_Undefined | None] = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = _Undefined()

# What canonical JSON accepts: JSON plus JavaScript's undefined, tuples and other mappings and
# sequences (written as objects and arrays). Mapping and Sequence make JSON values fit as is.
JSONLike: TypeAlias = (
    bool | int | float | str | _Undefined | Sequence["JSONLike"] | Mapping[str, "JSONLike"] | None
)

_MAX_SAFE_INT: Final = 2**53
_INF: Final = float("inf")
# The surrogates by chr(): mypyc (setup.py) cannot compile a literal that holds one.
#: Any surrogate code point (a lone one, or half of a pair written as two code points).
SURROGATE: Final = re.compile(f"[{chr(0xD800)}-{chr(0xDFFF)}]")
_SURROGATE_PAIR: Final = re.compile(f"[{chr(0xD800)}-{chr(0xDBFF)}][{chr(0xDC00)}-{chr(0xDFFF)}]")
# Code points from U+D800 up sort differently by UTF-16 unit than by code point.
_UTF16_ORDER_DIFFERS: Final = re.compile(f"[{chr(0xD800)}-{chr(0x10FFFF)}]")
# Containers nested deeper than this go to the iterative encoder: orjson refuses them anyway
# (past 255 levels), and a cycle must end without RecursionError, which the compiled engine's
# recursion does not raise (the C stack would overflow).
_MAX_DEPTH: Final = 255


def _join_pair(match: re.Match[str]) -> str:
    pair = match.group()
    high, low = pair[0], pair[1]
    return chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(low) - 0xDC00))


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _encode_str(s: str) -> str:
    """JSON.stringify(s): the C encoder matches JavaScript except for surrogates."""
    if s.isascii() or SURROGATE.search(s) is None:
        return encode_basestring(s)
    # A pair is one astral character in JavaScript; a lone surrogate is escaped.
    return SURROGATE.sub(_escape_surrogate, encode_basestring(_SURROGATE_PAIR.sub(_join_pair, s)))


def _utf16_units(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _sorted_keys(obj: Mapping[str, object]) -> list[str]:
    """Keys in JavaScript's default sort order (UTF-16 code units)."""
    keys = sorted(obj)
    joined = "".join(keys)
    if not joined.isascii() and _UTF16_ORDER_DIFFERS.search(joined) is not None:
        keys.sort(key=_utf16_units)
    return keys


def js_number_text(value: int | float) -> str:
    """A number as JavaScript's String() writes it, after converting it to a double."""
    if type(value) is not float:
        if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
            return str(int(value))
        try:
            value = float(value)
        except OverflowError:  # JavaScript reads such a literal as ±Infinity
            value = _INF if value > 0 else -_INF
    text = repr(value)
    if "e" not in text and "n" not in text:
        # repr is plain decimal for 1e-4 <= |x| < 1e16, inside JavaScript's plain range.
        if text.endswith(".0"):
            text = text[:-2]
        return "0" if text == "-0" else text
    return _relayout(value, text)


def _relayout(value: float, text: str) -> str:
    """Rewrite repr's shortest digits (exponent form, inf, nan) in JavaScript's layout."""
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if text.startswith("-") else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # point = n in ECMA-262 Number::toString: value = 0.digits * 10**point
    point = len(whole) + int(exponent) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    e = point - 1
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{'+' if e >= 0 else '-'}{abs(e)}"


def _encode_number(value: int | float) -> str:
    text = js_number_text(value)
    # Non-finite numbers are written as strings: "NaN", "Infinity", "-Infinity".
    return f'"{text}"' if text[-1] in "Ny" else text


class _NeedsCarefulEncoder(Exception):
    """Raised by the fast encoder for container subclasses; the iterative encoder takes over."""


# `Any` because the type checks below narrow faster than isinstance chains would.
def _encode_fast(v: Any, depth: int = 0) -> str:
    """Recursive encoder for the common case; cycles and deep nesting end past _MAX_DEPTH."""
    t = type(v)
    if t is str:
        return _encode_str(v)
    if t is dict:
        if depth > _MAX_DEPTH:
            raise _NeedsCarefulEncoder
        if len(v) == 1:
            for key, item in v.items():
                return "{" + _encode_str(key) + ":" + _encode_fast(item, depth + 1) + "}"
        inner = depth + 1
        fields = [_encode_str(key) + ":" + _encode_fast(v[key], inner) for key in _sorted_keys(v)]
        return "{" + ",".join(fields) + "}"
    if t is list or t is tuple:
        if depth > _MAX_DEPTH:
            raise _NeedsCarefulEncoder
        return "[" + ",".join([_encode_fast(item, depth + 1) for item in v]) + "]"
    if t is int:
        return str(v) if -_MAX_SAFE_INT <= v <= _MAX_SAFE_INT else _encode_number(v)
    if t is bool:
        return "true" if v else "false"
    if v is None:
        return "null"
    if t is float:
        return _encode_number(v)
    if v is UNDEFINED:
        return "undefined"
    raise _NeedsCarefulEncoder


def _encode_scalar(v: object) -> str:
    """Encode a non-container value strictly; subclasses of JSON types count as those types."""
    if v is UNDEFINED:
        return "undefined"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return _encode_number(v)
    if isinstance(v, str):
        return _encode_str(str(v))
    raise DetectorError(
        f"cannot hash a value of type {type(v).__name__}: tool arguments, results and errors "
        "must be JSON values (dict with str keys, list, str, int, float, bool, None)"
    )


def _is_array(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


# Work items of the iterative encoder: a value to encode, literal text, or leaving a container.
_VALUE, _TEXT, _LEAVE = 0, 1, 2


def _encode_iterative(root: object) -> str:
    """Explicit-stack encoder: any depth, cycles become "[Circular]", invalid input raises."""
    out: list[str] = []
    active: set[int] = set()  # ids of the containers still being written
    stack: list[tuple[int, Any]] = [(_VALUE, root)]  # (_TEXT, str) | (_LEAVE, int) | (_VALUE, v)
    while stack:
        op, item = stack.pop()
        if op == _TEXT:
            out.append(item)
            continue
        if op == _LEAVE:
            active.discard(item)
            continue
        is_object = isinstance(item, Mapping)
        if not is_object and not _is_array(item):
            out.append(_encode_scalar(item))
            continue
        if id(item) in active:
            out.append('"[Circular]"')
            continue
        active.add(id(item))
        stack.append((_LEAVE, id(item)))
        if is_object:
            for key in item:
                if not isinstance(key, str):
                    raise DetectorError(
                        f"cannot hash an object key of type {type(key).__name__}: "
                        "JSON object keys must be strings"
                    )
            keys = _sorted_keys(item)
            stack.append((_TEXT, "}"))
            for index in range(len(keys) - 1, -1, -1):
                stack.append((_VALUE, item[keys[index]]))
                stack.append((_TEXT, ("," if index else "") + _encode_str(keys[index]) + ":"))
            out.append("{")
        else:
            stack.append((_TEXT, "]"))
            for index in range(len(item) - 1, -1, -1):
                stack.append((_VALUE, item[index]))
                if index:
                    stack.append((_TEXT, ","))
            out.append("[")
    return "".join(out)


# orjson writes what stableStringify writes for strings (same escapes, raw non-ASCII), safe
# integers (STRICT_INTEGER refuses the others), booleans, null, lists and dicts sorted by
# code point. It differs on floats (1.0 vs 1), on keys whose UTF-16 order differs from code
# point order, and it refuses surrogates, undefined and subclasses: `_is_plain` rules out
# the first two, orjson raises on the rest, and the encoders below take those values.
_ORJSON_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _is_plain(v: Any, depth: int = 0) -> bool:
    """True when `v` holds no float, no key that sorts differently in UTF-16 and no container
    deeper than _MAX_DEPTH."""
    t = type(v)
    if t in _SCALARS:
        return True
    if depth > _MAX_DEPTH:
        return False
    # The containers in typed names: the compiled engine (setup.py) iterates a dict or list it
    # knows by its own loops, an `Any` by the generic protocol.
    if t is dict:
        obj: dict[Any, Any] = v
        for key, item in obj.items():
            if type(key) is not str:
                return False
            name: str = key
            if not name.isascii() and _UTF16_ORDER_DIFFERS.search(name) is not None:
                return False
            if type(item) not in _SCALARS and not _is_plain(item, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        array: list[Any] = v if t is list else list(v)  # tuples are rare (no JSON decodes one)
        for item in array:
            if type(item) not in _SCALARS and not _is_plain(item, depth + 1):
                return False
        return True
    return False


def canonical_json_bytes(value: JSONLike) -> bytes:
    """The canonical JSON of a value (docs/semantics.md §3) as UTF-8, as OpenClaw writes it."""
    try:
        if _is_plain(value):
            return _orjson_dumps(value, option=_ORJSON_OPTIONS)
    except (RecursionError, orjson.JSONEncodeError):
        pass  # surrogates, unsafe integers, a caller's deep stack: the encoders below
    # Canonical JSON escapes lone surrogates, so the text always encodes.
    return _encode(value).encode()


def canonical_json(value: JSONLike) -> str:
    """The canonical JSON text of a value (docs/semantics.md §3), byte-identical to OpenClaw's."""
    return canonical_json_bytes(value).decode()


def _encode(value: JSONLike) -> str:
    """Python encoders: the recursive one, and the iterative one for what it cannot take."""
    try:
        return _encode_fast(value)
    except (RecursionError, TypeError, AttributeError, _NeedsCarefulEncoder):
        # Cycles, deep nesting, subclasses and invalid values are rare: redo the value carefully.
        return _encode_iterative(value)
