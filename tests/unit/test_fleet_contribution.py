"""When a run contributes a signature (docs/fleet.md, "Contribution and significance")."""

from __future__ import annotations

from typing import Any

from loopguard_fleet.detectors import OPENCLAW_2026_9, RunState, Thresholds, ToolCall, process_event
from loopguard_fleet.detectors.fleet import QUIET_STREAK, observe_call, signature_of_call
from tests.wire import RunScript, text_result

ON = Thresholds(enabled=True)


def observations(pairs: list[tuple[str, Any, dict[str, Any]]], th: Thresholds = ON):
    """The observation each call of a run would contribute, in call order (None: none)."""
    run, state, out = RunScript("r1", agent_id="main"), RunState(), []
    for tool, args, outcome in pairs:
        call = ToolCall.of(tool, args)
        out.append(observe_call(state.history, call, th, "r1", "main", 1000 * run.seq))
        for ev in run.both(tool, args, **outcome):
            process_event(state, ev, th)
    return out


def test_a_failing_call_contributes_from_its_first_retry_with_the_same_failure() -> None:
    got = observations([("read", {"path": "/x"}, {"error": "ENOENT"})] * 4)
    assert got[0] is None  # never called before
    assert [o.streak for o in got[1:]] == [1, 2, 3]  # type: ignore[union-attr]
    assert all(o.is_failure and o.tool == "read" and o.run_id == "r1" for o in got[1:])  # type: ignore[union-attr]
    assert len({o.signature for o in got[1:]}) == 1  # type: ignore[union-attr]


def test_a_failure_then_another_failure_starts_a_new_streak_and_a_new_signature() -> None:
    got = observations(
        [("read", {"path": "/x"}, {"error": "ENOENT"})] * 2
        + [("read", {"path": "/x"}, {"error": "EACCES"})] * 2
    )
    assert [o and o.streak for o in got] == [None, 1, 2, 1]
    assert got[1].signature != got[3].signature  # type: ignore[union-attr]


def test_a_shared_readme_read_a_few_times_never_contributes() -> None:
    readme = ("read", {"path": "README.md"}, {"result": text_result("# Project")})
    got = observations([readme] * QUIET_STREAK)
    assert got == [None] * QUIET_STREAK


def test_the_same_result_contributes_once_it_is_a_streak_of_quiet_streak() -> None:
    readme = ("read", {"path": "README.md"}, {"result": text_result("# Project")})
    got = observations([readme] * (QUIET_STREAK + 2))
    assert [o and o.streak for o in got][QUIET_STREAK:] == [QUIET_STREAK, QUIET_STREAK + 1]
    assert not got[-1].is_failure  # type: ignore[union-attr]


def test_a_known_poll_contributes_its_failures_only() -> None:
    poll = ("command_status", {"id": "job-1"}, {"result": text_result("running")})
    assert observations([poll] * (QUIET_STREAK + 3)) == [None] * (QUIET_STREAK + 3)
    failing = ("command_status", {"id": "job-1"}, {"error": "no such job"})
    assert observations([failing] * 2)[1] is not None


def test_a_progressing_call_does_not_contribute() -> None:
    pages = [("read", {"path": "/log"}, {"result": text_result(f"page {i}")}) for i in range(8)]
    assert observations(pages) == [None] * 8


def test_the_observation_signs_as_the_call_signs_its_loop_events() -> None:
    state, run = RunState(), RunScript()
    for ev in run.both("read", {"path": "/x"}, error="ENOENT"):
        process_event(state, ev, ON)
    call = ToolCall.of("read", {"path": "/x"})
    obs = observe_call(state.history, call, ON, "r1", None, 0)
    assert obs is not None and obs.signature == signature_of_call(
        state.history, call.tool, call.args_hash
    )


def test_the_2026_9_profile_contributes_blocked_retries_with_the_tools_failure() -> None:
    th = Thresholds(enabled=True, semantics=OPENCLAW_2026_9)
    got = observations([("read", {"path": "/x"}, {"error": "ENOENT"})] * 24, th)
    assert all(o is not None and o.is_failure for o in got[1:])
    assert len({o.signature for o in got[1:]}) == 1  # type: ignore[union-attr]
