"""Dead letters: where a refused message came from, and only a bounded prefix of it."""

from __future__ import annotations

import base64

import pytest

from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter

ORIGIN = Origin("loopguard.tool-calls", 2, 41, 1_700_000_000_000, b"r1")


def test_a_dead_letter_names_reason_origin_and_size() -> None:
    record = dead_letter(ORIGIN, b"not json", "not_json", "bad", prefix_bytes=256, run_id=None)
    assert record == {
        "type": "dead_letter",
        "reason": "not_json",
        "detail": "bad",
        "topic": "loopguard.tool-calls",
        "partition": 2,
        "offset": 41,
        "timestamp_ms": 1_700_000_000_000,
        "run_id": None,
        "key": "r1",
        "key_encoding": "utf-8",
        "size": 8,
        "prefix": "not json",
        "prefix_encoding": "utf-8",
    }


@pytest.mark.parametrize(
    ("value", "limit", "prefix", "encoding"),
    [
        pytest.param(b"abcdef", 3, "abc", "utf-8", id="text-cut"),
        pytest.param(b"abcdef", 0, None, None, id="zero-keeps-nothing"),
        pytest.param("é".encode() * 3, 3, "é", "utf-8", id="cut-inside-a-character"),
        pytest.param(
            b"\xff\x00ab",
            4,
            base64.b64encode(b"\xff\x00ab").decode(),
            "base64",
            id="binary-as-base64",
        ),
        pytest.param(None, 10, None, None, id="no-value"),
    ],
)
def test_only_the_configured_prefix_is_kept(
    value: bytes | None, limit: int, prefix: str | None, encoding: str | None
) -> None:
    record = dead_letter(ORIGIN, value, "r", "d", prefix_bytes=limit)
    assert (record["prefix"], record["prefix_encoding"]) == (prefix, encoding)


def test_long_details_are_truncated() -> None:
    record = dead_letter(ORIGIN, b"x", "r", "d" * 5000, prefix_bytes=1)
    assert len(record["detail"]) == 1000
