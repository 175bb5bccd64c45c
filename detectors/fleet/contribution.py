"""When a run contributes its call's signature to the fleet counts (docs/fleet.md,
"Contribution and significance").

A call contributes when it repeats a call without progress, early (long before the warning
threshold) but only in the ways that healthy fleets do not:

- the call's latest outcome was a failure (an error, an unknown tool, a terminal exec
  failure) and the run makes it again: a failing call retried once with the same failure;
- or the call returned the same result `QUIET_STREAK` times in a row and the run makes it
  again: a run stuck on a result, not a run that re-reads a shared README a few times.

Known polls contribute only their failures: polling the same status until it changes is what
healthy runs do. Nothing here reads a clock: the event time is given by the caller.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from loopguard_fleet.detectors.fleet.signature import last_outcome, loop_signature
from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.history import repeat_counts
from loopguard_fleet.detectors.outcome_facts import TERMINAL_EXEC_FAILURE
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.records import Record
from loopguard_fleet.detectors.rules import known_poll
from loopguard_fleet.detectors.streaks import counts_2026_9
from loopguard_fleet.detectors.values import Thresholds, ToolCall

__all__ = [
    "ERROR_STREAK",
    "QUIET_STREAK",
    "Observation",
    "Progress",
    "call_counts",
    "is_failure",
    "no_progress",
    "observe_call",
]

#: A failing call contributes from its first retry with the same failure.
ERROR_STREAK: Final = 1
#: A call with a result contributes once it returned the same result this many times in a row.
QUIET_STREAK: Final = 5

#: A run's no-progress streak on a call and the call's latest outcome (`no_progress`).
Progress = tuple[int, Record | None]


class Observation(NamedTuple):
    """One run's no-progress repeat of a call, as the fleet counts see it. (A named tuple: the
    worker builds one per contribution, and a frozen dataclass builds slower.)"""

    signature: str
    tool: str
    run_id: str
    agent_id: str | None
    ts_ms: int  # the event time: the event's `ts`, else its record's timestamp
    streak: int  # the run's no-progress streak on the call, before this repeat
    is_failure: bool


def is_failure(outcome: Record) -> bool:
    """True when a recorded outcome is a failure: an error, an unknown tool, a terminal exec
    failure (result hashes of errors are `error:<digest>`, docs/semantics.md §3)."""
    if outcome.unknown_tool_name is not None or outcome.outcome_kind == TERMINAL_EXEC_FAILURE:
        return True
    text = outcome.result_hash
    return text is not None and text.startswith("error:")


def observe_call(
    history: list[Record],
    call: ToolCall,
    th: Thresholds,
    run_id: str,
    agent_id: str | None,
    ts_ms: int,
    progress: Progress | None = None,
) -> Observation | None:
    """The observation a call about to run contributes, from its run's history before it;
    None when it is not a no-progress repeat that counts (`progress`: `no_progress`'s answer,
    when the caller has it)."""
    streak, outcome = no_progress(history, call, th) if progress is None else progress
    if streak < ERROR_STREAK or outcome is None:
        return None
    failed = is_failure(outcome)
    if not failed and (streak < QUIET_STREAK or th.known_poll or known_poll.is_known_poll(call)):
        return None
    signature = loop_signature(call.tool, call.args_hash, outcome)
    return Observation(signature, call.tool, run_id, agent_id, ts_ms, streak, failed)


def call_counts(
    history: list[Record], call: ToolCall, th: Thresholds
) -> tuple[int, HashKey | None, int]:
    """The (no-progress streak, latest outcome key, recent count) of a call as its profile's
    engine counts them, walked from the history (the engine's `window_counts` keeps them for a
    looping run: the fleet path takes those and gives them to `detect`)."""
    if th.semantics == OPENCLAW_2026_9:
        return counts_2026_9(history, call.tool, call.args_hash)
    return repeat_counts(history, call.tool, call.args_hash)


def no_progress(
    history: list[Record], call: ToolCall, th: Thresholds, streak: int | None = None
) -> Progress:
    """The run's no-progress streak on a call (as its profile counts it; `streak`: the
    caller's `call_counts`) and the call's latest outcome the tool returned (None when there
    is none, e.g. only vetoes)."""
    if streak is None:
        streak = call_counts(history, call, th)[0]
    if streak == 0:
        return 0, None
    return streak, last_outcome(history, call.tool, call.args_hash)
