"""Per-run tool-call history (SPEC §4) and the counts every rule reads from it (SPEC §5).

History is a list of `Record`, oldest first, at most `historySize` long. Helper counts walk
it newest first; none of them include the call being decided.
"""

from __future__ import annotations

from detectors.hashing import outcome_unknown_tool_name, result_hash
from detectors.state import RunState
from detectors.values import Outcome, Record, Thresholds, ToolCall


def _trim(history: list[Record], size: int) -> None:
    excess = len(history) - size
    if excess > 0:
        del history[:excess]


def record_call(state: RunState, call: ToolCall, th: Thresholds, seq: int = 0) -> None:
    """Append a pending record for a call that is about to run."""
    history = state.history
    history.append(Record(call.tool, call.args_hash, call.tool_call_id, None, None, seq))
    _trim(history, th.history_size)


def record_outcome(
    state: RunState, call: ToolCall, outcome: Outcome, th: Thresholds, seq: int = 0
) -> Record | None:
    """Attach an outcome to its pending record (or append a completed one); None if unhashable."""
    rhash = result_hash(call.tool, call.args, outcome, th.channel_tools)
    if rhash is None:
        return None
    unknown = outcome_unknown_tool_name(outcome)
    history = state.history
    tool, ahash, tcid = call.tool, call.args_hash, call.tool_call_id
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        if tcid and rec.tool_call_id != tcid:
            continue
        if rec.result_hash is None and rec.args_hash == ahash and rec.tool == tool:
            done = Record(tool, ahash, rec.tool_call_id, rhash, unknown, seq)
            history[i] = done
            return done
    done = Record(tool, ahash, tcid, rhash, unknown, seq)
    history.append(done)
    _trim(history, th.history_size)
    return done


def no_progress(history: list[Record], tool: str, args_hash: str) -> tuple[int, str | None]:
    """Streak of identical newest outcomes for this exact call, and that outcome's hash."""
    streak = 0
    latest: str | None = None
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        if rec.args_hash != args_hash or rec.tool != tool:
            continue
        rhash = rec.result_hash
        if not rhash:
            continue
        if latest is None:
            latest = rhash
            streak = 1
        elif rhash != latest:
            break
        else:
            streak += 1
    return streak, latest


def recent_count(history: list[Record], tool: str, args_hash: str) -> int:
    """How many records (pending included) share this tool and args hash."""
    n = 0
    for rec in history:
        if rec.args_hash == args_hash and rec.tool == tool:
            n += 1
    return n
