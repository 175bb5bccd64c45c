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

from loopguard.config import load_policy
from loopguard.streams.audit.compare import compare
from loopguard.streams.demo.simulate import fleet_events
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


def test_a_lower_threshold_forks_only_the_runs_it_changes() -> None:
    """The sharing is real: on a fleet where some runs loop, the runs the candidate decides
    differently are forked, and healthy ones stay shared (so the report comes cheaper)."""
    from loopguard.streams.audit import compare as module

    forked: list[set[str]] = []
    original = module._Shared.__init__

    def spy(self: Any, *args: Any) -> None:
        original(self, *args)
        forked.append(self.forked)

    lines = [orjson.dumps(ev) for ev in fleet_events(60, seed=3, stuck_calls=25)]
    runs = {json.loads(line)["run_id"] for line in lines}
    module._Shared.__init__ = spy  # type: ignore[method-assign]
    try:
        report = compare(
            load_policy(_policy()), load_policy(_policy(criticalThreshold=12)), enumerate(lines)
        ).to_json()
    finally:
        module._Shared.__init__ = original  # type: ignore[method-assign]
    changed = {r["run_id"] for r in report["stopped_runs"] if r["delta_calls"] != 0}
    assert changed and changed <= forked[0]
    assert len(forked[0]) < len(runs)
