"""Codec: what the worker refuses before validation, with which reason."""

from __future__ import annotations

import orjson
import pytest

from loopguard_fleet.streams.wire.codec import InputRejected, decode_object, encode


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(None, "empty", id="no-value"),
        pytest.param(b"", "empty", id="empty-value"),
        pytest.param(b'{"a": "' + b"x" * 100 + b'"}', "too_large", id="too-large"),
        pytest.param(b"{nope", "not_json", id="not-json"),
        pytest.param(b"\xff\xfe", "not_json", id="not-utf8"),
        pytest.param(b"[1, 2]", "not_object", id="array"),
        pytest.param(b'"text"', "not_object", id="string"),
        pytest.param(b"null", "not_object", id="null"),
    ],
)
def test_bad_values_are_rejected_with_a_reason(raw: bytes | None, reason: str) -> None:
    with pytest.raises(InputRejected) as info:
        decode_object(raw, max_bytes=64)
    assert info.value.reason == reason


def test_a_json_object_decodes() -> None:
    assert decode_object(b'{"type": "run_end", "seq": 1}', max_bytes=64) == {
        "type": "run_end",
        "seq": 1,
    }


def test_the_size_limit_is_inclusive() -> None:
    raw = b'{"a":"' + b"x" * 10 + b'"}'
    assert decode_object(raw, max_bytes=len(raw)) == {"a": "x" * 10}


def test_encode_is_compact_json() -> None:
    obj = {"type": "verdict", "decision": "allow", "n": [1, None]}
    assert encode(obj) == b'{"type":"verdict","decision":"allow","n":[1,null]}'
    assert orjson.loads(encode(obj)) == obj
