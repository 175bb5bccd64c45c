"""`process_event`: SPEC §7–§9 for one wire event, producing control-topic decisions.

Every decision has an id derived from (run_id, trigger event_id, kind), so a replay or a
redelivery produces the same ids and consumers can drop duplicates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from detectors.compaction_guard import arm_guard, late_outcomes, observe_guard
from detectors.engine import detect, publish_warning
from detectors.events import TOOL_EVENTS, Event, parse_event
from detectors.history import record_call, record_outcome
from detectors.state import RunState
from detectors.values import JSON, GuardAbort, Thresholds, Verdict

DecisionKind = Literal["loop_event", "command", "verdict"]


@dataclass(frozen=True, slots=True)
class Decision:
    """One control-topic message: a loop event, a command or a verdict."""

    kind: DecisionKind
    id: str
    run_id: str
    payload: dict[str, JSON]

    def to_wire(self) -> dict[str, JSON]:
        """The control message exactly as published (ARCHITECTURE.md wire format)."""
        return self.payload


def decision_id(run_id: str, trigger_event_id: str, kind: str) -> str:
    """Stable id of the decision of `kind` triggered by one event of one run."""
    raw = f"{run_id}\x1f{trigger_event_id}\x1f{kind}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


def effective_agent(state: RunState, event: Event) -> str | None:
    """The agent whose policy applies: fixed by the run's first event that named one."""
    return state.agent_id if state.agent_id is not None else event.agent_id


def is_duplicate(state: RunState, event: Event) -> bool:
    """True for a redelivered event: its seq is not past the run's watermark for its topic."""
    if state.ended_seq is not None:
        return event.seq <= state.ended_seq
    mark = state.tool_seq if event.type in TOOL_EVENTS else state.life_seq
    return mark is not None and event.seq <= mark


def process_event(
    state: RunState, event: Event | Mapping[str, object], th: Thresholds
) -> list[Decision]:
    """Apply one event to the run's state (in place) and return the decisions it yields."""
    ev = event if isinstance(event, Event) else parse_event(event)
    if is_duplicate(state, ev):
        return []
    if state.ended_seq is not None:
        _reset(state)  # an event past run_end starts a fresh run
    if ev.type in TOOL_EVENTS:
        state.tool_seq = ev.seq
    else:
        state.life_seq = ev.seq
    if state.agent_id is None and ev.agent_id is not None:
        state.agent_id = ev.agent_id
    if ev.type == "tool_call":
        return _on_call(state, ev, th)
    if ev.type == "tool_result":
        return _on_result(state, ev, th)
    if ev.type == "compaction":
        return _on_compaction(state, ev, th)
    _end(state, ev.seq)
    return []


def _on_call(state: RunState, ev: Event, th: Thresholds) -> list[Decision]:
    call = ev.call
    assert call is not None  # parse_event guarantees a call on tool events
    verdict = detect(state, call, th)
    out: list[Decision] = []
    decision = "allow"
    if verdict is None:
        record_call(state, call, th, ev.seq)
    elif verdict.level == "critical":
        decision = "block"
        out += _block(state, ev, verdict)
    else:
        decision = "warn"
        published = publish_warning(state, verdict.warning_key, verdict.count)
        out.append(_loop_event(state, ev, call.tool, verdict, published))
        record_call(state, call, th, ev.seq)
    if ev.want_verdict:
        out.append(
            Decision(
                "verdict",
                decision_id(ev.run_id, ev.event_id, "verdict"),
                ev.run_id,
                {
                    "type": "verdict",
                    "run_id": ev.run_id,
                    "tool_call_id": call.tool_call_id,
                    "decision": decision,
                    "trigger_event_id": ev.event_id,
                    "seq": ev.seq,
                    "id": decision_id(ev.run_id, ev.event_id, "verdict"),
                },
            )
        )
    return out


def _on_result(state: RunState, ev: Event, th: Thresholds) -> list[Decision]:
    assert ev.call is not None and ev.outcome is not None  # parse_event guarantees both
    record = record_outcome(state, ev.call, ev.outcome, th, ev.seq)
    if record is None:
        return []
    abort = observe_guard(state, record, th)
    return [] if abort is None else _abort(state, ev, abort)


def _on_compaction(state: RunState, ev: Event, th: Thresholds) -> list[Decision]:
    arm_guard(state, th, ev.seq)
    if not th.post_compaction_guard:
        return []
    for record in late_outcomes(state, ev.seq):
        abort = observe_guard(state, record, th)
        if abort is not None:
            return _abort(state, ev, abort)
        if state.guard_remaining <= 0:
            break
    return []


def _end(state: RunState, seq: int) -> None:
    _reset(state)
    state.ended_seq = seq


def _reset(state: RunState) -> None:
    stamp = state.stamp_ms
    fresh = RunState()
    for name in RunState.__slots__:
        setattr(state, name, getattr(fresh, name))
    state.stamp_ms = stamp


def _loop_event(
    state: RunState,
    ev: Event,
    tool: str,
    v: Verdict | GuardAbort,
    published: bool,
) -> Decision:
    """The loop_event for a verdict (warn / block) or a guard abort."""
    did = decision_id(ev.run_id, ev.event_id, "loop_event")
    if isinstance(v, Verdict):
        level, action = v.level, "block" if v.level == "critical" else "warn"
        key, paired = v.warning_key, v.paired_tool
    else:
        level, action, key, paired = "critical", "abort", None, None
    payload: dict[str, JSON] = {
        "type": "loop_event",
        "run_id": ev.run_id,
        "trigger_event_id": ev.event_id,
        "seq": ev.seq,
        "tool": tool,
        "level": level,
        "action": action,
        "detector": v.detector,
        "count": v.count,
        "message": v.message,
        "warning_key": key,
        "paired_tool": paired,
        "published": published,
        "agent_id": state.agent_id,
        "id": did,
    }
    return Decision("loop_event", did, ev.run_id, payload)


def _command(ev: Event, command: str, fields: dict[str, JSON]) -> Decision:
    """A block_call / abort_run command; `fields` follow the common header in wire order."""
    cid = decision_id(ev.run_id, ev.event_id, command)
    payload: dict[str, JSON] = {
        "type": "command",
        "command": command,
        "command_id": cid,
        "run_id": ev.run_id,
        "trigger_event_id": ev.event_id,
        "seq": ev.seq,
        **fields,
    }
    return Decision("command", cid, ev.run_id, payload)


def _block(state: RunState, ev: Event, v: Verdict) -> list[Decision]:
    assert ev.call is not None
    fields: dict[str, JSON] = {
        "tool_call_id": ev.call.tool_call_id,
        "tool": ev.call.tool,
        "detector": v.detector,
        "count": v.count,
        "reason": v.message,
    }
    return [_loop_event(state, ev, ev.call.tool, v, True), _command(ev, "block_call", fields)]


def _abort(state: RunState, ev: Event, a: GuardAbort) -> list[Decision]:
    fields: dict[str, JSON] = {
        "detector": a.detector,
        "count": a.count,
        "tool": a.tool,
        "reason": a.message,
    }
    return [_loop_event(state, ev, a.tool, a, True), _command(ev, "abort_run", fields)]
