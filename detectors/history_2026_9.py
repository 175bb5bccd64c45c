"""History updates of the openclaw-2026.9 profile: outcome facts and veto records.

A record is pending while it has neither a hash nor an outcome kind; an outcome pairs with
the newest pending record of its call as in docs/semantics.md §4 and keeps all its facts. A block
leaves a veto record (OpenClaw's runner records the blocked result it answers the model with), and
the echo of that block — a veto result with the vetoed call's `tool_call_id` — adds nothing
(docs/semantics.md, "History").

    read /x blocked (tool_call_id c9) → veto record; tool_result c9 {status: blocked,
    deniedReason: tool-loop} → nothing; tool_result s1 (a vetoed batch sibling) → veto record
"""

from __future__ import annotations

from loopguard_fleet.detectors.outcome_facts import TOOL_LOOP_VETO, FactCells, fact_cells
from loopguard_fleet.detectors.records import Rare
from loopguard_fleet.detectors.sharing import share
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.tally import trim
from loopguard_fleet.detectors.values import Outcome, Record, Thresholds, ToolCall

__all__ = ["record_facts", "record_veto"]

_VETO: FactCells = (None, TOOL_LOOP_VETO, None, False, None)


def _is_echo(history: list[Record], tool_call_id: str | None) -> bool:
    """A veto of a call whose veto is already recorded (LoopGuard's own block, echoed)."""
    if not tool_call_id:
        return False
    return any(
        rec.outcome_kind == TOOL_LOOP_VETO and rec.tool_call_id == tool_call_id for rec in history
    )


def _store(
    state: RunState,
    call: ToolCall,
    facts: FactCells,
    th: Thresholds,
    seq: int,
    event_id: str | None,
) -> Record:
    key, kind, identity, no_progress, unknown = facts
    tool, ahash, tcid = call.tool, call.args_hash, call.tool_call_id
    # Most outcomes have no rare fields: tested field by field rather than by building the
    # tuple to compare it with the defaults.
    if kind is None and unknown is None and identity is None and not no_progress:
        rare: Rare | None = None
    else:
        rare = (
            tcid if kind == TOOL_LOOP_VETO else None,  # a veto keeps its id to know the echo
            unknown,
            kind,
            None if identity is None else share(identity),  # runs share recurring identities
            no_progress,
        )
    done = Record.from_cells(
        tool,
        ahash,
        None if key is None else share(key),  # and recurring hashes
        seq,
        event_id,
        rare,
    )
    history = state.history
    tally = state.tally
    # When the newest record is not pending (a blocked loop's vetoes) the tally tells whether
    # a record of this call is left to pair with: the walk would cross the whole window for
    # nothing.
    newest = history[-1] if history else None
    walk = (
        tally is None
        or newest is None
        or (newest.result_key is None and (newest._rare is None or newest._rare[2] is None))
        or tally.has_open(history, ahash, th.semantics) is not False
    )
    # No walk is an empty range: compiled, a range loop is native; a conditional iterable
    # built a range object and iterated it generically.
    for i in range(len(history) - 1 if walk else -1, -1, -1):
        rec = history[i]
        if rec.result_key is not None:  # completed records first, by a slot: most of the window
            continue
        # The pending record of this call: no outcome kind, and this call's id if it has one.
        # Its rare fields are read from the slot at once (records.py), not through a property
        # each: in a blocked loop every veto walks a window of vetoes.
        fields = rec._rare
        if fields is None:
            if tcid:
                continue
        elif fields[2] is not None or (tcid and fields[0] != tcid):  # a veto: the kind first
            continue
        if rec.tool == tool and rec.args_hash == ahash:
            if tally is None or not tally.put(history, i, done, th.semantics):
                history[i] = done
            return done
    if tally is None or not tally.append(history, done, th.semantics, th.history_size):
        history.append(done)
        trim(history, th.history_size)
    return done


def record_facts(
    state: RunState,
    call: ToolCall,
    outcome: Outcome,
    th: Thresholds,
    seq: int = 0,
    event_id: str | None = None,
) -> Record | None:
    """Record an outcome's 2026.9 facts; None when there is nothing to record (or an echo)."""
    facts = fact_cells(call.tool, call.args, outcome, th.channel_tools)
    if facts[0] is None:
        kind = facts[1]
        if kind is None:
            return None  # neither a hash nor a kind: the call stays pending
        if kind == TOOL_LOOP_VETO and _is_echo(state.history, call.tool_call_id):
            return None
    return _store(state, call, facts, th, seq, event_id)


def record_veto(
    state: RunState, call: ToolCall, th: Thresholds, seq: int = 0, event_id: str | None = None
) -> Record:
    """The veto record a block leaves (the blocked result goes through record_outcome)."""
    return _store(state, call, _VETO, th, seq, event_id)
