"""The simulated fleet: deterministic by seed, every loop kind present and caught by the engine."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise

import orjson
import pytest

from loopguard_fleet.detectors import RunState, Thresholds, parse_event, process_event
from loopguard_fleet.streams.client.run_events import RunEvents
from loopguard_fleet.streams.demo.simulate import HEALTHY, LOOP_KINDS, fleet_events, fleet_plan

COMMON = {"type", "event_id", "run_id", "seq", "agent_id", "session_key"}
FIELDS = {
    "tool_call": COMMON | {"tool_call_id", "tool", "args"},
    "tool_result": COMMON | {"tool_call_id", "tool", "args"},
    "compaction": COMMON,
    "run_end": COMMON,
}
PRIVATE = {
    "tool_call": COMMON | {"tool_call_id", "tool", "args_hash", "poll_action"},
    "tool_result": COMMON
    | {"tool_call_id", "tool", "args_hash", "poll_action", "result_hash", "unknown_tool_name"},
}


def _first_loop_events(events: list[dict[str, object]]) -> dict[str, set[tuple[object, ...]]]:
    """Per run: the (action, detector) pairs the engine publishes, at default thresholds."""
    states: defaultdict[str, RunState] = defaultdict(RunState)
    found: defaultdict[str, set[tuple[object, ...]]] = defaultdict(set)
    for ev in events:
        run_id = str(ev["run_id"])
        for d in process_event(states[run_id], ev, Thresholds(enabled=True)):
            wire = d.to_wire()
            if wire["type"] == "loop_event" and wire["published"]:
                found[run_id].add((wire["action"], wire["detector"]))
    return found


def test_the_same_seed_gives_the_same_events_and_another_seed_does_not() -> None:
    assert fleet_events(20, seed=7) == fleet_events(20, seed=7)
    assert fleet_events(20, seed=7) != fleet_events(20, seed=8)


def test_fifty_runs_are_mostly_healthy_with_each_loop_kind_and_one_compaction_loop() -> None:
    kinds = Counter(r.kind for r in fleet_plan(50, seed=0))
    assert kinds == {
        HEALTHY: 41,
        "generic_repeat": 2,
        "known_poll_no_progress": 2,
        "ping_pong": 2,
        "unknown_tool_repeat": 2,
        "compaction_loop_persisted": 1,
    }


@pytest.mark.parametrize("runs", [5, 12, 50, 200], ids=lambda n: f"{n}-runs")
def test_every_loop_kind_is_present_from_five_runs_up(runs: int) -> None:
    plan = fleet_plan(runs, seed=3)
    assert len(plan) == runs and len({r.run_id for r in plan}) == runs
    assert set(LOOP_KINDS) <= {r.kind for r in plan}


@pytest.mark.parametrize("privacy", [False, True], ids=["raw", "privacy"])
def test_seq_increases_per_run_and_runs_interleave(privacy: bool) -> None:
    events = fleet_events(30, seed=1, privacy=privacy)
    last: dict[str, int] = {}
    for ev in events:
        assert ev["seq"] == last.get(ev["run_id"], 0) + 1
        assert ev["event_id"] == f"{ev['run_id']}:{ev['seq']}"
        last[ev["run_id"]] = ev["seq"]
    switches = sum(a["run_id"] != b["run_id"] for a, b in pairwise(events))
    assert switches > len(events) // 2
    assert all(ev["type"] == "run_end" for ev in events if ev["seq"] == last[ev["run_id"]])


@pytest.mark.parametrize("privacy", [False, True], ids=["raw", "privacy"])
def test_every_event_is_valid_wire_json_with_the_documented_fields(privacy: bool) -> None:
    fields = {**FIELDS, **PRIVATE} if privacy else FIELDS
    for ev in fleet_events(20, seed=2, privacy=privacy):
        assert orjson.loads(orjson.dumps(ev)) == ev
        outcome = {"result", "error"} & ev.keys() if ev["type"] == "tool_result" else set()
        assert set(ev) - outcome == fields[ev["type"]]
        assert len(outcome) == (0 if privacy or ev["type"] != "tool_result" else 1)
        parse_event(ev)  # the engine's own validator accepts it


@pytest.mark.parametrize("privacy", [False, True], ids=["raw", "privacy"])
def test_each_stuck_run_is_caught_by_its_detector_and_healthy_runs_by_none(privacy: bool) -> None:
    plan = {r.run_id: r.kind for r in fleet_plan(50, seed=0)}
    found = _first_loop_events(fleet_events(50, seed=0, privacy=privacy))
    for run_id, kind in plan.items():
        if kind == HEALTHY:
            assert found[run_id] == set(), run_id
        elif kind == "compaction_loop_persisted":
            assert found[run_id] == {("abort", kind)}, run_id
        else:
            assert ("block", kind) in found[run_id], run_id


def test_run_events_build_privacy_events_without_raw_values() -> None:
    ev = RunEvents("r1", privacy=True)
    call = ev.tool_call("read", {"path": "/secret"})
    result = ev.tool_result("call-1", "read", {"path": "/secret"}, result="/secret body")
    assert b"/secret" not in orjson.dumps([call, result])
    assert (call["seq"], result["seq"], result["tool_call_id"]) == (1, 2, "call-1")


def test_a_resumed_run_continues_its_seq() -> None:
    assert RunEvents("r1", start_seq=41).end() == {
        "type": "run_end",
        "event_id": "r1:42",
        "run_id": "r1",
        "seq": 42,
    }
