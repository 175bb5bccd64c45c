"""The window counts a run keeps as its history changes (detectors/tally.py) equal the walks
of its history they replace (`repeat_counts`, `counts_2026_9`), whatever the stream: records
evicted from a small window, outcomes paired out of order by call id, vetoes, exec failures of
one identity, a state reloaded (JSON, packed, restored), its history changed behind the
tally's back or its profile switched mid-stream."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import (
    CONFIGURABLE,
    OPENCLAW_2026_9,
    Outcome,
    Record,
    RunState,
    Thresholds,
    ToolCall,
    detect,
    record_call,
    record_outcome,
)
from loopguard_fleet.detectors.engine import window_counts
from loopguard_fleet.detectors.history import repeat_counts
from loopguard_fleet.detectors.history_2026_9 import record_veto
from loopguard_fleet.detectors.packed import pack, unpack
from loopguard_fleet.detectors.streaks import counts_2026_9
from loopguard_fleet.detectors.tally import TALLY_FROM, Tally
from tests.wire import text_result

# The last two share one args hash under two tools (a privacy-mode client's own hashes).
CALLS = [
    ToolCall.of("read", {"path": "/a"}),
    ToolCall.of("read", {"path": "/b"}),
    ToolCall.of("exec", {"command": "npm test"}),
    ToolCall.of("exec", {"command": "npm run test"}),
    ToolCall("read", args_hash="h:1"),
    ToolCall("list", args_hash="h:1"),
]


def _failed(output: str) -> dict[str, Any]:
    return text_result(output, status="failed", exitCode=1, aggregated=output)


OUTCOMES = [
    Outcome.result(text_result("same")),
    Outcome.result(text_result("other")),
    Outcome.error("boom"),
    Outcome.result(_failed("boom at 10:00:01")),  # one failure identity, two hashes
    Outcome.result(_failed("boom at 10:00:09")),
    Outcome.result(text_result("", status="blocked", deniedReason="tool-loop")),  # a veto
    Outcome.pending(),
    Outcome.hashed("abc"),
    Outcome.hashed(None),
]
IDS = [None, "c1", "c2", "c3"]

# Outcomes 0 and 1 drawn more often: runs of one outcome, broken by another, are what the
# counts are about.
step = st.one_of(
    st.tuples(st.sampled_from(["call", "veto", "detect"]), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(
        st.just("outcome"), st.integers(0, 5), st.integers(0, 3), st.integers(0, 8) | st.just(0)
    ),
    st.tuples(st.sampled_from(["json", "pack", "restore", "switch", "behind"])),
)


def _call(s: tuple[Any, ...], variety: int) -> ToolCall:
    base = CALLS[s[1] % variety]
    return ToolCall(base.tool, tool_call_id=IDS[s[2]], args_hash=base.args_hash)


def _check(state: RunState, th: Thresholds, variety: int) -> None:
    """Every call's counts from the tally equal the walk's; so does an open record's presence."""
    history = state.history
    for call in CALLS[:variety]:
        tool, ahash = call.tool, call.args_hash
        if th.semantics == OPENCLAW_2026_9:
            expected = counts_2026_9(history, tool, ahash)
        else:
            expected = repeat_counts(history, tool, ahash)
        assert window_counts(state, call, th.semantics) == expected
        tally = state.tally
        if tally is None or tally.is_off:  # dropped (stale) or given up: the walks answer
            continue
        is_open = any(
            r.args_hash == ahash
            and r.result_key is None
            and (th.semantics != OPENCLAW_2026_9 or r.outcome_kind is None)
            for r in history
        )
        assert tally.has_open(history, ahash, th.semantics) == is_open


@settings(max_examples=300)
@given(
    st.lists(step, max_size=80),
    st.integers(1, 6),
    st.sampled_from([CONFIGURABLE, OPENCLAW_2026_9]),
    st.sampled_from([1, 2, 4, 6]),  # how many different calls: 6 has the two that collide
)
# A veto inside the run leaves the window with the oldest outcome of the run, not after it.
@example(
    [("outcome", 0, 0, 0), ("veto", 0, 0), ("outcome", 0, 0, 0), ("call", 1, 0)],
    3,
    OPENCLAW_2026_9,
    2,
)
def test_kept_counts_equal_the_walks(
    steps: list[tuple[Any, ...]], size: int, semantics: str, variety: int
) -> None:
    th = Thresholds(enabled=True, history_size=size, semantics=semantics)  # type: ignore[arg-type]
    state = RunState()
    for s in steps:
        kept = state.tally
        if s[0] == "json":
            state = RunState.from_json(state.to_json())
        elif s[0] == "pack":
            state = unpack(pack(state))
        elif s[0] == "restore":
            state.restore(state.save())
        elif s[0] == "behind":  # the history changed in place without the tally
            state.history.append(Record.pending(CALLS[0].tool, CALLS[0].args_hash, None, 0))
            del state.history[: max(0, len(state.history) - size)]
        elif s[0] == "switch":
            other = CONFIGURABLE if th.semantics == OPENCLAW_2026_9 else OPENCLAW_2026_9
            th = Thresholds(enabled=True, history_size=size, semantics=other)  # type: ignore[arg-type]
        else:
            call = _call(s, variety)
            if s[0] == "call":
                record_call(state, call, th)
            elif s[0] == "veto":
                record_veto(state, call, th)
            elif s[0] == "outcome":
                record_outcome(state, call, OUTCOMES[s[3]], th)
            else:
                detect(state, call, th)
            # The history functions keep a tally in step: never dropped and built again.
            assert kept is None or state.tally is kept
        _check(state, th, variety)  # a tally that no longer describes the history is not used
        if state.tally is None:  # as a loop's walk builds it (TALLY_FROM), at any point
            state.keep_tally(Tally(state.history, th.semantics))
            _check(state, th, variety)


def test_a_walk_that_meets_a_loop_builds_the_tally() -> None:
    th = Thresholds(enabled=True, history_size=30)
    state = RunState()
    call = CALLS[0]
    for _ in range(TALLY_FROM):
        detect(state, call, th)
        assert state.tally is None
        record_call(state, call, th)
        record_outcome(state, call, OUTCOMES[0], th)
    detect(state, call, th)
    assert state.tally is not None
    assert window_counts(state, call, CONFIGURABLE) == (
        TALLY_FROM,
        state.history[-1].result_key,
        TALLY_FROM,
    )
