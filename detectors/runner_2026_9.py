"""OpenClaw 2026.9's runner around its detector: the recovery allowance and the warning note.

The openclaw-2026.9 profile's detector module decides each call; these are the two things the
runner decides around it (npm `openclaw@2026.9.6`, docs/semantics.md "The runner"):

- `dist/agent-core-*.mjs`: `runLoop` keeps `toolLoopRecoveryState.criticalToolLoopSeen` for
  the run; `executeToolCalls` hands it to `completeToolLoopInterventionBatch` as `terminal`,
  and a terminal intervention ends the run with `TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE`.
  `Agent.prompt` (a new user run) and `Agent.reset` clear the flag; `Agent.continue` does not.
- `dist/internal-hooks-*.mjs`: `appendToolLoopWarning` appends the note to the tool result of a
  call whose warning was published (`finalizeToolCallOutcome`), after its raw outcome is
  recorded.
"""

from __future__ import annotations

from typing import Final

from loopguard_fleet.detectors.values import GuardAbort

__all__ = [
    "CRITICAL_ALLOWANCE",
    "RECOVERY_EXHAUSTED",
    "RECOVERY_TERMINATED_MESSAGE",
    "recovery_abort",
    "warning_note",
]

#: The detector (and abort reason) naming the end of a run's recovery allowance.
RECOVERY_EXHAUSTED: Final = "tool_loop_recovery_exhausted"
#: OpenClaw's `TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE`, verbatim.
RECOVERY_TERMINATED_MESSAGE: Final = (
    "OpenClaw stopped this run because tool-loop recovery encountered another critical loop. "
    "No blocked tool action was executed."
)
#: Critical verdicts a run may take and go on: the first blocks, the next one ends the run.
CRITICAL_ALLOWANCE: Final = 1


def warning_note(count: int) -> str:
    """The system note OpenClaw appends to the tool result of a published warning."""
    return (
        f"[System note: Tool-loop warning after {count} repeated calls. "
        "Change your approach or stop if you are not making progress.]"
    )


def recovery_abort(critical_loops: int, tool: str) -> GuardAbort | None:
    """The run's abort when its `critical_loops`-th critical verdict (this call's included) is
    past the allowance; None while the run may still recover."""
    if critical_loops <= CRITICAL_ALLOWANCE:
        return None
    return GuardAbort(RECOVERY_EXHAUSTED, critical_loops, tool, RECOVERY_TERMINATED_MESSAGE)
