"""The rolling detectors through process_event: docs/semantics.md §6–§7, §10's examples."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from tests.wire import RunScript, text_result

ON = Thresholds(enabled=True)


def feed(events: list[dict[str, Any]], th: Thresholds = ON, state: RunState | None = None):
    """Process events in order; returns (state, loop_events by call number)."""
    state = state or RunState()
    verdicts: dict[int, dict[str, Any]] = {}
    commands: list[dict[str, Any]] = []
    call_no = 0
    for ev in events:
        if ev["type"] == "tool_call":
            call_no += 1
        for d in process_event(state, ev, th):
            wire = d.to_wire()
            if wire["type"] == "loop_event":
                verdicts[call_no] = wire
            elif wire["type"] == "command":
                commands.append(wire)
    return state, verdicts, commands


def repeat(n: int, tool: str, args: Any, vary_args: bool = False, **outcome: Any):
    run = RunScript()
    events: list[dict[str, Any]] = []
    for i in range(n):
        a = {**args, "i": i} if vary_args else args
        events += run.both(tool, a, **outcome)
    return events


def brief(v: dict[str, Any]) -> tuple[Any, ...]:
    return (v["detector"], v["level"], v["count"], v["published"])


def test_21_identical_failing_reads_warn_at_11_and_block_at_21() -> None:
    _, verdicts, commands = feed(repeat(21, "read", {"path": "/a"}, error="File not found: /a"))
    assert brief(verdicts[11]) == ("generic_repeat", "warning", 10, True)
    assert [brief(verdicts[n]) for n in range(12, 21)] == [
        ("generic_repeat", "warning", n - 1, False) for n in range(12, 21)
    ]
    assert brief(verdicts[21]) == ("generic_repeat", "critical", 20, True)
    assert sorted(verdicts) == list(range(11, 22))
    assert [c["command"] for c in commands] == ["block_call"]
    assert commands[0]["tool_call_id"] == "c21"
    assert commands[0]["reason"] == verdicts[21]["message"]


def test_blocked_retries_stay_blocked_and_each_is_published() -> None:
    run = RunScript()
    events = []
    for _ in range(20):
        events += run.both("read", {"path": "/a"}, error="nope")
    for _ in range(5):
        events.append(run.call("read", {"path": "/a"}))  # blocked: no result arrives
    _, verdicts, commands = feed(events)
    assert [brief(verdicts[n]) for n in range(21, 26)] == [
        ("generic_repeat", "critical", 20, True)
    ] * 5
    assert len(commands) == 5


def test_poll_with_unchanged_output_warns_at_11_and_blocks_at_21() -> None:
    details = {"status": "running", "aggregated": "steady"}
    events = repeat(
        21,
        "process",
        {"action": "poll", "sessionId": "s1"},
        result=text_result("(no new output)", **details),
    )
    _, verdicts, _ = feed(events)
    assert brief(verdicts[11]) == ("known_poll_no_progress", "warning", 10, True)
    assert brief(verdicts[21]) == ("known_poll_no_progress", "critical", 20, True)
    assert verdicts[11]["message"] == (
        "WARNING: You have called process 10 times with identical arguments and no progress. "
        "Stop polling and either (1) increase wait time between checks, or (2) report the task "
        "as failed if the process is stuck."
    )


def test_poll_whose_output_changes_every_time_yields_nothing() -> None:
    run = RunScript()
    events = []
    for i in range(30):
        events += run.both(
            "process",
            {"action": "poll", "sessionId": "s1"},
            result=text_result(f"line {i}", status="running", aggregated=f"{i}"),
        )
    _, verdicts, _ = feed(events)
    assert verdicts == {}


def ping_pong_events(n: int, changing_list: bool = False) -> list[dict[str, Any]]:
    run = RunScript()
    events = []
    for i in range(1, n + 1):
        if i % 2:
            events += run.both("read", {"path": "/a"}, result=text_result("A"))
        else:
            text = f"L{i}" if changing_list else "L"
            events += run.both("list", {"dir": "/w"}, result=text_result(text))
    return events


def test_ping_pong_warns_at_call_10_and_blocks_at_call_20() -> None:
    _, verdicts, commands = feed(ping_pong_events(20))
    assert sorted(verdicts) == list(range(10, 21))
    v10 = verdicts[10]
    assert (v10["detector"], v10["level"], v10["count"], v10["tool"], v10["paired_tool"]) == (
        "ping_pong",
        "warning",
        10,
        "list",
        "read",
    )
    assert brief(verdicts[20]) == ("ping_pong", "critical", 20, True)
    assert commands[0]["tool"] == "list"


def test_ping_pong_with_one_side_changing_only_warns() -> None:
    _, verdicts, commands = feed(ping_pong_events(30, changing_list=True))
    assert {v["level"] for v in verdicts.values()} == {"warning"}
    assert commands == []


def test_missing_tool_under_changing_args_is_blocked_at_call_11() -> None:
    events = repeat(11, "exec", {"command": "x"}, vary_args=True, error="Tool exec not found")
    _, verdicts, _ = feed(events)
    assert sorted(verdicts) == [11]
    assert brief(verdicts[11]) == ("unknown_tool_repeat", "critical", 10, True)
    assert verdicts[11]["message"] == (
        "CRITICAL: attempted unavailable tool exec 10 times. "
        "Stop retrying that missing tool and answer without it."
    )
    assert verdicts[11]["warning_key"] == "unknown-tool:exec:exec"


@pytest.mark.parametrize(
    ("n_calls", "expected"),
    [
        pytest.param(10, {}, id="below-warning-nothing"),
        pytest.param(11, {11: ("generic_repeat", "warning", 10, True)}, id="at-warning"),
        pytest.param(12, {12: ("generic_repeat", "warning", 11, False)}, id="above-warning"),
    ],
)
def test_generic_repeat_around_the_warning_threshold(n_calls: int, expected: dict) -> None:
    _, verdicts, _ = feed(repeat(n_calls, "read", {"p": 1}, result=text_result("same")))
    last = {k: brief(v) for k, v in verdicts.items() if k == n_calls}
    assert last == expected


@pytest.mark.parametrize(
    ("th", "expected"),
    [
        pytest.param(Thresholds(enabled=False), None, id="disabled-no-verdict"),
        pytest.param(replace(ON, generic_repeat=False), None, id="generic-flag-off"),
        pytest.param(ON, ("generic_repeat", "critical", 20), id="defaults-generic-critical"),
        pytest.param(
            replace(ON, critical_threshold=25, global_circuit_breaker_threshold=20),
            ("global_circuit_breaker", "critical", 20),
            id="breaker-before-generic",
        ),
        pytest.param(
            replace(
                ON, generic_repeat=False, global_circuit_breaker_threshold=20, critical_threshold=19
            ),
            ("global_circuit_breaker", "critical", 20),
            id="breaker-ignores-flags",
        ),
    ],
)
def test_decision_order_and_flags_for_20_identical_outcomes(th: Thresholds, expected) -> None:
    _, verdicts, _ = feed(repeat(21, "read", {"p": 1}, error="same"), th)
    got = verdicts.get(21)
    assert (None if got is None else (got["detector"], got["level"], got["count"])) == expected


def test_unknown_tool_comes_before_the_breaker() -> None:
    th = replace(
        ON,
        unknown_tool_threshold=12,
        global_circuit_breaker_threshold=12,
        critical_threshold=11,
        warning_threshold=10,
    )
    _, verdicts, _ = feed(repeat(13, "exec", {"c": 1}, error="Tool exec not found"), th)
    assert verdicts[13]["detector"] == "unknown_tool_repeat"


def test_generic_messages_and_keys_are_verbatim() -> None:
    _, verdicts, _ = feed(repeat(21, "read", {"p": 1}, error="e"))
    w, c = verdicts[11], verdicts[21]
    assert w["message"] == (
        "WARNING: You have called read 10 times with identical arguments. If this is not "
        "making progress, stop retrying and report the task as failed."
    )
    assert c["message"] == (
        "CRITICAL: Called read with identical arguments and identical outcomes 20 times. "
        "Session execution blocked to prevent runaway loops."
    )
    assert w["warning_key"].startswith("generic:read:read:") and w["warning_key"].count(":") == 3
    assert c["warning_key"].startswith(w["warning_key"] + ":error:")


def test_warnings_are_published_at_each_new_bucket_only() -> None:
    th = replace(
        ON,
        warning_threshold=3,
        critical_threshold=100,
        global_circuit_breaker_threshold=200,
        history_size=100,
    )
    run = RunScript()
    events = []
    for i in range(45):
        events += run.both("read", {"p": 1}, result=text_result(f"changes {i}"))
    _, verdicts, _ = feed(events, th)
    published = sorted(v["count"] for v in verdicts.values() if v["published"])
    assert published == [10, 20, 30, 40]
    assert min(v["count"] for v in verdicts.values()) == 3


def test_bucket_map_keeps_256_keys_dropping_the_earliest() -> None:
    from loopguard_fleet.detectors.engine import bucket_key, publish_warning

    state = RunState()
    for i in range(257):
        assert publish_warning(state, f"k{i}", 10)
    assert len(state.buckets) == 256
    assert bucket_key("k0") not in state.buckets
    assert next(iter(state.buckets)) == bucket_key("k1")
    assert publish_warning(state, "k0", 10)  # forgotten, so published again
    assert not publish_warning(state, "k5", 15)


def test_want_verdict_always_yields_a_verdict() -> None:
    run = RunScript()
    state = RunState()
    allow = process_event(state, run.call("read", {"p": 1}, want_verdict=True), ON)
    assert [d.to_wire()["decision"] for d in allow if d.kind == "verdict"] == ["allow"]
    assert allow[0].to_wire()["tool_call_id"] == "c1"


def test_tool_names_are_normalised_everywhere() -> None:
    run = RunScript()
    events = []
    for _ in range(11):
        events += run.both("  BASH ", {"command": "ls"}, result=text_result("x"))
    _, verdicts, _ = feed(events)
    assert verdicts[11]["tool"] == "exec"
    assert verdicts[11]["warning_key"].startswith("generic:exec:exec:")
