"""The openclaw-2026.9 profile in the engine: decisions, veto records, provenance, state."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from loopguard_fleet.detectors import (
    Outcome,
    Record,
    RunState,
    Thresholds,
    ToolCall,
    detect,
    process_event,
    record_call,
    record_outcome,
)
from tests.differential.outcomes import veto_result
from tests.differential.streams import generate_run
from tests.wire import RunScript, text_result

OLD = Thresholds(enabled=True)
NEW = Thresholds(enabled=True, semantics="openclaw-2026.9")


def _loop_events(events: list[dict[str, Any]], th: Thresholds) -> list[dict[str, Any]]:
    state = RunState()
    out = []
    for ev in events:
        out += [d.payload for d in process_event(state, ev, th) if d.kind == "loop_event"]
    return out


def _failing_reads(n: int, run: RunScript | None = None) -> list[dict[str, Any]]:
    run = run or RunScript()
    events: list[dict[str, Any]] = []
    for _ in range(n):
        events += run.both("read", {"path": "/x"}, error="ENOENT")
    return events


def test_the_default_profile_writes_loop_events_without_profile_fields() -> None:
    payload = _loop_events(_failing_reads(11), OLD)[0]
    assert list(payload) == [
        "type", "run_id", "trigger_event_id", "seq", "tool", "level", "action", "detector",
        "count", "message", "warning_key", "paired_tool", "published", "agent_id", "signature",
        "enforced", "policy_version", "id",
    ]  # fmt: skip


def test_the_2026_9_profile_names_itself_in_every_loop_event() -> None:
    events = _loop_events(_failing_reads(25), NEW)
    assert {(e["semantics"], e["liveness_signal"]) for e in events} == {("openclaw-2026.9", None)}
    tail = ["enforced", "policy_version", "id"]
    assert list(events[1])[-5:] == ["semantics", "liveness_signal", *tail]  # unpublished warning
    assert list(events[0])[-6:] == ["semantics", "liveness_signal", "note", *tail]  # published


def test_the_2026_9_critical_generic_message() -> None:
    critical = [e for e in _loop_events(_failing_reads(21), NEW) if e["level"] == "critical"]
    assert critical[0]["message"] == (
        "CRITICAL: Called read with identical outcomes 20 times. "
        "Session execution blocked to prevent runaway loops."
    )


def test_blocked_retries_count_toward_the_breaker_only_in_2026_9() -> None:
    # 20 failures, then the model retries the blocked call 15 more times.
    run = RunScript()
    events = _failing_reads(20, run) + [run.call("read", {"path": "/x"}) for _ in range(15)]
    old = [(e["detector"], e["count"]) for e in _loop_events(events, OLD) if e["action"] == "block"]
    new = [(e["detector"], e["count"]) for e in _loop_events(events, NEW) if e["action"] == "block"]
    assert old == [("generic_repeat", 20)] * 15
    assert new[:10] == [("generic_repeat", n) for n in range(20, 30)]
    # The window holds 30 records, failures and vetoes alike: the breaker stays at 30.
    assert new[10:] == [("global_circuit_breaker", 30)] * 5


def test_the_echo_of_a_block_adds_nothing_but_a_runtime_veto_does() -> None:
    run = RunScript()
    events = _failing_reads(20, run)
    events.append(run.call("read", {"path": "/x"}))  # blocked: count 20
    events.append(run.result("read", {"path": "/x"}, result=veto_result()))  # its echo
    sibling = run.result("read", {"path": "/x"}, result=veto_result())
    sibling["tool_call_id"] = "sibling"  # a veto the runtime made for a batch sibling
    events.append(sibling)
    events.append(run.call("read", {"path": "/x"}))
    counts = [e["count"] for e in _loop_events(events, NEW) if e["action"] == "block"]
    assert counts == [20, 22]


def test_churn_warns_with_its_liveness_signal() -> None:
    run = RunScript()
    events: list[dict[str, Any]] = []
    for i in range(12):
        events += run.both("write", {"path": f"/f{i % 3}"}, result=text_result("", changed=False))
    events.append(run.call("write", {"path": "/f0"}))
    last = _loop_events(events, NEW)[-1]
    assert (last["detector"], last["count"], last["warning_key"], last["liveness_signal"]) == (
        "argument_churn",
        12,
        "argument-churn:write",
        "argument_churn",
    )
    assert last["message"].startswith("WARNING: write has cycled through 3 repeated argument")
    assert not [e for e in _loop_events(events, OLD) if e["detector"] == "argument_churn"]


def test_a_zero_warning_threshold_reaches_rule_8_whatever_the_newest_record() -> None:
    """Churn counts 0 when the newest record is another tool's (or there is none), and a zero
    warning threshold warns on that 0: the engine's shortcut past rule 8 must not skip it."""
    th = Thresholds(
        enabled=True, semantics="openclaw-2026.9", warning_threshold=0, generic_repeat=False
    )
    state = RunState()
    read = ToolCall.of("read", {"path": "/a"}, "c2")
    seen = [detect(state, read, th)]
    listing = ToolCall.of("list", {"dir": "/w"}, "c1")
    record_call(state, listing, th)
    record_outcome(state, listing, Outcome.result({"content": []}), th)
    seen.append(detect(state, read, th))
    assert [(v.detector, v.count, v.liveness_signal) for v in seen if v is not None] == [
        ("argument_churn", 0, "argument_churn"),
    ] * 2


def test_cron_is_automations_in_2026_9() -> None:
    run = RunScript()
    events = [ev for _ in range(11) for ev in run.both("cron", {"a": 1}, error="x")]
    assert {e["tool"] for e in _loop_events(events, NEW)} == {"automations"}
    assert {e["tool"] for e in _loop_events(events, OLD)} == {"cron"}


def test_a_state_with_outcome_facts_round_trips_and_configurable_states_are_unchanged() -> None:
    state = RunState(
        history=[
            Record("read", "read:" + "a" * 64, "c1", None, None, 3, None, "tool-loop-veto"),
            Record("exec", "exec:" + "b" * 64, None, "c" * 64, None, 4, "r:4",
                   "terminal-exec-failure", "d" * 64),
            Record("write", "write:" + "e" * 64, None, "f" * 64, None, 5, None, None, None, True),
        ]
    )  # fmt: skip
    assert RunState.from_json(state.to_json()) == state
    assert RunState.from_json(state.to_json()).history[0].tool_call_id == "c1"
    plain = RunState(  # the same records without their facts and call ids
        history=[
            Record(r.tool, r.args_hash, None, r.result_hash, r.unknown_tool_name, r.seq, r.event_id)
            for r in state.history
        ]
    )
    assert all(len(row) <= 7 for row in json.loads(plain.to_json())["h"])


@pytest.mark.parametrize("seed", [21, 22], ids=["seed-21", "seed-22"])
def test_restoring_the_state_anywhere_changes_no_2026_9_decision(seed: int) -> None:
    rng = random.Random(seed)
    for n in range(15):
        live = RunState()

        def decide(ev: dict[str, Any], live: RunState = live) -> bool:
            return any(d.payload.get("action") == "block" for d in process_event(live, ev, NEW))

        events = generate_run(rng, f"r{n}", decide)
        straight, restored = RunState(), RunState()
        for ev in events:
            restored = RunState.from_json(restored.to_json())
            a = [d.payload for d in process_event(straight, ev, NEW)]
            b = [d.payload for d in process_event(restored, ev, NEW)]
            assert a == b
        assert restored == straight
