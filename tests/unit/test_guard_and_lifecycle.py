"""Post-compaction guard, run scope, redelivery and run_end (docs/semantics.md §8, §9)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from tests.wire import RunScript, text_result

OFF = Thresholds()  # rolling detectors off, guard on (enabled unset)
ERR = {"error": "File not found: /x"}


def run_all(events: list[dict[str, Any]], th: Thresholds = OFF, state: RunState | None = None):
    state = state or RunState()
    out = []
    for ev in events:
        out += [d.to_wire() for d in process_event(state, ev, th)]
    return state, out


def aborts(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (d["trigger_event_id"], d["count"], d["tool"]) for d in out if d.get("action") == "abort"
    ]


def test_same_failing_call_three_times_after_compaction_aborts_on_the_third() -> None:
    run = RunScript("g1")
    events = run.both("read", {"p": "/x"}, **ERR) + [run.compaction()]
    for _ in range(3):
        events += run.both("read", {"p": "/x"}, **ERR)
    _, out = run_all(events)
    assert aborts(out) == [(events[-1]["event_id"], 3, "read")]
    cmd = [d for d in out if d["type"] == "command"]
    assert [c["command"] for c in cmd] == ["abort_run"]
    assert cmd[0]["reason"] == (
        "CRITICAL: tool read repeated 3 times with identical arguments and identical results "
        "within 3 attempts after auto-compaction. The compaction did not break the loop. "
        "Aborting to prevent runaway resource use."
    )


def test_a_different_outcome_inside_the_window_disarms_without_abort() -> None:
    run = RunScript()
    events = [run.compaction()]
    events += run.both("read", {"p": "/x"}, **ERR)
    events += run.both("read", {"p": "/y"}, **ERR)
    events += run.both("read", {"p": "/x"}, **ERR)
    events += run.both("read", {"p": "/x"}, **ERR)  # window is over
    state, out = run_all(events)
    assert aborts(out) == []
    assert state.guard_remaining == 0


def test_rearming_restarts_the_window() -> None:
    run = RunScript()
    events = [run.compaction()]
    events += run.both("read", {"p": "/x"}, **ERR) + run.both("read", {"p": "/x"}, **ERR)
    events += [run.compaction()]
    events += run.both("read", {"p": "/x"}, **ERR) + run.both("read", {"p": "/x"}, **ERR)
    _, out = run_all(events)
    assert aborts(out) == []
    events += run.both("read", {"p": "/x"}, **ERR)
    _, out = run_all(events)
    assert len(aborts(out)) == 1


def test_guard_is_off_when_enabled_is_exactly_false() -> None:
    run = RunScript()
    events = [run.compaction()] + [e for _ in range(3) for e in run.both("read", {}, **ERR)]
    _, out = run_all(events, replace(OFF, post_compaction_guard=False))
    assert out == []


def test_window_size_follows_the_policy() -> None:
    run = RunScript()
    events = [run.compaction()] + [e for _ in range(5) for e in run.both("read", {}, **ERR)]
    _, out = run_all(events, replace(OFF, post_compaction_window_size=5))
    assert [a[1] for a in aborts(out)] == [5]


def test_late_compaction_arms_and_feeds_already_recorded_later_outcomes() -> None:
    run = RunScript()
    compaction = run.compaction()  # seq 1, delivered after the results below
    results = [e for _ in range(3) for e in run.both("read", {"p": 1}, **ERR)]
    _, out = run_all(results + [compaction])
    assert aborts(out) == [(results[-1]["event_id"], 3, "read")]  # the window's last result


def test_outcomes_from_before_an_early_compaction_are_not_observed() -> None:
    run = RunScript()
    early = [e for _ in range(2) for e in run.both("read", {"p": 1}, **ERR)]  # seq 1..4
    compaction = run.compaction()  # seq 5, arrives first
    after = run.both("read", {"p": 1}, **ERR)
    _, out = run_all([compaction] + early + after)
    assert aborts(out) == []


def test_blocked_calls_real_outcome_is_observed_but_the_block_is_not() -> None:
    run = RunScript()
    blocked_result = {
        "result": {
            "content": [{"type": "text", "text": "CRITICAL: …"}],
            "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "x"},
        }
    }
    events = [run.compaction()]
    events += run.both("read", {}, **ERR) + run.both("read", {}, **blocked_result)
    events += run.both("read", {}, **ERR)
    state, out = run_all(events)
    assert aborts(out) == []
    assert state.guard_remaining == 1
    events += run.both("read", {}, **ERR)
    _, out = run_all(events)
    assert len(aborts(out)) == 1


def test_redelivered_events_change_nothing_and_yield_nothing() -> None:
    run = RunScript()
    events = [e for _ in range(21) for e in run.both("read", {}, **ERR)]
    state_once, out_once = run_all(events, Thresholds(enabled=True))
    doubled = [e for ev in events for e in (ev, ev)]
    state_twice, out_twice = run_all(doubled, Thresholds(enabled=True))
    assert out_twice == out_once
    assert state_twice.to_json() == state_once.to_json()


def test_run_end_leaves_a_tombstone_and_later_events_start_clean() -> None:
    run = RunScript()
    events = [e for _ in range(15) for e in run.both("read", {}, **ERR)]
    state, _ = run_all(events + [run.end()], Thresholds(enabled=True))
    assert state.is_ended and state.history == []
    _, out = run_all(events[:4], Thresholds(enabled=True), state)  # replayed old events
    assert out == [] and state.is_ended
    _, out = run_all(run.both("read", {}, **ERR), Thresholds(enabled=True), state)
    assert out == [] and not state.is_ended and len(state.history) == 1


def test_other_runs_never_share_history() -> None:
    a, b = RunScript("a"), RunScript("b")
    sa, sb = RunState(), RunState()
    th = Thresholds(enabled=True)
    for _ in range(15):
        for ev in a.both("read", {}, **ERR):
            process_event(sa, ev, th)
        for ev in b.both("read", {}, **ERR):
            process_event(sb, ev, th)
    assert len(sa.history) == 15 and len(sb.history) == 15


def test_agent_is_fixed_by_the_first_event_that_names_one() -> None:
    run = RunScript(agent_id=None)
    state = RunState()
    process_event(state, run.call("read", {}), OFF)
    assert state.agent_id is None
    ev = run.call("read", {})
    ev["agent_id"] = "coder"
    process_event(state, ev, OFF)
    ev2 = run.call("read", {})
    ev2["agent_id"] = "other"
    process_event(state, ev2, OFF)
    assert state.agent_id == "coder"


def test_outcome_for_an_unrecorded_call_still_lands() -> None:
    run = RunScript()
    state, _ = run_all([run.result("read", {"p": 1}, result=text_result("x"))])
    assert len(state.history) == 1 and state.history[0].result_hash is not None


def test_an_armed_guard_keeps_its_compactions_policy_whatever_the_outcomes_are_decided_with() -> (
    None
):
    # The compaction is decided by a 3-result window (version A), the outcomes after it by a
    # 2-result one (version B), as across a policy switch on one input topic only. In seq
    # order and with the compaction delivered after the outcomes, the guard fires at the 3rd
    # identical outcome, named by version A (docs/policy.md, "Where a switch applies").
    armed = replace(OFF, policy_version="A")
    later = replace(OFF, post_compaction_window_size=2, policy_version="B")
    run = RunScript("g-switch")
    first = run.both("read", {"p": "/x"}, **ERR)
    compaction = run.compaction()
    outcomes = [e for _ in range(3) for e in run.both("read", {"p": "/x"}, **ERR)]

    in_order, late = RunState(), RunState()
    seq_order = [d.to_wire() for e in first for d in process_event(in_order, e, later)]
    seq_order += [d.to_wire() for d in process_event(in_order, compaction, armed)]
    seq_order += [d.to_wire() for e in outcomes for d in process_event(in_order, e, later)]
    delivered_late = [d.to_wire() for e in first + outcomes for d in process_event(late, e, later)]
    delivered_late += [d.to_wire() for d in process_event(late, compaction, armed)]

    assert seq_order == delivered_late
    assert aborts(seq_order) == [(outcomes[-1]["event_id"], 3, "read")]
    assert {d["policy_version"] for d in seq_order if d.get("action") == "abort"} == {"A"}
    assert in_order.guard_policy is None and late.guard_policy is None  # ended with the abort
