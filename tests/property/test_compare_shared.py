"""`compare` holds a run once while both policies agree on it, and forks it when they could
diverge (streams/audit/compare.py `_Shared`): its report is the one of feeding every event to
both sides, on generated fleets, the simulated fleet and the real traces, for policy pairs
that differ in detection only, beyond it, per agent, or not at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.compare import compare
from loopguard_fleet.streams.demo.simulate import fleet_events
from tests.property.test_replay_jobs import fleets

TRACES = Path(__file__).parents[1] / "data" / "traces"


def _policy(**loop: Any) -> dict[str, Any]:
    return {"tools": {"loopDetection": {"enabled": True, **loop}}}


PAIRS = {
    "lower critical": (_policy(), _policy(criticalThreshold=12)),
    "lower both": (_policy(), _policy(warningThreshold=3, criticalThreshold=5)),
    "detectors off": (_policy(), _policy(detectors={"pingPong": False, "genericRepeat": False})),
    "breaker": (_policy(), _policy(globalCircuitBreakerThreshold=21, criticalThreshold=20)),
    "disabled": (_policy(enabled=False), _policy(warningThreshold=3, criticalThreshold=5)),
    "history": (_policy(), _policy(historySize=8)),  # beyond detection: forks every run
    "window": (_policy(), _policy(postCompactionGuard={"windowSize": 1})),
    "same": (_policy(criticalThreshold=12), _policy(criticalThreshold=12)),
    "one agent": (
        _policy(),
        {
            **_policy(),
            "agents": {
                "list": [{"id": "a1", "tools": {"loopDetection": {"criticalThreshold": 5}}}]
            },
        },
    ),
}


def _both(current: dict[str, Any], candidate: dict[str, Any], lines: list[bytes]) -> None:
    items = list(enumerate(lines, 1))
    shared = compare(load_policy(current), load_policy(candidate), items, 600_000)
    plain = compare(load_policy(current), load_policy(candidate), items, 600_000, share_runs=False)
    assert shared.to_json() == plain.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=fleets())
def test_generated_fleets_compare_alike_shared_or_not(lines: list[bytes]) -> None:
    low = {"warningThreshold": 3, "criticalThreshold": 5}
    _both(_policy(**low), _policy(**low, globalCircuitBreakerThreshold=7), lines)
    _both(_policy(**low), _policy(warningThreshold=2, criticalThreshold=4), lines)
    _both(_policy(**low), _policy(**low, postCompactionGuard={"windowSize": 1}), lines)


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_the_simulated_fleet_and_the_traces_compare_alike_shared_or_not(pair: Any) -> None:
    fleet = [orjson.dumps(ev) for ev in fleet_events(60, seed=3, stuck_calls=25)]
    for ev in fleet_events(20, seed=4, stuck_calls=12)[:400]:
        fleet.append(orjson.dumps({**ev, "agent_id": "a1"}))
    traces = [
        line
        for path in sorted(TRACES.glob("*.jsonl"))
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]
    _both(*pair, fleet)
    _both(*pair, traces)


def _overlapping(calls: int) -> list[bytes]:
    """A run with two identical calls in flight at a time (call, call, result, result): a
    call the candidate blocks is not in its history while the next call is decided, so the
    two sides' states differ between a call and its result and must not be shared then."""
    lines, seq = [], 0
    for i in range(0, calls, 2):
        for j in (i, i + 1):
            seq += 1
            call = {"type": "tool_call", "run_id": "r", "event_id": f"c{j}", "seq": seq,
                    "tool": "read", "args": {"p": 1}, "tool_call_id": f"t{j}"}  # fmt: skip
            lines.append(orjson.dumps(call))
        for j in (i, i + 1):
            seq += 1
            result = {"type": "tool_result", "run_id": "r", "event_id": f"r{j}", "seq": seq,
                      "tool": "read", "args": {"p": 1}, "tool_call_id": f"t{j}",
                      "error": "missing"}  # fmt: skip
            lines.append(orjson.dumps(result))
    return lines


@pytest.mark.parametrize("candidate", [{"criticalThreshold": 5}, {"warningThreshold": 3}])
def test_calls_in_flight_compare_alike_and_are_shared_again_only_when_equal(
    candidate: dict[str, int],
) -> None:
    from loopguard_fleet.streams.audit import compare as module

    rejoined: list[bool] = []  # per re-sharing: were the two states equal?
    original = module._Shared.rejoin

    def spy(self: Any, ev: Any) -> None:
        run_id = ev.run_id
        forked = run_id in self.forked
        equal = forked and self.first.live_run(run_id).state == self.second.live_run(run_id).state
        original(self, ev)
        if forked and run_id not in self.forked:
            rejoined.append(equal)

    current = _policy(warningThreshold=4, criticalThreshold=9)
    module._Shared.rejoin = spy  # type: ignore[method-assign]
    try:
        _both(current, _policy(**candidate), _overlapping(40))
    finally:
        module._Shared.rejoin = original  # type: ignore[method-assign]
    assert rejoined and all(rejoined)


def test_a_lower_threshold_forks_only_the_runs_it_changes_and_shares_them_again() -> None:
    """The sharing is real: on a fleet where some runs loop, the runs the candidate decides
    differently are forked, healthy ones stay shared (so the report comes cheaper), and a
    forked run whose two states become equal again is shared again."""
    from loopguard_fleet.streams.audit import compare as module

    shared: list[Any] = []
    ever_forked: set[str] = set()
    original = module._Shared.holds

    def spy(self: Any, ev: Any) -> bool:
        if not shared:
            shared.append(self)
        held: bool = original(self, ev)
        if ev.run_id in self.forked:
            ever_forked.add(ev.run_id)
        return held

    lines = [orjson.dumps(ev) for ev in fleet_events(60, seed=3, stuck_calls=25)]
    runs = {json.loads(line)["run_id"] for line in lines}
    module._Shared.holds = spy  # type: ignore[method-assign]
    try:
        report = compare(
            load_policy(_policy()), load_policy(_policy(criticalThreshold=12)), enumerate(lines)
        ).to_json()
    finally:
        module._Shared.holds = original  # type: ignore[method-assign]
    changed = {r["run_id"] for r in report["stopped_runs"] if r["delta_calls"] != 0}
    assert changed and changed <= ever_forked
    assert len(ever_forked) < len(runs)
    assert shared[0].forked < ever_forked  # some forked runs were shared again
