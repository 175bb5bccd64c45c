"""Laws of the loop signature: stable across runs and agents, outcome-sensitive, opaque."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import (
    CONFIGURABLE,
    OPENCLAW_2026_9,
    RunState,
    Thresholds,
    process_event,
)
from tests.wire import RunScript

TOOLS = ["read", "exec", "web_fetch"]
# Error texts that differ as text differ as outcomes (no whitespace or case for a
# normalisation to fold); paths start with "/", which no hex digest holds.
texts = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=3, max_size=12)
paths = texts.map(lambda t: "/" + t)
profiles = st.sampled_from([CONFIGURABLE, OPENCLAW_2026_9])


def _signatures(steps: list[tuple[str, str, str]], run_id: str, agent: str, th: Thresholds):
    run, state = RunScript(run_id, agent_id=agent), RunState()
    out: list[str] = []
    for tool, arg, error in steps:
        for ev in run.both(tool, {"path": arg}, error=error):
            out += [
                str(d.payload["signature"])
                for d in process_event(state, ev, th)
                if d.kind == "loop_event"
            ]
    return out


step = st.tuples(
    st.sampled_from(TOOLS), st.sampled_from(["/a", "/b"]), st.sampled_from(["E1", "E2"])
)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=11, max_size=40), st.text(min_size=1, max_size=8), profiles)
def test_the_same_calls_in_another_run_and_agent_sign_the_same(
    steps: list[tuple[str, str, str]], run_id: str, semantics: Any
) -> None:
    th = Thresholds(enabled=True, warning_threshold=3, critical_threshold=6, semantics=semantics)
    assert _signatures(steps, "r1", "main", th) == _signatures(steps, run_id + "x", "ops", th)


@settings(max_examples=60, deadline=None)
@given(paths, texts, texts, profiles)
def test_a_loop_signs_with_hex_only_and_another_error_signs_otherwise(
    path: str, error: str, other: str, semantics: Any
) -> None:
    th = Thresholds(enabled=True, warning_threshold=3, critical_threshold=6, semantics=semantics)
    one = _signatures([("read", path, error)] * 4, "r1", "main", th)
    assert one and all(re.fullmatch(r"[0-9a-f]{32}", s) for s in one)  # no path, no error text
    if error != other:
        two = _signatures([("read", path, other)] * 4, "r1", "main", th)
        assert set(one).isdisjoint(two)
