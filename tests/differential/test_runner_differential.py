"""OpenClaw's real runner ends each generated run where LoopGuard publishes its first
`abort_run`, and shows the model a note on exactly the calls whose loop event has one.

driver.mjs "runner" mode runs every generated run through agent-core's `runAgentLoop` (the
published module, not a model of it): one assistant turn per `tool_call`, admitted by a
`beforeToolBatch` that answers from OpenClaw's detector as `admitToolCallBatch` does. The
runner keeps the recovery allowance, appends the note and ends the run; LoopGuard's
openclaw-2026.9 profile must agree at the exact call, with OpenClaw's closing message as the
abort's reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.detectors import RunState, process_event
from tests.differential.streams import decided_runs
from tests.differential.test_verdicts_differential import RUNS_PER_SEED, SEEDS, TH


def _loopguard(events: list[dict[str, Any]]) -> tuple[int | None, str | None, dict[int, str]]:
    """(index of the first abort_run's call, its reason, the notes of the calls up to it)."""
    state = RunState()
    ended: int | None = None
    reason: str | None = None
    notes: dict[int, str] = {}
    for i, event in enumerate(events):
        decisions = [d.payload for d in process_event(state, event, TH)]
        if ended is not None:
            continue  # OpenClaw's run is over: the runner sees no later call
        for p in decisions:
            if p["type"] == "loop_event" and "note" in p:
                notes[i] = p["note"]
        aborts = [p for p in decisions if p.get("command") == "abort_run"]
        if aborts:
            ended, reason = i, str(aborts[0]["reason"])
    return ended, reason, notes


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_the_real_runner_ends_and_notes_runs_where_loopguard_does(openclaw: Any, seed: int) -> None:
    runs = decided_runs(seed, RUNS_PER_SEED, TH)
    request = {"mode": "runner", "streams": [{"run_id": e[0]["run_id"], "events": e} for e in runs]}
    theirs = openclaw(request)["runs"]
    ended = 0
    for events, other in zip(runs, theirs, strict=True):
        at, reason, notes = _loopguard(events)
        run_id = events[0]["run_id"]
        assert (run_id, other["ended_at"]) == (run_id, at)
        assert {int(i): text for i, text in other["notes"].items()} == notes, run_id
        if at is not None:
            ended += 1
            assert other["closing"] == reason
    # Both outcomes occur: runs the runner ends, runs it lets finish.
    assert 0 < ended < len(runs), (ended, len(runs))
