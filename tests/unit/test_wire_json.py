"""Wire JSON as a JavaScript runtime writes it (docs/wire-format.md): vectors made by Node's own
JSON.stringify / JSON.parse (tests/data/gen_canonical_vectors.mjs) decode to the same values,
hash as OpenClaw hashes them, and travel through the engine, its state and its outputs."""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.detectors import (
    RunState,
    Thresholds,
    canonical_json,
    parse_event,
    process_event,
)
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads
from loopguard_fleet.streams.wire.codec import InputRejected, decode_object, encode

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "data" / "canonical_vectors.json").read_text(encoding="utf-8")
)["wire"]
LIMIT = 1 << 20


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_a_javascript_written_event_hashes_as_openclaw_hashes_it(vector: dict[str, Any]) -> None:
    obj = decode_object(vector["wire"].encode("utf-8"), LIMIT)
    ev = parse_event(obj)
    assert ev.call is not None and ev.call.args_hash == vector["args_hash"]
    for field in ("result", "error"):
        if field in vector:
            text = canonical_json(obj[field])
            assert text == vector[field]["canonical"]
            assert sha256(text.encode()).hexdigest() == vector[field]["sha256"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_a_javascript_written_event_reaches_the_engine_and_its_outputs(
    vector: dict[str, Any],
) -> None:
    obj = decode_object(vector["wire"].encode("utf-8"), LIMIT)
    call = {**obj, "type": "tool_call", "seq": 1, "event_id": obj["event_id"] + "c"}
    call.pop("result", None)
    call.pop("error", None)
    th = Thresholds(enabled=True, warning_threshold=1, critical_threshold=2)
    state = RunState()
    out = []
    for i in range(3):  # the same call and outcome three times: a warning, then a block
        for ev in ({**call, "seq": 2 * i + 1}, {**obj, "seq": 2 * i + 2}):
            out += process_event(state, ev, th)
    assert {d.payload.get("action") for d in out if d.kind == "loop_event"} == {"warn", "block"}
    for d in out:
        assert loads(encode(d.to_wire())) == d.to_wire()
    restored = RunState.from_json(state.to_json())
    assert restored == state and restored.to_json() == state.to_json()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a":"\\ud83d"}', {"a": "\ud83d"}),
        (b'{"\\udc00":1}', {"\udc00": 1}),
        (b'{"a":"\\ud83d\\ude00"}', {"a": "😀"}),
        (b'{"a":1e400}', {"a": float("inf")}),
        (b' \t\r\n{"a":"\\ud83d"}\n ', {"a": "\ud83d"}),
        (b'{"a":1,"a":"\\udfff"}', {"a": "\udfff"}),  # JSON.parse keeps the last duplicate
        (b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}", {"a": nested(5000)}),
    ],
    ids=["lone high", "lone low key", "pair", "1e400", "JSON whitespace", "duplicate key", "deep"],
)
def test_what_json_parse_reads_is_read(raw: bytes, expected: dict[str, Any]) -> None:
    got = decode_object(raw, LIMIT)
    assert canonical_json(got) == canonical_json(expected)  # any depth; == recurses
    assert list(got) == list(expected)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":-Infinity}',
        b"{'a':1}",
        b'{"a":1,}',
        b'{"a":"\\x41"}',
        b'{"a":"tab\there"}',
        b'{"a":"\\ud83d"} x',
        b'{"a":"\xed\xa0\xbd"}',  # a surrogate encoded in UTF-8 bytes: not UTF-8
        b'{"a":"\xff"}',
        b'\xa0{"a":"\\ud83d"}',  # U+00A0 is not JSON whitespace
        b'{"a":' + b"[" * 5000 + b"]" * 4999 + b"}",
    ],
    ids=[
        "NaN",
        "Infinity",
        "-Infinity",
        "single quotes",
        "trailing comma",
        "bad escape",
        "raw control character",
        "trailing text",
        "UTF-8 surrogate",
        "invalid byte",
        "non-JSON whitespace",
        "deep and unclosed",
    ],
)
def test_what_json_parse_refuses_is_dead_lettered_as_not_json(raw: bytes) -> None:
    with pytest.raises(InputRejected) as err:
        decode_object(raw, LIMIT)
    assert err.value.reason == "not_json"


def test_outputs_with_lone_surrogates_are_valid_utf8_and_read_back_the_same() -> None:
    value = {"run_id": "r\ud800", "tool": "read\udfff", "n": 1}
    raw = dumps(value)
    raw.decode("utf-8")  # strict: raises if a raw surrogate slipped through
    assert loads(raw) == value


def test_the_fast_path_and_the_fallback_agree_where_both_read() -> None:
    raw = b'{"b":[1,2.5,-0.0,"\\u00e9\\ud83d\\ude00",null,true],"a":{"c":12345678901234567890}}'
    fallback = json.loads(raw)
    assert loads(raw) == fallback
    with pytest.raises(NotJSON):
        loads(b"[NaN]")
