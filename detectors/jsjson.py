"""JSON read and written as a JavaScript runtime does (`JSON.parse` / `JSON.stringify`).

OpenClaw and other agent runtimes are JavaScript: their `JSON.stringify` escapes a lone UTF-16
surrogate (`"\\ud83d"`, a tool output cut inside an emoji) and writes numbers that orjson
refuses (`1e400` reads as Infinity in JavaScript). orjson stays the fast path; only a text it
refuses goes through `_parse`, which reads as `JSON.parse` does: lone surrogates stay Python
code points (the same string JavaScript has), numbers read as the standard library reads them
(`1e400` is infinity), and nesting has no depth limit (`JSON.stringify` writes ~4,000 levels,
orjson reads 1,024). docs/wire-format.md lists what is accepted.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from orjson import dumps as _orjson_dumps
from orjson import loads as _orjson_loads

from loopguard_fleet.detectors.errors import DetectorError

__all__ = ["NotJSON", "dumps", "loads"]


class NotJSON(DetectorError, ValueError):
    """A text that JavaScript's `JSON.parse` refuses too."""


def loads(raw: bytes | str) -> Any:
    """Parse one JSON text as `JSON.parse` reads it; raises NotJSON for what it refuses."""
    try:
        return _orjson_loads(raw)  # a global, not `orjson.loads`: compiled, no module getattr
    except orjson.JSONDecodeError as fast_error:
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
            return _parse(text)
        except (UnicodeDecodeError, ValueError):  # not UTF-8 (no JavaScript producer), or bad
            raise NotJSON(str(fast_error)) from None


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; a lone surrogate is written as its escape, as JavaScript does."""
    try:
        return _orjson_dumps(value)
    except orjson.JSONEncodeError:
        # Only strings orjson cannot encode (lone surrogates) get here; ASCII escapes keep the
        # text valid UTF-8 and decode to the same string.
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


_JSON_SPACE = " \t\n\r"  # JSON.parse's whitespace (str.isspace would also take U+00A0 …)
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"', re.DOTALL)  # escapes checked by json.loads
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}
Container = list[Any] | dict[str, Any]


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _JSON_SPACE:
        i += 1
    return i


def _parse(text: str) -> Any:
    """JSON.parse on an explicit stack (any depth); raises ValueError where it refuses."""
    stack: list[tuple[Container, str]] = []  # open containers, each with its pending key
    i = _skip(text, 0)
    while True:
        value, i, opened = _scalar_or_open(text, i)
        if opened is not None:
            stack.append(opened)
            continue
        while True:  # attach the finished value to the containers it closes
            i = _skip(text, i)
            if not stack:
                if i != len(text):
                    raise ValueError(f"unexpected text at {i}")
                return value
            container, key = stack[-1]
            if isinstance(container, list):
                container.append(value)
            else:
                container[key] = value  # a repeated key keeps its place, takes the last value
            close = "]" if isinstance(container, list) else "}"
            if text.startswith(",", i):
                i = _skip(text, i + 1)
                if isinstance(container, dict):
                    key, i = _key(text, i)
                    stack[-1] = (container, key)
                break
            if not text.startswith(close, i):
                raise ValueError(f"expected ',' or {close!r} at {i}")
            i += 1
            stack.pop()
            value = container


def _scalar_or_open(text: str, i: int) -> tuple[Any, int, tuple[Container, str] | None]:
    """A scalar or empty container at i, or the container it opens (with its first key)."""
    c = text[i : i + 1]
    if c in ("[", "{"):
        j = _skip(text, i + 1)
        close = "]" if c == "[" else "}"
        if text.startswith(close, j):
            return ([] if c == "[" else {}), j + 1, None
        if c == "[":
            return None, j, ([], "")
        key, j = _key(text, j)
        return None, j, ({}, key)
    if c == '"':
        value, end = _string(text, i)
        return value, end, None
    for word, literal in _LITERALS.items():
        if text.startswith(word, i):
            return literal, i + len(word), None
    m = _NUMBER.match(text, i)
    if m is None:
        raise ValueError(f"no JSON value at {i}")
    number = m.group()
    if m.group(2) or m.group(3):
        return float(number), m.end(), None
    return int(number), m.end(), None


def _string(text: str, i: int) -> tuple[str, int]:
    m = _STRING.match(text, i)
    if m is None:
        raise ValueError(f"unterminated or invalid string at {i}")
    value: str = json.loads(m.group())
    return value, m.end()


def _key(text: str, i: int) -> tuple[str, int]:
    if not text.startswith('"', i):
        raise ValueError(f"expected a key at {i}")
    key, i = _string(text, i)
    i = _skip(text, i)
    if not text.startswith(":", i):
        raise ValueError(f"expected ':' at {i}")
    return key, _skip(text, i + 1)
