"""`hash_outcome`: a result hashed once decides exactly as the full outcome (compare's sharing)."""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.detectors import RunState, Thresholds, hash_outcome, parse_event, process_event
from loopguard_fleet.streams.demo.simulate import fleet_events
from tests.wire import RunScript, text_result

ON = Thresholds(enabled=True, warning_threshold=3, critical_threshold=6, unknown_tool_threshold=4)
TOOLS = ON.channel_tools


def _runs(events: list[dict[str, Any]]) -> tuple[list[Any], list[Any], dict[str, str]]:
    """Decisions and final states, fed with full outcomes and with hashed ones."""
    full: dict[str, RunState] = {}
    hashed: dict[str, RunState] = {}
    a, b = [], []
    for obj in events:
        ev = parse_event(obj)
        a += [d.to_wire() for d in process_event(full.setdefault(ev.run_id, RunState()), ev, ON)]
        sb = hashed.setdefault(ev.run_id, RunState())
        b += [d.to_wire() for d in process_event(sb, hash_outcome(ev, TOOLS), ON)]
    differ = {r: s.to_json() for r, s in full.items() if hashed[r].to_json() != s.to_json()}
    return a, b, differ


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_simulated_fleet_decides_alike_with_hashed_outcomes(seed: int) -> None:
    a, b, differ = _runs(fleet_events(25, seed, stuck_calls=12))
    assert [d["type"] for d in a].count("loop_event") > 0
    assert (a, differ) == (b, {})


def _script(kind: str) -> list[dict[str, Any]]:
    run = RunScript("r")
    if kind == "unknown_tool":
        return [e for _ in range(6) for e in run.both("exec", {}, error="Tool exec not found")]
    if kind == "same_text":
        return [e for _ in range(8) for e in run.both("read", {"p": 1}, result=text_result("a"))]
    if kind == "send":
        return [e for _ in range(8) for e in run.both("telegram", {"m": 1}, result={"id": 1})]
    if kind == "pending":
        return [e for _ in range(8) for e in run.both("read", {"p": 1})]
    assert kind == "guard"
    events = run.both("read", {"p": 1}, error="x") + [run.compaction()]
    return events + [e for _ in range(3) for e in run.both("read", {"p": 1}, error="x")]


@pytest.mark.parametrize("kind", ["unknown_tool", "same_text", "send", "pending", "guard"])
def test_each_kind_of_outcome_decides_alike_when_hashed_first(kind: str) -> None:
    a, b, differ = _runs(_script(kind))
    assert (a, differ) == (b, {})


def test_events_without_a_full_outcome_come_back_unchanged() -> None:
    run = RunScript("r")
    for obj in [run.call("read", {}), run.compaction(), run.result("read", {})]:
        ev = parse_event(obj)
        assert hash_outcome(ev, TOOLS) is ev
