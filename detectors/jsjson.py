"""JSON read and written as a JavaScript runtime does (`JSON.parse` / `JSON.stringify`).

OpenClaw and other agent runtimes are JavaScript: their `JSON.stringify` escapes a lone UTF-16
surrogate (`"\\ud83d"`, a tool output cut inside an emoji) and writes numbers that orjson
refuses (`1e400` reads as Infinity in JavaScript). orjson stays the fast path; only a text it
refuses goes through the standard library, which keeps lone surrogates as Python code points
(the same string JavaScript has) and is told to refuse what `JSON.parse` refuses (`NaN`,
`Infinity` literals). docs/wire-format.md lists what is accepted.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["NotJSON", "dumps", "loads"]


class NotJSON(ValueError):
    """A text that JavaScript's `JSON.parse` refuses too."""


def _refuse_constant(name: str) -> Any:
    raise NotJSON(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def loads(raw: bytes | str) -> Any:
    """Parse one JSON text as `JSON.parse` reads it; raises NotJSON for what it refuses."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as fast_error:
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        except UnicodeDecodeError:
            raise NotJSON(str(fast_error)) from None  # not UTF-8: no JavaScript producer
        try:
            value, end = _DECODER.raw_decode(text, _skip(text, 0))
        except (json.JSONDecodeError, RecursionError):
            raise NotJSON(str(fast_error)) from None
        if _skip(text, end) != len(text):
            raise NotJSON(str(fast_error)) from None
        return value


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; a lone surrogate is written as its escape, as JavaScript does."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        # Only strings orjson cannot encode (lone surrogates) get here; ASCII escapes keep the
        # text valid UTF-8 and decode to the same string.
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


_JSON_SPACE = " \t\n\r"  # JSON.parse's whitespace (str.isspace would also take U+00A0 …)


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _JSON_SPACE:
        i += 1
    return i
