"""Per-run tool-call history and the counts every rule reads from it.

Rules: docs/semantics.md §4 (history) and §5 (counts).

History is a list of `Record`, oldest first, at most `historySize` long. Helper counts walk
it newest first; none of them include the call being decided.
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashing import outcome_unknown_tool_name, result_key
from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.history_2026_9 import record_facts
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.sharing import SHARED, SHARED_ENTRIES
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.tally import trim
from loopguard_fleet.detectors.values import Outcome, Record, Thresholds, ToolCall


def record_call(state: RunState, call: ToolCall, th: Thresholds, seq: int = 0) -> None:
    """Append a pending record for a call that is about to run."""
    rec = Record.pending(call.tool, call.args_hash, call.tool_call_id, seq)
    history, tally = state.history, state.tally
    # The window counts are kept in step when the run has them (detectors/tally.py).
    if tally is not None and tally.append(history, rec, th.semantics, th.history_size):
        return
    history.append(rec)
    if len(history) > th.history_size:
        del history[: len(history) - th.history_size]


def record_outcome(
    state: RunState,
    call: ToolCall,
    outcome: Outcome,
    th: Thresholds,
    seq: int = 0,
    event_id: str | None = None,
) -> Record | None:
    """Attach an outcome to its pending record (or append a completed one); None if unhashable."""
    if th.semantics == OPENCLAW_2026_9:
        return record_facts(state, call, outcome, th, seq, event_id)
    rkey = result_key(call.tool, call.args, outcome, th.channel_tools)
    if rkey is None:
        return None
    shared = SHARED.get(rkey)  # runs that see the same result share one key (sharing.share)
    if shared is None:
        if len(SHARED) >= SHARED_ENTRIES:
            SHARED.clear()
        SHARED[rkey] = rkey
    else:
        rkey = shared
    # A returned result never names an unknown tool (only errors and edge hashes do).
    unknown = None if outcome.kind == "result" else outcome_unknown_tool_name(outcome)
    history = state.history
    tool, ahash, tcid = call.tool, call.args_hash, call.tool_call_id
    tally = state.tally
    # An outcome usually follows its call, whose pending record is then the newest. When the
    # newest is complete (the result of a blocked call, never recorded), the tally tells
    # whether a record of this call is left to pair with: the walk would cross the whole
    # window for nothing.
    walk = (
        tally is None
        or not history
        or history[-1].result_key is None
        or tally.has_open(history, ahash, th.semantics) is not False
    )
    # No walk is an empty range: compiled, a range loop is native; a conditional iterable
    # built a range object and iterated it generically.
    for i in range(len(history) - 1 if walk else -1, -1, -1):
        rec = history[i]
        # Completed records first, by a slot: they are most of the window.
        if rec.result_key is not None or (tcid and rec.tool_call_id != tcid):
            continue
        if rec.args_hash == ahash and rec.tool == tool:
            # A completed record needs no tool_call_id (it pairs a pending one; not persisted).
            done = Record.completed(tool, ahash, rkey, unknown, seq, event_id, history)
            if tally is None or not tally.put(history, i, done, th.semantics):
                history[i] = done
            return done
    done = Record.completed(tool, ahash, rkey, unknown, seq, event_id, history)
    if tally is None or not tally.append(history, done, th.semantics, th.history_size):
        history.append(done)
        trim(history, th.history_size)
    return done


def repeat_counts(
    history: list[Record], tool: str, args_hash: str
) -> tuple[int, HashKey | None, int]:
    """(no_progress streak, its outcome's hash key, recent_count) for one call, in one pass.

    no_progress: skip other calls and pending records; the newest outcome is `latest`; count
    consecutive records with that outcome. recent_count: records of this call, pending included.
    `hash_text` (detectors/hashkeys.py) gives the outcome's text.
    """
    streak = 0
    latest: HashKey | None = None
    recent = 0
    counting = True
    for rec in reversed(history):
        if rec.args_hash != args_hash or rec.tool != tool:
            continue
        recent += 1
        rhash = rec.result_key
        if not counting or not rhash:
            continue
        if latest is None:
            latest = rhash
            streak = 1
        elif rhash != latest:
            counting = False
        else:
            streak += 1
    return streak, latest, recent
