"""Fleet signals in the engine's event path (docs/fleet.md, "Early warning"): apply_event
with a fleet view, and without one exactly as before."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import RunState, Thresholds, apply_event
from loopguard_fleet.detectors.fleet import FleetEvidence, FleetSettings, FleetView
from loopguard_fleet.streams.wire.schema import LoopEventMessage
from tests.wire import RunScript, text_result

ON = Thresholds(enabled=True)
SID = "5" * 32


def run_events(n: int, error: str = "ENOENT", want_verdict: bool = False) -> list[dict[str, Any]]:
    """n failing reads of one file, as a runtime sends them."""
    run = RunScript("r1", agent_id="ops")
    events: list[dict[str, Any]] = []
    for _ in range(n):
        call = run.call("read", {"path": "/etc/app.yaml"}, want_verdict=want_verdict)
        events += [call, run.result("read", {"path": "/etc/app.yaml"}, error=error)]
    return events


def apply_all(events: list[dict[str, Any]], fleet: FleetView | None):
    state, decisions, observations = RunState(), [], []
    for ev in events:
        applied = apply_event(state, ev, ON, fleet=fleet)
        decisions += [d.to_wire() for d in applied.decisions]
        observations.append(applied.observation)
    return decisions, observations


def signature_of_the_loop() -> str:
    decisions, _ = apply_all(run_events(11), None)
    return str(decisions[0]["signature"])


def view(action: str = "block", firing: bool = True) -> FleetView:
    evidence = FleetEvidence(SID, runs=214, agents=31, window_seconds=300, is_failure=True)
    return FleetView(
        FleetSettings(enabled=True, early_action=action),  # type: ignore[arg-type]
        {signature_of_the_loop(): evidence} if firing else {},
        ts_ms=1_764_000_000_000,
    )


def test_a_firing_signature_blocks_the_fourth_call_with_the_fleet_evidence() -> None:
    decisions, _ = apply_all(run_events(5, want_verdict=True), view("block"))
    loop_events = [d for d in decisions if d["type"] == "loop_event"]
    assert [(e["seq"], e["detector"], e["level"], e["count"]) for e in loop_events] == [
        (7, "fleet_signal", "critical", 3),
        (9, "fleet_signal", "critical", 4),  # this script sends the blocked call's result
    ]
    first = loop_events[0]
    assert first["fleet_signal_id"] == SID and first["action"] == "block"
    assert first["signature"] == signature_of_the_loop()
    assert "read failing the same way in 214 runs across 31 agents" in str(first["message"])
    blocks = [d for d in decisions if d.get("command") == "block_call"]
    assert [b["seq"] for b in blocks] == [7, 9] and blocks[0]["reason"] == first["message"]
    verdicts = [d["decision"] for d in decisions if d["type"] == "verdict"]
    assert verdicts == ["allow", "allow", "allow", "block", "block"]


def test_an_early_warning_is_published_once_per_signal_and_run() -> None:
    decisions, _ = apply_all(run_events(6), view("warn"))
    warned = [(e["count"], e["published"]) for e in decisions if e["type"] == "loop_event"]
    assert warned == [(3, True), (4, False), (5, False)]


def test_a_tool_call_reports_what_it_contributed() -> None:
    _, observations = apply_all(run_events(3), view(firing=False))
    calls = observations[0::2]
    assert calls[0] is None and [o.streak for o in calls[1:]] == [1, 2]  # type: ignore[union-attr]
    assert calls[1].ts_ms == 1_764_000_000_000 and calls[1].agent_id == "ops"  # type: ignore[union-attr]
    assert all(o is None for o in observations[1::2])  # results contribute nothing


def test_without_firing_signals_the_verdicts_are_the_engines() -> None:
    plain, _ = apply_all(run_events(22, want_verdict=True), None)
    quiet, _ = apply_all(run_events(22, want_verdict=True), view(firing=False))
    off, _ = apply_all(run_events(22, want_verdict=True), None)
    assert quiet == plain == off
    assert any(d.get("command") == "block_call" for d in plain)


outcomes = st.sampled_from(
    [{"error": "ENOENT"}, {"error": "EACCES"}, {"result": text_result("same")}]
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["/a", "/b"]), outcomes), max_size=40), st.integers())
def test_fleet_settings_off_decide_as_without_a_view_whatever_the_time(steps, ts) -> None:
    run = RunScript()
    events = [e for path, outcome in steps for e in run.both("read", {"path": path}, **outcome)]
    off = FleetView(FleetSettings(), {signature_of_the_loop(): view().firing.popitem()[1]}, ts)
    with_view, contributed = apply_all(events, off)
    assert with_view == apply_all(events, None)[0]
    assert contributed == [None] * len(events)  # nothing is contributed while off


def test_an_early_loop_event_is_a_valid_control_message() -> None:
    decisions, _ = apply_all(run_events(4), view("block"))
    early = next(d for d in decisions if d["type"] == "loop_event")
    assert LoopEventMessage.model_validate(early).fleet_signal_id == SID
