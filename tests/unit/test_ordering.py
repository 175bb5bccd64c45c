"""Cross-topic order (docs/wire-format.md, "Ordering"): held life events, late compactions, run_end
waiting for the tool events before it, and the state format that carries them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from loopguard_fleet.detectors.state import legacy_stamp_ms
from tests.wire import RunScript

GUARD_ONLY = Thresholds()
ON = Thresholds(enabled=True)
ERR = {"error": "File not found: /x"}


def decide(events: list[dict[str, Any]], th: Thresholds = GUARD_ONLY) -> tuple[RunState, list]:
    state = RunState()
    out = [d.to_wire() for ev in events for d in process_event(state, ev, th)]
    return state, out


def compaction_loop() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The demo's compaction run: a loop, a compaction, the loop again, run_end."""
    run = RunScript("demo-compaction")
    events = run.both("read", {"p": "/x"}, **ERR)
    compaction = run.compaction()
    events.append(compaction)
    for _ in range(3):
        events += run.both("read", {"p": "/x"}, **ERR)
    end = run.end()
    return events + [end], compaction, end


def tools_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] in ("tool_call", "tool_result")]


def lives_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] not in ("tool_call", "tool_result")]


def test_a_run_end_read_before_the_runs_last_tool_events_waits_for_them() -> None:
    events, _, _ = compaction_loop()
    _, in_order = decide(events)
    state, life_first = decide(lives_of(events) + tools_of(events))
    assert [d["detector"] for d in in_order if d["type"] == "command"] == [
        "compaction_loop_persisted"
    ]
    assert life_first == in_order
    assert state.is_ended and state.held == []


def test_a_late_compaction_attributes_the_abort_to_the_result_that_completed_the_window() -> None:
    events, compaction, end = compaction_loop()
    _, in_order = decide(events)
    _, late = decide(tools_of(events) + [compaction, end])
    last_result = tools_of(events)[-1]
    assert late == in_order
    assert {d["trigger_event_id"] for d in late} == {last_result["event_id"]}
    assert {d["seq"] for d in late} == {last_result["seq"]}


def test_held_run_end_applies_once_the_tool_events_right_before_it_are_in() -> None:
    run = RunScript()
    calls = run.both("read", {}, **ERR)
    end = run.end()  # seq 3, right after the result at seq 2
    state, _ = decide([end, calls[0]])
    assert not state.is_ended and state.held == [(3, "run_end", None)]
    process_event(state, calls[1], GUARD_ONLY)
    assert state.is_ended and state.held == [] and state.history == []


def test_with_a_seq_gap_a_held_run_end_waits_for_a_later_tool_event() -> None:
    run = RunScript()
    calls = run.both("read", {}, **ERR)
    run.seq += 5  # the emitter skipped seqs: nothing proves the tool events are all in
    end = run.end()
    state, _ = decide(calls + [end])
    assert not state.is_ended and len(state.history) == 1
    restored = RunState.from_json(state.to_json())
    assert restored.held == [(end["seq"], "run_end", None)]
    process_event(restored, run.call("read", {}), GUARD_ONLY)  # the next run under this id
    assert not restored.is_ended and len(restored.history) == 1
    assert restored.history[0].seq == end["seq"] + 1


def test_a_redelivered_held_life_event_is_a_duplicate() -> None:
    run = RunScript()
    compaction = run.compaction()
    state, _ = decide([compaction, compaction])
    # held once, with the guard policy it was read under (window, enforce, version)
    assert state.held == [(1, "compaction", (GUARD_ONLY.post_compaction_window_size, True, None))]


def test_a_run_end_read_after_a_newer_runs_tool_events_leaves_the_state_to_the_ttl() -> None:
    run = RunScript()
    first = run.both("read", {}, **ERR)
    end = run.end()
    second = run.both("read", {}, **ERR)  # the id reused by a new run
    state, _ = decide(first + second + [end])
    assert not state.is_ended and len(state.history) == 2
    assert state.life_seq == end["seq"]


@pytest.mark.parametrize(
    ("event_id", "seq"),
    [("run-7:12", 12), ("P1-r5-35-result", 70), ("12", 12), ("x", 3)],
    ids=["client form", "other form", "id is the seq", "short"],
)
def test_a_records_event_id_round_trips(event_id: str, seq: int) -> None:
    run = RunScript()
    result = run.result("read", {}, **ERR)
    result.update(event_id=event_id, seq=seq)
    state, _ = decide([result])
    restored = RunState.from_json(state.to_json())
    assert restored.history[0].event_id == event_id
    assert restored == state


def test_format_1_states_still_load() -> None:
    v1 = (
        '{"v":1,"h":[[0,1,2,1],[0,1,-1,1,"c2"]],"a":"main","s":[2,null,null,5],'
        '"t":["sread","sread:abc","serr"]}'
    )
    state = RunState.from_json(v1)
    assert [(r.tool, r.result_hash, r.tool_call_id, r.seq) for r in state.history] == [
        ("read", "err", None, 1),
        ("read", None, "c2", 2),
    ]
    assert state.history[0].event_id is None
    assert (state.tool_seq, state.life_done, state.held) == (2, None, [])
    assert legacy_stamp_ms(json.loads(v1)) == 5  # the table envelope's migration reads it
    assert RunState.from_json(state.to_json()) == state
