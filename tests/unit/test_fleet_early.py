"""Fleet-informed early warning (docs/fleet.md, "Early warning"): the pure rule."""

from __future__ import annotations

from loopguard_fleet.detectors import RunState, Thresholds, ToolCall, Verdict, detect, process_event
from loopguard_fleet.detectors.fleet import (
    FleetEvidence,
    FleetSettings,
    early_verdict,
    evidence_text,
    signature_of_call,
)
from tests.wire import RunScript

ON = Thresholds(enabled=True)
BLOCK = FleetSettings(enabled=True, early_action="block")
WARN = FleetSettings(enabled=True, early_action="warn")
CALL = ToolCall.of("read", {"path": "/etc/app.yaml"})


def failed(n: int, error: str = "ENOENT") -> RunState:
    """A run that made CALL n times, each failing with `error`."""
    state, run = RunState(), RunScript()
    for _ in range(n):
        for ev in run.both("read", {"path": "/etc/app.yaml"}, error=error):
            process_event(state, ev, ON)
    return state


def firing(state: RunState) -> dict[str, FleetEvidence]:
    """The evidence of a signal firing on CALL's signature in this run."""
    sig = signature_of_call(state.history, CALL.tool, CALL.args_hash)
    return {sig: FleetEvidence("s" * 32, runs=214, agents=31, window_seconds=300, is_failure=True)}


def test_the_evidence_reads_as_the_fleet_saw_it() -> None:
    ev = FleetEvidence("x", runs=214, agents=31, window_seconds=300, is_failure=True)
    assert evidence_text("read", ev) == (
        "read failing the same way in 214 runs across 31 agents in the last 5 minutes"
    )
    one = FleetEvidence("x", runs=1, agents=1, window_seconds=90, is_failure=False)
    assert evidence_text("exec", one) == (
        "exec returning the same result in 1 run across 1 agent in the last 90 seconds"
    )


def test_a_firing_signature_blocks_the_early_at_count_th_repeat() -> None:
    state = failed(3)
    assert early_verdict(failed(2).history, CALL, ON, BLOCK, firing(state), None) is None
    verdict = early_verdict(state.history, CALL, ON, BLOCK, firing(state), None)
    assert verdict is not None
    assert (verdict.level, verdict.detector, verdict.count) == ("critical", "fleet_signal", 3)
    assert verdict.warning_key.startswith("fleet:" + "s" * 32 + ":")
    assert verdict.message.startswith(
        "CRITICAL: read failing the same way in 214 runs across 31 agents in the last 5 minutes."
    )


def test_warn_is_a_warning_with_the_same_evidence() -> None:
    state = failed(4)
    verdict = early_verdict(state.history, CALL, ON, WARN, firing(state), None)
    assert verdict is not None and (verdict.level, verdict.count) == ("warning", 4)
    assert "214 runs across 31 agents" in verdict.message


def test_off_by_default_the_engines_verdict_stands() -> None:
    state = failed(5)
    assert early_verdict(state.history, CALL, ON, FleetSettings(), firing(state), None) is None
    off = Thresholds(enabled=False)
    assert early_verdict(state.history, CALL, off, BLOCK, firing(state), None) is None


def test_another_outcome_of_the_same_call_is_not_the_firing_signature() -> None:
    state = failed(5, error="EACCES")
    assert early_verdict(state.history, CALL, ON, BLOCK, firing(failed(1)), None) is None


def test_the_engines_verdict_wins_when_it_is_at_least_as_strong() -> None:
    state = failed(20)
    engine = detect(state, CALL, ON)
    assert engine is not None and engine.level == "critical"
    assert early_verdict(state.history, CALL, ON, BLOCK, firing(state), engine) is engine
    warned = failed(10)
    warning = detect(warned, CALL, ON)
    assert warning is not None and warning.level == "warning"
    assert early_verdict(warned.history, CALL, ON, WARN, firing(warned), warning) is warning
    blocked = early_verdict(warned.history, CALL, ON, BLOCK, firing(warned), warning)
    assert isinstance(blocked, Verdict) and blocked.level == "critical"
