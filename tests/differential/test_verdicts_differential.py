"""The openclaw-2026.9 profile decides generated runs exactly as the published OpenClaw does.

Every run goes through OpenClaw's detector under Node (driver.mjs: detectToolCallLoop, then
recordToolCall, or for a block the veto record; results through recordToolCallOutcome, and
the runner's recovery allowance and warning note around them) and through LoopGuard's
process_event with the 2026.9 profile. For every tool_call both must agree: no verdict, or
the same level, detector, count, message, warning key, paired tool, liveness signal,
publication, note, and whether the call ends the run (LoopGuard's `abort_run` at that very
call, with OpenClaw's terminal message).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from loopguard_fleet.detectors import Decision, RunState, Thresholds, process_event
from tests.differential.streams import decided_runs

TH = Thresholds(enabled=True, semantics="openclaw-2026.9", channel_tools=frozenset())
SEEDS = [11, 12, 13, 14]
RUNS_PER_SEED = 60


def _verdict(payload: dict[str, Any], abort: dict[str, Any] | None) -> dict[str, Any]:
    """One call's verdict as the driver reports it, from LoopGuard's loop event and abort_run."""
    return {
        "level": payload["level"],
        "detector": payload["detector"],
        "count": payload["count"],
        "message": payload["message"],
        "warning_key": payload["warning_key"],
        "paired_tool": payload["paired_tool"],
        "liveness_signal": payload["liveness_signal"],
        "published": payload["published"],
        "note": payload.get("note"),
        "terminate_run": None if abort is None else abort["reason"],
    }


def _decide(state: RunState, event: dict[str, Any]) -> list[Decision]:
    """LoopGuard's decisions for one event (the 2026.9 profile names itself in each)."""
    decisions = process_event(state, event, TH)
    assert all(p["semantics"] == "openclaw-2026.9" for p in _loop_events(decisions))
    return decisions


def _loop_events(decisions: list[Decision]) -> list[dict[str, Any]]:
    return [d.payload for d in decisions if d.kind == "loop_event"]


def _aborts(decisions: list[Decision]) -> list[dict[str, Any]]:
    return [d.payload for d in decisions if d.payload.get("command") == "abort_run"]


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_every_verdict_agrees_with_openclaw(openclaw, seed: int) -> None:
    runs = decided_runs(seed, RUNS_PER_SEED, TH)
    # LoopGuard decides each finished run afresh (the oracle only shaped the runs).
    ours: list[list[dict[str, Any] | None]] = []
    for events in runs:
        state = RunState()
        row: list[dict[str, Any] | None] = []
        for event in events:
            decisions = _decide(state, event)
            loop_events, aborts = _loop_events(decisions), _aborts(decisions)
            assert len(aborts) <= 1
            row.append(_verdict(loop_events[0], *aborts or [None]) if loop_events else None)
        ours.append(row)
    request = {
        "mode": "verdicts",
        "streams": [{"run_id": e[0]["run_id"], "events": e} for e in runs],
    }
    theirs = openclaw(request)["streams"]
    for events, mine, other in zip(runs, ours, theirs, strict=True):
        for event, a, b in zip(events, mine, other, strict=True):
            assert (event["event_id"], a) == (event["event_id"], b)
    # The runner's allowance is exercised: runs it ends on a second critical, runs that
    # recover after one, and published warnings with their note.
    verdicts = [v for row in theirs for v in row if v is not None]
    ended = [row for row in theirs if any(v and v["terminate_run"] for v in row)]
    criticals = [[v for v in row if v and v["level"] == "critical"] for row in theirs]
    assert ended and any(len(c) == 1 for c in criticals), (len(ended), len(runs))
    assert any(v["note"] for v in verdicts)
    # The runs exercise every 2026.9 behaviour and the older rules.
    seen = Counter((v["detector"], v["level"]) for v in verdicts)
    for wanted in [
        ("generic_repeat", "warning"),
        ("generic_repeat", "critical"),
        ("global_circuit_breaker", "critical"),
        ("known_poll_no_progress", "warning"),
        ("known_poll_no_progress", "critical"),
        ("ping_pong", "warning"),
        ("ping_pong", "critical"),
        ("unknown_tool_repeat", "critical"),
        ("argument_churn", "warning"),
    ]:
        assert seen[wanted] > 0, (wanted, seen)
