"""Dead-letter policy: what a refused message becomes on the dead-letter topic.

A refused message is described, not copied: reason, where it came from, its size, and only
the first `prefix_bytes` bytes (0 keeps none), as text when they are UTF-8, else base64.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

__all__ = ["Origin", "dead_letter"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message was read: topic, partition, offset, record timestamp, key."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None
    key: bytes | None = None


def _excerpt(data: bytes | None, limit: int) -> tuple[str | None, str | None]:
    """The first `limit` bytes as (text, "utf-8") or (base64, "base64")."""
    if not data or limit <= 0:
        return None, None
    head = data[:limit]
    try:
        return head.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the limit is still text: drop the partial tail.
        if exc.start >= len(head) - 3 and exc.reason == "unexpected end of data":
            return head[: exc.start].decode("utf-8"), "utf-8"
        return base64.b64encode(head).decode("ascii"), "base64"


def dead_letter(
    origin: Origin,
    value: bytes | None,
    reason: str,
    detail: str,
    *,
    prefix_bytes: int,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The dead-letter object for one refused message."""
    prefix, prefix_encoding = _excerpt(value, prefix_bytes)
    key, key_encoding = _excerpt(origin.key, 256)
    return {
        "type": "dead_letter",
        "reason": reason,
        "detail": detail[:1000],
        "topic": origin.topic,
        "partition": origin.partition,
        "offset": origin.offset,
        "timestamp_ms": origin.timestamp_ms,
        "run_id": run_id,
        "key": key,
        "key_encoding": key_encoding,
        "size": len(value) if value is not None else 0,
        "prefix": prefix,
        "prefix_encoding": prefix_encoding,
    }
