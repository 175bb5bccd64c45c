"""Laws of the engine: determinism, restore-anywhere, isolation, redelivery,
bounded state, and monotonicity in the thresholds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from tests.wire import RunScript, text_result

TOOLS = ["read", "list", "exec", "process", "command_status"]
ARGS = [{"path": "/a"}, {"path": "/b"}, {"action": "poll", "id": 1}, {"action": "log"}, {}]
OUTCOMES: list[dict[str, Any]] = [
    {"result": text_result("same")},
    {"result": text_result("other")},
    {"error": "File not found"},
    {"error": "Tool exec not found"},
    {"error": {"code": 2}},
    {"result": None},
    {"result": text_result("x", status="running", tail="t")},
]

step = st.one_of(
    st.tuples(
        st.just("call"),
        st.sampled_from(TOOLS),
        st.integers(0, len(ARGS) - 1),
        st.integers(0, len(OUTCOMES) - 1),
        st.booleans(),
    ),
    st.tuples(st.just("compaction")),
)


@st.composite
def thresholds(draw: st.DrawFn) -> Thresholds:
    w = draw(st.integers(1, 6))
    c = draw(st.integers(w + 1, w + 6))
    g = draw(st.integers(c + 1, c + 6))
    return Thresholds(
        enabled=True,
        history_size=draw(st.integers(2, 14)),
        warning_threshold=w,
        critical_threshold=c,
        global_circuit_breaker_threshold=g,
        unknown_tool_threshold=draw(st.integers(1, 8)),
        generic_repeat=draw(st.booleans()),
        known_poll_no_progress=draw(st.booleans()),
        ping_pong=draw(st.booleans()),
        post_compaction_window_size=draw(st.integers(1, 4)),
    )


def script(steps: list[tuple[Any, ...]], run_id: str = "r", results: bool = True) -> list[dict]:
    run = RunScript(run_id)
    events: list[dict[str, Any]] = []
    for s in steps:
        if s[0] == "compaction":
            events.append(run.compaction())
            continue
        _, tool, ai, oi, want = s
        events.append(run.call(tool, ARGS[ai], want_verdict=want))
        if results:
            events.append(run.result(tool, ARGS[ai], **OUTCOMES[oi]))
    return events


def run(events: list[dict], th: Thresholds, state: RunState | None = None) -> list[dict]:
    state = state if state is not None else RunState()
    return [d.to_wire() for ev in events for d in process_event(state, ev, th)]


steps_st = st.lists(step, max_size=60)


@given(steps_st, thresholds())
def test_same_input_gives_the_same_output(steps: list, th: Thresholds) -> None:
    events = script(steps)
    assert run(events, th) == run(events, th)


@given(steps_st, thresholds(), st.integers(0, 200), st.booleans())
def test_serialise_and_restore_anywhere_changes_nothing(
    steps: list, th: Thresholds, cut: int, results: bool
) -> None:
    events = script(steps, results=results)
    cut = min(cut, len(events))
    whole_state = RunState()
    whole = run(events, th, whole_state)
    state = RunState()
    first = run(events[:cut], th, state)
    restored = RunState.from_json(state.to_json())
    assert restored == state
    assert restored.to_json() == state.to_json()
    assert first + run(events[cut:], th, restored) == whole
    assert restored.to_json() == whole_state.to_json()


@given(steps_st, steps_st, thresholds(), st.randoms(use_true_random=False))
def test_other_runs_events_never_change_a_runs_decisions(
    mine: list, theirs: list, th: Thresholds, rnd: Any
) -> None:
    a, b = script(mine, "a"), script(theirs, "b")
    merged, ia, ib = [], 0, 0
    while ia < len(a) or ib < len(b):
        if ib >= len(b) or (ia < len(a) and rnd.random() < 0.5):
            merged.append(a[ia])
            ia += 1
        else:
            merged.append(b[ib])
            ib += 1
    states: dict[str, RunState] = {}
    out = [
        d.to_wire()
        for ev in merged
        for d in process_event(states.setdefault(ev["run_id"], RunState()), ev, th)
    ]
    assert [d for d in out if d["run_id"] == "a"] == run(a, th)


@given(steps_st, thresholds(), st.lists(st.integers(0, 200), max_size=20))
def test_a_redelivered_event_adds_nothing(steps: list, th: Thresholds, dups: list) -> None:
    events = script(steps)
    redelivered = list(events)
    for d in sorted(dups, reverse=True):
        if d < len(events):
            redelivered.insert(d + 1, events[d])  # delivered again right after itself
    assert run(redelivered, th) == run(events, th)


@given(steps_st, thresholds(), st.booleans())
def test_state_stays_within_its_bounds(steps: list, th: Thresholds, results: bool) -> None:
    state = RunState()
    for ev in script(steps, results=results):
        process_event(state, ev, th)
        assert len(state.history) <= th.history_size
        assert len(state.buckets) <= 256
        assert len(state.guard_obs) <= th.post_compaction_window_size


@settings(max_examples=150)
@given(steps_st, thresholds(), st.integers(0, 3), st.integers(0, 4))
def test_raising_a_threshold_never_adds_a_verdict(
    steps: list, th: Thresholds, which: int, by: int
) -> None:
    # Every call's real outcome is delivered (as in the traces), so history does not depend on
    # which calls were blocked, and each rule's condition is monotone in its threshold.
    field = [
        "warning_threshold",
        "critical_threshold",
        "global_circuit_breaker_threshold",
        "unknown_tool_threshold",
    ][which]
    higher = replace(th, **{field: getattr(th, field) + by})
    if not (
        higher.warning_threshold
        < higher.critical_threshold
        < higher.global_circuit_breaker_threshold
    ):
        higher = replace(
            higher, critical_threshold=max(higher.critical_threshold, higher.warning_threshold + 1)
        )
        higher = replace(
            higher,
            global_circuit_breaker_threshold=max(
                higher.global_circuit_breaker_threshold, higher.critical_threshold + 1
            ),
        )
    events = script([s for s in steps if s[0] == "call"])

    def flagged(t: Thresholds) -> set[str]:
        return {
            d["trigger_event_id"]
            for d in run(events, t)
            if d["type"] == "loop_event" and d["action"] != "abort"
        }

    assert flagged(higher) <= flagged(th)
