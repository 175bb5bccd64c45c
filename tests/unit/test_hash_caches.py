"""The per-process caches of tool names, call signatures and error keys give what computing
them gives, stay bounded, and the rule-8 result hash keeps its meaning for every text (lone
surrogates)."""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.detectors import hashing
from loopguard_fleet.detectors.canonical import canonical_json_bytes
from loopguard_fleet.detectors.errors import DetectorError, InvalidEvent
from loopguard_fleet.detectors.events import parse_event
from loopguard_fleet.detectors.hashing import (
    args_hash,
    call_signature,
    digest,
    normalize_tool,
    outcome_unknown_tool_name,
    result_hash,
    unknown_tool_name,
)
from loopguard_fleet.detectors.outcome_facts import outcome_facts
from loopguard_fleet.detectors.values import JSON, UNDEFINED, Outcome, ToolCall
from tests.unit.test_canonical import revive

VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "canonical_vectors.json").read_text(encoding="utf-8")
)

ARGS: list[Any] = [
    {"path": "/a.txt"},
    {"b": 1, "a": [1.5, 2, None, True]},  # floats and key order: the careful encoder's
    {"text": "cut \ud83d"},  # a lone surrogate: orjson refuses it
    {"\U0001f600": 1, "\uffff": 2},  # keys whose UTF-16 order differs from code points
    {"n": 2**80},  # an integer beyond 64 bits
    {"blob": "x" * 2000},  # longer than the cached size
    UNDEFINED,
    [],
    "plain",
]


def h(canonical_text: str) -> str:
    """SHA-256 of a canonical text written out by hand, so expectations show what is hashed."""
    return sha256(canonical_text.encode()).hexdigest()


def _uncached_signature(tool: str, args: Any) -> str:
    trimmed = tool.strip(hashing._JS_WHITESPACE).lower()
    name = hashing._TOOL_ALIASES.get(trimmed, trimmed) or "tool"
    return name + ":" + sha256(canonical_json_bytes(args)).hexdigest()


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("tool", ["read", " Bash ", "apply-patch", "", "EXEC"])
def test_a_signature_is_the_same_from_the_cache_as_computed(tool: str, args: Any) -> None:
    first = call_signature(tool, args)
    again = call_signature(tool, args)  # a hit when the canonical bytes are small enough
    assert first == again
    assert first[1] == _uncached_signature(tool, args) == args_hash(tool, args)
    assert first[0] == normalize_tool(tool) == first[1].partition(":")[0]


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=lambda v: v["id"])
def test_the_javascript_vectors_hash_alike_through_tool_calls(vector: dict[str, str]) -> None:
    for _ in range(2):  # computed, then (when small enough) from the cache
        call = ToolCall("read", revive(json.loads(vector["input"])))
        assert call.args_hash == "read:" + vector["sha256"]


@pytest.mark.parametrize("case", VECTORS["tool_names"], ids=lambda c: ascii(c["name"]))
def test_tool_names_normalise_as_javascript_does_twice(case: dict[str, str]) -> None:
    assert normalize_tool(case["name"]) == normalize_tool(case["name"]) == case["normalized"]


def test_equal_arguments_share_one_interned_signature() -> None:
    a = ToolCall("read", {"path": "/same"})
    b = ToolCall("read", {"path": "/same"})
    assert a.args_hash is b.args_hash


def test_a_dict_key_order_does_not_change_the_signature() -> None:
    assert call_signature("t", {"a": 1, "b": 2}) == call_signature("t", {"b": 2, "a": 1})


def test_the_caches_stay_bounded_and_right_after_they_empty() -> None:
    limit = hashing._CACHE_ENTRIES
    for i in range(limit + 50):
        assert call_signature("read", {"path": f"/f/{i}"})[1] == args_hash(
            "read", {"path": f"/f/{i}"}
        )
        assert normalize_tool(f"Tool{i}") == f"tool{i}"
        assert unknown_tool_name(f"Tool t{i} not found") == f"t{i}"
        assert result_hash("t", {}, Outcome.error(f"e{i}")) == "error:" + digest(f"e{i}")
    assert len(hashing._SIGNATURES) <= limit
    assert len(hashing._FLAT_CALLS) <= limit
    assert len(hashing._TOOL_NAMES) <= limit
    assert len(hashing._ERROR_NAMES) <= limit
    assert len(hashing._ERROR_KEYS) <= limit
    assert call_signature("read", {"path": "/f/0"})[1] == args_hash("read", {"path": "/f/0"})


def test_repeated_args_hash_as_they_did_the_first_time() -> None:
    """The call memos (flat string args by their items, others by canonical JSON) return what
    the computation would: string values never share an entry with the numbers and booleans
    a tuple compares equal, and key order changes the entry, not the hash."""
    expected = {
        '"1"': "read:" + h('{"a":"1"}'),
        "1": "read:" + h('{"a":1}'),
        "1.0": "read:" + h('{"a":1}'),
        "true": "read:" + h('{"a":true}'),
    }
    for _ in range(2):  # the second round hits the memos
        assert args_hash("read", {"a": "1"}) == expected['"1"']
        assert args_hash("read", {"a": 1}) == expected["1"]
        assert args_hash("read", {"a": 1.0}) == expected["1.0"]
        assert args_hash("read", {"a": True}) == expected["true"]
        assert args_hash("READ", {"b": "x", "a": "y"}) == "read:" + h('{"a":"y","b":"x"}')
        assert args_hash("read", {"a": "y", "b": "x"}) == "read:" + h('{"a":"y","b":"x"}')
        assert args_hash("bash", {"command": "\ud800"}) == "exec:" + h('{"command":"\\ud800"}')
    with pytest.raises(DetectorError, match="keys must be strings"):
        args_hash("read", {1: "a"})  # type: ignore[dict-item]


def test_repeated_errors_hash_and_name_as_they_did_the_first_time() -> None:
    """The error memos: each profile keeps its own keys (2026.9 canonicalises markers)."""
    marked = (
        '<<<EXTERNAL_UNTRUSTED_CONTENT id="{0}">>>x<<<END_EXTERNAL_UNTRUSTED_CONTENT id="{0}">>>'
    )
    first, second = marked.format("a" * 16), marked.format("b" * 16)
    canonical = marked.format("0" * 16)
    for _ in range(2):  # the second round hits the memos
        for text, name in (("Tool Exec not found", "exec"), ("gone", None), (first, None)):
            outcome = Outcome.error(text)
            assert result_hash("read", {}, outcome) == "error:" + h(json.dumps(text))
            assert outcome_unknown_tool_name(outcome) == name
        assert result_hash("read", {}, Outcome.error(second)) == "error:" + h(json.dumps(second))
        for text in (first, second):
            facts = outcome_facts("read", {}, Outcome.error(text))
            assert facts.result_hash == "error:" + h(json.dumps(canonical))


def test_long_tool_names_are_normalised_without_being_cached() -> None:
    name = "  " + "X" * (hashing._CACHED_NAME_CHARS + 1)
    assert normalize_tool(name) == "x" * (hashing._CACHED_NAME_CHARS + 1)
    assert name not in hashing._TOOL_NAMES


@pytest.mark.parametrize(
    "text",
    ["plain", "", "cut \ud83d", "\udc00 lone low", "emoji \U0001f600", 'quote " and \\'],
)
def test_the_rule_8_hash_is_the_digest_of_details_and_text(text: str) -> None:
    details: dict[str, JSON] = {"ok": True, "n": 1.5}
    outcome = Outcome.result({"content": [{"type": "text", "text": text}], "details": details})
    assert result_hash("read", {"path": "/a"}, outcome) == digest(
        {"details": details, "text": text}
    )


def test_a_bad_tool_is_reported_before_a_bad_want_verdict() -> None:
    event = {"type": "tool_call", "run_id": "r", "event_id": "e", "seq": 1, "tool": 3}
    with pytest.raises(InvalidEvent) as err:
        parse_event({**event, "args": {}, "want_verdict": 1})
    assert err.value.reason == "invalid_tool"


def test_a_tool_call_id_must_be_a_string() -> None:
    event = {"type": "tool_call", "run_id": "r", "event_id": "e", "seq": 1, "tool": "t"}
    with pytest.raises(InvalidEvent) as err:
        parse_event({**event, "args": {}, "tool_call_id": 5})
    assert (err.value.reason, err.value.detail) == (
        "invalid_field",
        "tool_call_id must be a string, got int",
    )
