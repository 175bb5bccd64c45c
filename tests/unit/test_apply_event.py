"""`apply_event` says what an event did: a duplicate, or its decisions (possibly none)."""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.detectors import Applied, RunState, Thresholds, apply_event, process_event
from tests.wire import RunScript

ON = Thresholds(enabled=True, warning_threshold=2, critical_threshold=4)


def _history(run: RunScript) -> list[dict[str, Any]]:
    return [*run.both("read", {"p": 1}, error="x"), *run.both("read", {"p": 1}, error="x")]


def _kinds(applied: Applied) -> tuple[bool, list[str]]:
    return applied.is_duplicate, [d.kind for d in applied.decisions]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a_new_call_with_no_verdict", (False, [])),
        ("a_call_that_warns", (False, ["loop_event"])),
        ("a_redelivered_tool_call", (True, [])),
        ("a_redelivered_tool_result", (True, [])),
        ("a_redelivered_compaction", (True, [])),
        ("a_call_past_a_redelivered_one", (False, ["loop_event"])),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_apply_event_tells_a_duplicate_from_an_event_without_decisions(
    name: str, expected: tuple[bool, list[str]]
) -> None:
    run = RunScript("r1")
    state = RunState()
    first = run.call("read", {"p": 1})
    if name == "a_new_call_with_no_verdict":
        assert _kinds(apply_event(state, first, ON)) == expected
        return
    events = [first, run.result("read", {"p": 1}, error="x"), *_history(run), run.compaction()]
    for ev in events:
        apply_event(state, ev, ON)
    warn = run.call("read", {"p": 1})
    subject = {
        "a_call_that_warns": warn,
        "a_redelivered_tool_call": events[0],
        "a_redelivered_tool_result": events[1],
        "a_redelivered_compaction": events[-1],
        "a_call_past_a_redelivered_one": warn,
    }[name]
    if name == "a_call_past_a_redelivered_one":
        assert apply_event(state, events[2], ON).is_duplicate
    assert _kinds(apply_event(state, subject, ON)) == expected


def test_a_duplicate_leaves_the_state_exactly_as_it_was() -> None:
    run = RunScript("r1")
    state = RunState()
    events = [*_history(run), run.compaction(), *_history(run)]
    for ev in events:
        apply_event(state, ev, ON)
    before = state.to_json()
    for ev in events:
        assert apply_event(state, ev, ON).is_duplicate
    assert state.to_json() == before


def test_process_event_returns_the_decisions_of_apply_event() -> None:
    run = RunScript("r1")
    events = [*_history(run), *_history(run), run.compaction(), *_history(run), run.end()]
    events += events[:3]  # redelivered: no decisions either way
    a, b = RunState(), RunState()
    for ev in events:
        assert [d.to_wire() for d in process_event(a, ev, ON)] == [
            d.to_wire() for d in apply_event(b, ev, ON).decisions
        ]
    assert a == b
