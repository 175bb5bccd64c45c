"""Wire-event validation: parse_event's reasons, privacy mode, and agreement with the schema."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from loopguard_fleet.detectors import InvalidEvent, Outcome, parse_event
from loopguard_fleet.detectors.hashing import args_hash
from loopguard_fleet.streams.wire.schema import AnyWireEvent

BASE = {"event_id": "e1", "run_id": "r1", "seq": 1}


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        pytest.param([1, 2], "not_an_object", id="array"),
        pytest.param({**BASE, "type": "nope"}, "unknown_type", id="unknown-type"),
        pytest.param(
            {**BASE, "type": "compaction", "run_id": ""}, "missing_run_id", id="empty-run"
        ),
        pytest.param(
            {"type": "compaction", "event_id": "e", "seq": 1}, "missing_run_id", id="no-run"
        ),
        pytest.param(
            {**BASE, "type": "compaction", "event_id": 5}, "missing_event_id", id="int-id"
        ),
        pytest.param({**BASE, "type": "compaction", "seq": "1"}, "invalid_seq", id="str-seq"),
        pytest.param({**BASE, "type": "compaction", "seq": True}, "invalid_seq", id="bool-seq"),
        pytest.param({**BASE, "type": "compaction", "seq": 1.5}, "invalid_seq", id="float-seq"),
        pytest.param(
            {**BASE, "type": "tool_call", "tool": 3, "args": {}}, "invalid_tool", id="tool-int"
        ),
        pytest.param({**BASE, "type": "tool_call", "tool": "read"}, "missing_args", id="no-args"),
        pytest.param(
            {**BASE, "type": "tool_call", "tool": "r", "args": {}, "want_verdict": 1},
            "invalid_field",
            id="want-int",
        ),
        pytest.param({**BASE, "type": "run_end", "agent_id": 7}, "invalid_field", id="agent-int"),
        pytest.param({**BASE, "type": "run_end", "ts": [1]}, "invalid_field", id="ts-list"),
    ],
)
def test_malformed_events_are_rejected_with_a_reason(event: Any, reason: str) -> None:
    with pytest.raises(InvalidEvent) as err:
        parse_event(event)
    assert err.value.reason == reason


def test_a_tool_result_carries_the_normalised_call_and_its_outcome() -> None:
    ev = parse_event(
        {
            **BASE,
            "type": "tool_result",
            "tool": "Bash",
            "args": {"command": "ls"},
            "tool_call_id": "c1",
            "error": "boom",
        }
    )
    assert ev.call is not None and ev.call.tool == "exec"
    assert ev.call.args_hash == args_hash("exec", {"command": "ls"})
    assert ev.outcome == Outcome.error("boom")


def test_privacy_mode_events_carry_only_hashes() -> None:
    ev = parse_event(
        {
            **BASE,
            "type": "tool_result",
            "tool": "process",
            "args_hash": "process:ab",
            "poll_action": "poll",
            "result_hash": "cd",
            "unknown_tool_name": None,
        }
    )
    assert ev.call is not None and (ev.call.args_hash, ev.call.action) == ("process:ab", "poll")
    assert ev.outcome == Outcome.hashed("cd", None)


def test_a_result_without_result_or_error_is_pending() -> None:
    ev = parse_event({**BASE, "type": "tool_result", "tool": "read", "args": {}})
    assert ev.outcome == Outcome.pending()


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda kids: (
        st.lists(kids, max_size=2) | st.dictionaries(st.text(max_size=2), kids, max_size=2)
    ),
    max_leaves=4,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["tool_call", "tool_result", "compaction", "run_end", "x"]),
        "event_id": st.one_of(st.text(max_size=2), st.integers()),
        "run_id": st.one_of(st.text(max_size=2), st.none()),
        "seq": st.one_of(st.integers(-3, 3), st.booleans(), st.text(max_size=1)),
        "agent_id": st.one_of(st.none(), st.text(max_size=2), st.integers()),
        "tool": st.one_of(st.text(max_size=3), st.integers()),
        "args": json_value,
        "want_verdict": st.one_of(st.booleans(), st.integers(0, 1)),
        "error": json_value,
        "result": json_value,
    },
)


@given(fields)
def test_the_published_schema_accepts_exactly_what_the_engine_accepts(event: dict) -> None:
    try:
        parse_event(event)
        engine_ok = True
    except InvalidEvent:
        engine_ok = False
    try:
        TypeAdapter(AnyWireEvent).validate_python(event)
        schema_ok = True
    except ValidationError:
        schema_ok = False
    if event.get("type") in ("tool_call", "tool_result") and "args" not in event:
        schema_ok = False  # the schema cannot say "args or args_hash"; documented in its text
    assert engine_ok == schema_ok


def test_a_mapping_that_is_not_a_dict_parses_as_the_dict_does() -> None:
    event = {**BASE, "type": "tool_result", "tool": "Read", "args": {"p": 1}, "result": "ok"}
    assert parse_event(MappingProxyType(event)) == parse_event(event)
