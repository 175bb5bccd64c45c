"""`apply_event(..., verdict)`: a call decided by the caller (`loopguard compare` decides each
call of a shared run under both policies first) is decided once, with the same result as
without the verdict; the verdict decides the call where it was computed on that very state
and call, and is ignored where it could not have been (held life events applied first, the
openclaw-2026.9 profile renaming the tool, events that are not calls, redeliveries)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loopguard_fleet.detectors import (
    NO_VERDICT_YET,
    OPENCLAW_2026_9,
    RunState,
    Thresholds,
    Verdict,
    apply_event,
    detect,
    detect_pair,
    parse_event,
)
from tests.wire import RunScript

LOW = Thresholds(enabled=True, warning_threshold=3, critical_threshold=5)
LOW_2026_9 = Thresholds(enabled=True, warning_threshold=3, critical_threshold=5,
                        semantics=OPENCLAW_2026_9)  # fmt: skip
DEFAULTS = Thresholds(enabled=True)
# A verdict no rule of the engine would give: where it decides, its detector shows.
MADE_UP = Verdict("critical", "made_up", 99, "CRITICAL: made up", "made-up:key")
TOOLS = ["read", "exec", "cron", "process", "command_status"]


def _run_lines(rng: random.Random, r: int) -> list[dict[str, Any]]:
    """One run's events in delivery order: looping and changing calls, compactions and
    run_ends, some delivered ahead of tool events with a lower seq or after a lost one (held
    life events), some redelivered."""
    run = RunScript(f"run-{r}", agent_id=rng.choice([None, "main"]))
    out: list[dict[str, Any]] = []
    last: tuple[str, Any] | None = None
    prev: tuple[str, Any] | None = None
    for _ in range(rng.randint(5, 60)):
        step = rng.random()
        if step < 0.06:
            life = run.compaction() if rng.random() < 0.6 else run.end()
            if rng.random() < 0.5 and out:
                out.insert(len(out) - 1, life)  # ahead of the last tool event: held
            else:
                out.append(life)
            if rng.random() < 0.3:
                run.seq += 1  # a lost event: the life event waits for a later call
            continue
        if last is None or rng.random() < 0.2:  # else the same call again: loops
            tool = rng.choice(TOOLS)
            last, prev = (
                (tool, {"action": "poll"} if tool == "process" else {"p": rng.randint(0, 1)}),
                last,
            )
        elif prev is not None and rng.random() < 0.4:
            last, prev = prev, last  # two calls alternating: ping-pong
        tool, args = last
        error = "same" if rng.random() < 0.8 else f"e{rng.randint(0, 3)}"
        if rng.random() < 0.1:
            error = f"Tool {rng.choice(['x', 'y'])} not found"
        out += run.both(tool, args, error=error)
        if rng.random() < 0.05:
            out.append(dict(out[rng.randrange(len(out))]))  # a redelivery
    return out


def _fleet(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    queues = [_run_lines(rng, r) for r in range(8)]
    lines: list[dict[str, Any]] = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        lines.append(q.pop(0))
    return lines


@pytest.mark.parametrize("th", [LOW, DEFAULTS, LOW_2026_9], ids=["low", "defaults", "2026.9"])
@pytest.mark.parametrize("seed", range(6))
def test_the_verdict_the_caller_computed_gives_the_decisions_and_state_of_none_given(
    th: Thresholds, seed: int
) -> None:
    given: dict[str, RunState] = {}
    alone: dict[str, RunState] = {}
    decided = 0
    for obj in _fleet(seed):
        ev = parse_event(obj)
        a = given.setdefault(ev.run_id, RunState())
        b = alone.setdefault(ev.run_id, RunState())
        if ev.type == "tool_call" and ev.call is not None:
            verdict = detect(a, ev.call, th)
            decided += verdict is not None
            got = apply_event(a, ev, th, verdict)
        else:
            got = apply_event(a, ev, th)
        assert got == apply_event(b, ev, th)
        assert a == b
    assert decided > 0  # the fleets loop: some given verdicts are warnings or blocks


def _looping(run: RunScript, th: Thresholds, calls: int) -> tuple[RunState, list[Any]]:
    state = RunState()
    events = [e for _ in range(calls) for e in run.both("read", {"p": 1}, error="x")]
    for e in events:
        apply_event(state, e, th)
    return state, events


def test_a_given_verdict_decides_the_call_instead_of_detect() -> None:
    run = RunScript("r1")
    state, _ = _looping(run, LOW, 1)
    before = list(state.history)
    got = apply_event(state, run.call("read", {"p": 2}), LOW, MADE_UP)
    assert [(d.kind, d.payload.get("detector")) for d in got.decisions] == [
        ("loop_event", "made_up"),
        ("command", "made_up"),
    ]
    assert state.history == before  # a blocked call is not recorded


def test_a_given_none_allows_a_call_detect_would_warn_on() -> None:
    run = RunScript("r1")
    state, _ = _looping(run, LOW, 3)
    call = run.call("read", {"p": 1})
    assert detect(state, parse_event(call).call, LOW) is not None  # type: ignore[arg-type]
    got = apply_event(state, call, LOW, None)
    assert got.decisions == []
    assert state.history[-1].result_key is None  # the call went in pending, allowed
    assert state.buckets == {}


def _held_run_end_then_call(run: RunScript) -> tuple[RunState, dict[str, Any]]:
    """A looping run whose run_end arrived after a lost event (held), then a call past it."""
    state, _ = _looping(run, LOW, 6)
    run.seq += 1  # lost
    apply_event(state, run.end(), LOW)
    assert state.held
    return state, run.call("read", {"p": 1})


def _renamed_tool(run: RunScript) -> tuple[RunState, dict[str, Any]]:
    state = RunState()
    for e in [e for _ in range(6) for e in run.both("cron", {"p": 1}, error="x")]:
        apply_event(state, e, LOW_2026_9)
    return state, run.call("cron", {"p": 9})


@pytest.mark.parametrize(
    "case",
    ["held_run_end_applied_first", "tool_renamed_by_2026_9", "tool_result", "redelivered_call"],
)
def test_a_given_verdict_is_ignored_where_it_could_not_have_been_computed(case: str) -> None:
    run = RunScript("r1")
    th = LOW
    if case == "held_run_end_applied_first":
        state, ev = _held_run_end_then_call(run)
    elif case == "tool_renamed_by_2026_9":
        state, ev = _renamed_tool(run)
        th = LOW_2026_9
    elif case == "tool_result":
        state, events = _looping(run, th, 2)
        ev = run.result("read", {"p": 1}, error="x")
    else:
        state, events = _looping(run, th, 2)
        ev = events[-2]
    twin = RunState()
    twin.restore(state.save())
    got = apply_event(state, ev, th, MADE_UP)
    assert got == apply_event(twin, ev, th, NO_VERDICT_YET)
    assert state == twin
    assert all(d.payload.get("detector") != "made_up" for d in got.decisions)


PAIRS = {
    "lower critical": (Thresholds(enabled=True, warning_threshold=3, critical_threshold=8), LOW),
    "lower both": (LOW, Thresholds(enabled=True, warning_threshold=2, critical_threshold=4)),
    "detectors off": (
        LOW,
        Thresholds(
            enabled=True,
            warning_threshold=3,
            critical_threshold=5,
            ping_pong=False,
            generic_repeat=False,
        ),
    ),
    "breaker": (
        LOW,
        Thresholds(
            enabled=True,
            warning_threshold=3,
            critical_threshold=5,
            global_circuit_breaker_threshold=6,
            unknown_tool_threshold=2,
        ),
    ),
    "one disabled": (Thresholds(), LOW),
    "profiles": (LOW, LOW_2026_9),
}


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
@pytest.mark.parametrize("seed", range(4))
def test_detect_pair_is_detect_under_each_policy(
    pair: tuple[Thresholds, Thresholds], seed: int
) -> None:
    a, b = pair
    states: dict[str, RunState] = {}
    differ = 0
    for obj in _fleet(seed):
        ev = parse_event(obj)
        state = states.setdefault(ev.run_id, RunState())
        if ev.type == "tool_call" and ev.call is not None:
            got = detect_pair(state, ev.call, a, b)
            assert got == (detect(state, ev.call, a), detect(state, ev.call, b))
            differ += got[0] != got[1]
        apply_event(state, ev, a)
    assert differ > 0  # the fleets reach calls on which the two policies disagree
