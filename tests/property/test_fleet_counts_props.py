"""A call's counts, walked for once with fleet signals on, give what each reader would walk
for itself: the engine's verdict, the call's contribution and the early rule's verdict."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import CONFIGURABLE, OPENCLAW_2026_9, RunState, Thresholds
from loopguard_fleet.detectors.engine import detect
from loopguard_fleet.detectors.events import parse_event
from loopguard_fleet.detectors.fleet import FleetEvidence, FleetSettings
from loopguard_fleet.detectors.fleet.contribution import call_counts, no_progress, observe_call
from loopguard_fleet.detectors.fleet.early import early_verdict
from loopguard_fleet.detectors.fleet.signature import signature_of_call
from loopguard_fleet.detectors.process import process_event
from tests.property.test_engine_laws import TOOLS, script, step, thresholds

FLEET = FleetSettings(enabled=True, early_action="block", early_at_count=2)
# Loops are what the counts are for: bursts of one call with one outcome, so streaks grow and
# runs get blocked (the 2026.9 profile then counts its vetoes, which the configurable one does
# not; exec failures keep their identity there).
burst = st.tuples(
    st.just("call"), st.sampled_from(TOOLS[:3]), st.integers(0, 1), st.sampled_from([0, 2, 4]),
    st.booleans(),
).flatmap(lambda s: st.lists(st.just(s), min_size=1, max_size=15))  # fmt: skip
steps_st = st.lists(st.one_of(burst, st.lists(step, max_size=3)), max_size=8).map(
    lambda parts: [s for part in parts for s in part]
)


@settings(max_examples=150, deadline=None)
@given(steps_st, thresholds(), st.sampled_from([CONFIGURABLE, OPENCLAW_2026_9]))
def test_counts_given_by_the_caller_decide_as_counts_walked_for(
    steps: list[Any], th: Thresholds, semantics: Any
) -> None:
    th = replace(th, semantics=semantics)
    state = RunState()
    for obj in script(steps):
        ev = parse_event(obj)
        call = ev.call
        if ev.type == "tool_call" and call is not None:
            history = state.history
            counts = call_counts(history, call, th)
            progress = no_progress(history, call, th, counts[0])
            assert progress == no_progress(history, call, th)
            assert detect(state, call, th, counts) == detect(state, call, th)
            given_obs = observe_call(history, call, th, "r", "a", 0, progress)
            assert given_obs == observe_call(history, call, th, "r", "a", 0)
            # The call's own signature firing: the early rule reads the streak and outcome.
            sig = signature_of_call(history, call.tool, call.args_hash)
            firing = {sig: FleetEvidence("s", 5, 2, 300, True)}
            engine = detect(state, call, th)
            assert early_verdict(history, call, th, FLEET, firing, engine, progress) == (
                early_verdict(history, call, th, FLEET, firing, engine)
            )
        process_event(state, obj, th)
