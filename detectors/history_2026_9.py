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

from loopguard_fleet.detectors.hashkeys import HashKey, hash_key
from loopguard_fleet.detectors.outcome_facts import TOOL_LOOP_VETO, OutcomeFacts, outcome_facts
from loopguard_fleet.detectors.sharing import share
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.values import Outcome, Record, Thresholds, ToolCall

__all__ = ["record_facts", "record_veto"]

_VETO = OutcomeFacts(outcome_kind=TOOL_LOOP_VETO)


def _trim(history: list[Record], size: int) -> None:
    excess = len(history) - size
    if excess > 0:
        del history[:excess]


def _shared(value: str | None) -> str | None:
    return None if value is None else share(value)  # runs share recurring identities


def _shared_key(value: str | None) -> HashKey | None:
    return None if value is None else share(hash_key(value))  # and recurring hashes


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
    facts: OutcomeFacts,
    th: Thresholds,
    seq: int,
    event_id: str | None,
) -> Record:
    is_veto = facts.outcome_kind == TOOL_LOOP_VETO
    tool, ahash, tcid = call.tool, call.args_hash, call.tool_call_id
    done = Record(
        tool,
        ahash,
        tcid if is_veto else None,  # a veto keeps its id to recognise the block's echo
        _shared_key(facts.result_hash),
        facts.unknown_tool_name,
        seq,
        event_id,
        facts.outcome_kind,
        _shared(facts.failure_identity),
        facts.no_progress,
    )
    history = state.history
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        if tcid and rec.tool_call_id != tcid:
            continue
        if rec.tool != tool or rec.args_hash != ahash:
            continue
        if rec.result_key is None and rec.outcome_kind is None:
            history[i] = done
            return done
    history.append(done)
    _trim(history, th.history_size)
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
    facts = outcome_facts(call.tool, call.args, outcome, th.channel_tools)
    if not facts.is_recordable:
        return None
    if facts.outcome_kind == TOOL_LOOP_VETO and _is_echo(state.history, call.tool_call_id):
        return None
    return _store(state, call, facts, th, seq, event_id)


def record_veto(
    state: RunState, call: ToolCall, th: Thresholds, seq: int = 0, event_id: str | None = None
) -> Record:
    """The veto record a block leaves (the blocked result goes through record_outcome)."""
    return _store(state, call, _VETO, th, seq, event_id)
