"""Wire codec of the worker: raw Kafka value -> JSON object, decisions -> control bytes.

Validation of the object's shape is the engine's (`detectors.parse_event`); this module only
refuses what is not a JSON object of acceptable size, with a stable label-safe reason. JSON is
read and written as JavaScript does (`detectors.jsjson`, docs/wire-format.md).
"""

from __future__ import annotations

from typing import Any

from loopguard_fleet.detectors.canonical import SURROGATE
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads
from loopguard_fleet.streams.errors import StreamError

__all__ = ["InputRejected", "decode_object", "encode", "run_key"]


class InputRejected(StreamError):
    """A message the worker refuses; `reason` is a short, stable, label-safe code."""

    def __init__(self, reason: str, detail: str, run_id: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.run_id = run_id


def decode_object(raw: bytes | None, max_bytes: int) -> dict[str, Any]:
    """Decode one message value into a JSON object or raise `InputRejected`."""
    if not raw:
        raise InputRejected("empty", "message has no value")
    if len(raw) > max_bytes:
        raise InputRejected("too_large", f"{len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        obj = loads(raw)
    except NotJSON as exc:
        raise InputRejected("not_json", str(exc)) from None
    if not isinstance(obj, dict):
        raise InputRejected("not_object", f"expected a JSON object, got {type(obj).__name__}")
    return obj


def encode(obj: dict[str, Any]) -> bytes:
    """Encode one control or dead-letter object as compact JSON."""
    return dumps(obj)


def run_key(run_id: str) -> bytes:
    """The Kafka key of a run: its id in UTF-8, a lone surrogate as U+FFFD, as a JavaScript
    producer encodes strings (Buffer.from / TextEncoder), so every client keys a run alike."""
    try:
        return run_id.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE.sub("\ufffd", run_id).encode("utf-8")
