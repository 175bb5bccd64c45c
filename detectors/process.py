"""`process_event`: docs/semantics.md §7–§9 for one wire event, producing control-topic decisions.

Every decision has an id derived from (run_id, trigger event_id, kind), so a replay or a
redelivery produces the same ids and consumers can drop duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from hashlib import sha256
from typing import Final, Literal, NamedTuple

from loopguard_fleet.detectors.compaction_guard import (
    arm_guard,
    arm_with,
    guard_policy_of,
    guard_thresholds,
    late_outcomes,
    observe_guard,
)
from loopguard_fleet.detectors.engine import detect, publish_warning, window_counts
from loopguard_fleet.detectors.events import TOOL_EVENTS, Event, parse_event
from loopguard_fleet.detectors.fleet.contribution import (
    Observation,
    no_progress,
    observe_call,
)
from loopguard_fleet.detectors.fleet.early import DETECTOR as FLEET_DETECTOR
from loopguard_fleet.detectors.fleet.early import FleetView, early_verdict, publish_early
from loopguard_fleet.detectors.fleet.signature import loop_signature, signature_of_call
from loopguard_fleet.detectors.hashing import outcome_unknown_tool_name, result_hash
from loopguard_fleet.detectors.history import record_call, record_outcome
from loopguard_fleet.detectors.history_2026_9 import record_veto
from loopguard_fleet.detectors.outcome_facts import retool_2026_9
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.runner_2026_9 import (
    RECOVERY_EXHAUSTED,
    recovery_abort,
    warning_note,
)
from loopguard_fleet.detectors.state import GuardPolicy, LifeKind, RunState
from loopguard_fleet.detectors.values import (
    JSON,
    GuardAbort,
    Outcome,
    Record,
    Thresholds,
    ToolCall,
    Verdict,
)

DecisionKind = Literal["loop_event", "command", "verdict", "fleet_signal"]


# __init__ written out for the compiled engine (setup.py), as values.py does for its hot
# classes: a frozen dataclass's generated __init__ ran interpreted, ~6,000 instructions a
# decision. Immutable by contract: nothing assigns to a decision once it is made.
@dataclass(slots=True, init=False)
class Decision:
    """One control-topic message: a loop event, a command or a verdict (of a run), or a
    fleet signal (of the fleet: `run_id` empty; streams/processing/fleet.py)."""

    kind: DecisionKind
    id: str
    run_id: str
    payload: dict[str, JSON]

    def __init__(self, kind: DecisionKind, id: str, run_id: str, payload: dict[str, JSON]) -> None:
        self.kind = kind
        self.id = id
        self.run_id = run_id
        self.payload = payload

    def to_wire(self) -> dict[str, JSON]:
        """The control message exactly as published (docs/wire-format.md)."""
        return self.payload


def decision_id(run_id: str, trigger_event_id: str, kind: str) -> str:
    """Stable id of the decision of `kind` triggered by one event of one run."""
    raw = f"{run_id}\x1f{trigger_event_id}\x1f{kind}".encode("utf-8", "surrogatepass")
    return sha256(raw).hexdigest()[:32]


def effective_agent(state: RunState, event: Event) -> str | None:
    """The agent whose policy applies: fixed by the run's first event that named one."""
    return state.agent_id if state.agent_id is not None else event.agent_id


def is_duplicate(state: RunState, event: Event) -> bool:
    """True for a redelivered event: its seq is not past the run's watermark for its topic."""
    mark = state.tool_seq if event.type in TOOL_EVENTS else state.life_seq
    return mark is not None and event.seq <= mark


class _NoVerdictYet(Enum):
    NO_VERDICT_YET = 0


#: `apply_event`'s default `verdict`: none computed yet, so it runs `detect` itself.
NO_VERDICT_YET: Final = _NoVerdictYet.NO_VERDICT_YET
GivenVerdict = Verdict | None | _NoVerdictYet


class Applied(NamedTuple):
    """What one event did to its run: a redelivery (`is_duplicate`, nothing changed) or the
    decisions it yielded (often none); with fleet signals on, the signature a tool_call
    contributed to the fleet counts (docs/fleet.md), if any."""

    decisions: list[Decision]
    is_duplicate: bool = False
    observation: Observation | None = None


# `Applied(out)` runs the named tuple's generated `__new__`, a Python frame per event; the
# tuple's own constructor builds the same value.
_new_tuple = tuple.__new__


def apply_event(
    state: RunState,
    event: Event | Mapping[str, object],
    th: Thresholds,
    verdict: GivenVerdict = NO_VERDICT_YET,
    fleet: FleetView | None = None,
) -> Applied:
    """Apply one event to the run's state (in place): its decisions, or that it was a duplicate.

    Decisions are those of the run's events in seq order, however the two input topics
    interleave (docs/wire-format.md, "Ordering"): tool events apply on arrival; a compaction or
    run_end that arrives ahead of tool events with a lower seq is held until they are in. A
    redelivered event (seq at or below its topic's watermark) changes nothing.

    `verdict`, on a tool_call: `detect(state, event.call, th)` as the caller already computed
    it on this state (`loopguard compare` decides each call of a shared run under both
    policies first), so the call is decided once. It is used only where the call meets that
    very state and call: not when held life events apply first, nor when the openclaw-2026.9
    profile renames the tool; there, and on other events, `detect` runs as without it.

    `fleet`: the fleet settings and firing signals the run's partition has applied, and the
    event's event time (docs/fleet.md); None (fleet signals off) decides as OpenClaw does and
    reads no time.
    """
    ev = event if isinstance(event, Event) else parse_event(event)
    is_tool = ev.type in TOOL_EVENTS
    mark = state.tool_seq if is_tool else state.life_seq
    if mark is not None and ev.seq <= mark:
        return Applied([], is_duplicate=True)
    if th.semantics == OPENCLAW_2026_9:
        retooled = _retool(ev)
        if retooled is not ev:
            ev, verdict = retooled, NO_VERDICT_YET  # the verdict was on the other name
    if is_tool:
        # The tool-event path with _begin and _name_agent written out: it runs for almost
        # every event (docs/performance.md).
        released = None
        if state.held:
            released = _release_held(state, th, before=ev.seq)
            verdict = NO_VERDICT_YET  # those may have changed the history it was decided on
        if state.ended_seq is not None:
            state.ended_seq = None  # an event past an applied run_end starts the run afresh
        if state.agent_id is None and ev.agent_id is not None:
            state.agent_id = ev.agent_id
        state.tool_seq = ev.seq
        if ev.type == "tool_call":
            if fleet is not None and fleet.settings.enabled:
                return _fleet_call(state, ev, th, verdict, fleet, released)
            out = _on_call(state, ev, th, verdict)
        else:
            out = _on_result(state, ev, th)
        if released:
            out = released + out
    else:
        _name_agent(state, ev)
        state.life_seq = ev.seq
        kind: LifeKind = "compaction" if ev.type == "compaction" else "run_end"
        if state.tool_seq is not None and ev.seq < state.tool_seq and not state.held:
            return Applied(_on_late_life(state, ev, kind, th))
        # A compaction held for its place keeps the policy it was read under: the guard it
        # arms is its own topic-partition's, not that of the tool event that releases it.
        state.held.append((ev.seq, kind, guard_policy_of(th) if kind == "compaction" else None))
        out = []
    if state.held:
        out += _release_ready(state, th)
    return _new_tuple(Applied, (out, False, None))


def _fleet_call(
    state: RunState,
    ev: Event,
    th: Thresholds,
    given: GivenVerdict,
    fleet: FleetView,
    released: list[Decision] | None,
) -> Applied:
    """A tool_call with fleet signals on: its contribution, then the call decided with the
    early rule (the tail of `apply_event`'s tool path)."""
    call = ev.call
    assert call is not None  # parse_event guarantees a call on tool events
    # The call's counts, walked for once: its contribution, the engine and the early rule.
    history = state.history
    counts = window_counts(state, call, th.semantics)
    progress = no_progress(history, call, th, counts[0])
    obs = observe_call(history, call, th, ev.run_id, state.agent_id, fleet.ts_ms, progress)
    verdict = detect(state, call, th, counts) if given is NO_VERDICT_YET else given
    verdict = early_verdict(history, call, th, fleet.settings, fleet.firing, verdict, progress)
    out = _on_call(state, ev, th, verdict)
    if released:
        out = released + out
    if state.held:
        out += _release_ready(state, th)
    return Applied(out, False, obs)


def hash_outcome(event: Event, channel_tools: frozenset[str]) -> Event:
    """The event with its outcome reduced to its result hash, as privacy mode sends it.

    For feeding one event to several policies of the configurable profile that share these
    channel tools (`loopguard compare`): the result is hashed once instead of once per policy,
    with the same decisions. Events without a full outcome come back unchanged. The
    openclaw-2026.9 profile reads the outcome itself: do not use it there.
    """
    call, outcome = event.call, event.outcome
    if call is None or outcome is None or outcome.kind in ("hashed", "pending"):
        return event
    rhash = result_hash(call.tool, call.args, outcome, channel_tools)
    unknown = outcome_unknown_tool_name(outcome)
    hashed = Outcome("hashed", hash=rhash, unknown_tool_name=unknown)
    e = event  # built field by field: dataclasses.replace costs more than the hashing saved
    return Event(e.type, e.run_id, e.event_id, e.seq, e.agent_id, call, hashed, e.want_verdict)


def process_event(
    state: RunState, event: Event | Mapping[str, object], th: Thresholds
) -> list[Decision]:
    """Apply one event to the run's state (in place) and return the decisions it yields; `[]`
    for a duplicate too (`apply_event` tells the two apart)."""
    return apply_event(state, event, th).decisions


def _retool(ev: Event) -> Event:
    """The event with its tool named as OpenClaw 2026.9's runner names it (`cron`)."""
    call = ev.call
    if call is None or retool_2026_9(call.tool) == call.tool:
        return ev
    tool = retool_2026_9(call.tool)
    digest = call.args_hash.partition(":")[2]
    renamed = ToolCall(tool, call.args, call.tool_call_id, f"{tool}:{digest}", call.action)
    return replace(ev, call=renamed)


def _name_agent(state: RunState, ev: Event) -> None:
    if state.agent_id is None and ev.agent_id is not None:
        state.agent_id = ev.agent_id


def _begin(state: RunState) -> None:
    """An event past an applied run_end starts the run afresh (the tombstone ends)."""
    if state.ended_seq is not None:
        state.ended_seq = None


def _position(state: RunState) -> int | None:
    """The highest seq applied so far on either topic."""
    marks = [m for m in (state.tool_seq, state.life_done) if m is not None]
    return max(marks) if marks else None


def _release_held(state: RunState, th: Thresholds, before: int) -> list[Decision]:
    """Apply the held life events whose seq precedes a tool event about to apply."""
    out: list[Decision] = []
    while state.held and state.held[0][0] < before:
        seq, kind, policy = state.held.pop(0)
        out += _apply_life(state, kind, seq, th, policy)
    return out


def _release_ready(state: RunState, th: Thresholds) -> list[Decision]:
    """Apply held life events that come right after everything applied (seq + 1): nothing of
    the run can still be missing before them."""
    out: list[Decision] = []
    while state.held:
        pos = _position(state)
        if pos is None or state.held[0][0] != pos + 1:
            break
        seq, kind, policy = state.held.pop(0)
        out += _apply_life(state, kind, seq, th, policy)
    return out


def _apply_life(
    state: RunState, kind: LifeKind, seq: int, th: Thresholds, policy: GuardPolicy | None
) -> list[Decision]:
    """A compaction or run_end at its place in seq order: no later tool event is applied. A
    compaction arms the guard with the policy it was held with (`th`'s when a state stored
    before held compactions kept theirs)."""
    _begin(state)
    state.life_done = seq
    if kind == "compaction":
        arm_with(state, guard_policy_of(th) if policy is None else policy, seq)
    else:
        _end(state, seq)
    return []


def _on_late_life(state: RunState, ev: Event, kind: LifeKind, th: Thresholds) -> list[Decision]:
    """A life event delivered after tool events with a higher seq were applied."""
    seq = ev.seq
    state.life_done = seq
    if kind == "run_end":
        # The tool events after it can only be a new run under the same id, already applied
        # to this state; ending it now would drop them. The idle TTL ends the state instead.
        return []
    arm_guard(state, th, seq)
    if not th.post_compaction_guard:
        return []
    for record in late_outcomes(state, seq):
        abort = observe_guard(state, record, th)
        if abort is not None:
            # Attributed to the result that completed the window, as in seq order.
            eid = record.event_id if record.event_id is not None else f"seq:{record.seq}"
            return _abort(state, Trigger(ev.run_id, eid, record.seq), abort, th, _of(record))
        if state.guard_remaining <= 0:
            break
    return []


def _on_call(
    state: RunState, ev: Event, th: Thresholds, given: GivenVerdict = NO_VERDICT_YET
) -> list[Decision]:
    call = ev.call
    assert call is not None  # parse_event guarantees a call on tool events
    verdict = detect(state, call, th) if given is NO_VERDICT_YET else given
    out: list[Decision] = []
    decision = "allow"
    if verdict is None:
        record_call(state, call, th, ev.seq)
    elif not th.enforce:
        out.append(_observed(state, ev, call, verdict, th))
    elif verdict.level == "critical":
        decision = "block"
        trigger = Trigger(ev.run_id, ev.event_id, ev.seq)
        signature = signature_of_call(state.history, call.tool, call.args_hash)
        out += _block(state, trigger, call, verdict, th, signature)
        if th.semantics == OPENCLAW_2026_9:
            record_veto(state, call, th, ev.seq, ev.event_id)
            state.critical_loops += 1
            abort = recovery_abort(state.critical_loops, call.tool)
            if abort is not None:
                out += _abort(state, trigger, abort, th, signature, _RECOVERY_EVENT)
    else:
        decision = "warn"
        if verdict.detector == FLEET_DETECTOR:
            published = publish_early(state, verdict.warning_key)
        else:
            published = publish_warning(state, verdict.warning_key, verdict.count)
        trigger = Trigger(ev.run_id, ev.event_id, ev.seq)
        signature = signature_of_call(state.history, call.tool, call.args_hash)
        out.append(_loop_event(state, trigger, call.tool, verdict, published, th, signature))
        record_call(state, call, th, ev.seq)
    if ev.want_verdict:
        shown = out[0].payload if out and th.enforce else None  # observe answers a plain allow
        out.append(_verdict(ev, call, decision, shown, th))
    return out


def _observed(
    state: RunState, ev: Event, call: ToolCall, verdict: Verdict, th: Thresholds
) -> Decision:
    """Shadow mode: the verdict as a loop event (`enforced: false`), and the call recorded as
    the runtime ran it. No command, no veto record, no recovery count: the run's history is
    what really happened, so later counts are those the runtime's own calls make."""
    published = True
    if verdict.detector == FLEET_DETECTOR and verdict.level != "critical":
        published = publish_early(state, verdict.warning_key)
    elif verdict.level != "critical":
        published = publish_warning(state, verdict.warning_key, verdict.count)
    trigger = Trigger(ev.run_id, ev.event_id, ev.seq)
    signature = signature_of_call(state.history, call.tool, call.args_hash)
    loop_event = _loop_event(state, trigger, call.tool, verdict, published, th, signature)
    record_call(state, call, th, ev.seq)
    return loop_event


# The recovery abort's loop_event shares its trigger with the block's: its id needs its own kind.
_RECOVERY_EVENT: Final = f"loop_event:{RECOVERY_EXHAUSTED}"
# The loop event's fields a warn/block verdict repeats, for runtimes that wait on the verdict.
_VERDICT_FIELDS: Final = ("detector", "level", "count", "message", "note")


def _verdict(
    ev: Event,
    call: ToolCall,
    decision: str,
    loop_event: dict[str, JSON] | None,
    th: Thresholds,
) -> Decision:
    """The answer to a tool_call's `want_verdict`; a warn or block repeats its loop event's
    detector, level, count, message and (openclaw-2026.9, a published warning) note."""
    vid = decision_id(ev.run_id, ev.event_id, "verdict")
    payload: dict[str, JSON] = {
        "type": "verdict",
        "run_id": ev.run_id,
        "tool_call_id": call.tool_call_id,
        "decision": decision,
    }
    if loop_event is not None:
        for name in _VERDICT_FIELDS:
            if name in loop_event:
                payload[name] = loop_event[name]
    payload["trigger_event_id"] = ev.event_id
    payload["seq"] = ev.seq
    payload["policy_version"] = th.policy_version
    payload["id"] = vid
    return Decision("verdict", vid, ev.run_id, payload)


def _on_result(state: RunState, ev: Event, th: Thresholds) -> list[Decision]:
    assert ev.call is not None and ev.outcome is not None  # parse_event guarantees both
    record = record_outcome(state, ev.call, ev.outcome, th, ev.seq, ev.event_id)
    if record is None or state.guard_remaining <= 0:
        return []  # no guard armed: observe_guard would return None at once
    gth = guard_thresholds(state, th)
    abort = observe_guard(state, record, gth)
    if abort is None:
        return []
    return _abort(state, Trigger(ev.run_id, ev.event_id, ev.seq), abort, gth, _of(record))


def _of(record: Record) -> str:
    """The signature of the call whose outcome this record holds (a guard abort's)."""
    return loop_signature(record.tool, record.args_hash, record)


# The state's fields by name, for resetting one in place (a compiled RunState has no __slots__).
_RUN_FIELDS: Final = tuple(f.name for f in fields(RunState))


def _end(state: RunState, seq: int) -> None:
    """run_end at its place: a tombstone whose watermarks make every older event a duplicate;
    life events held for after it (a new run under the same id) stay held."""
    held, life_seq = state.held, state.life_seq
    fresh = RunState()
    for name in _RUN_FIELDS:
        setattr(state, name, getattr(fresh, name))
    state.keep_tally(None)  # a slot of RunState's base: the old history's counts go with it
    state.held = held
    state.ended_seq = state.tool_seq = state.life_done = seq
    state.life_seq = seq if life_seq is None else max(life_seq, seq)


class Trigger:
    """The event a decision is attributed to (its id derives from it)."""

    # A plain class, not a named tuple: compiled, it is built and read without a Python frame.
    def __init__(self, run_id: str, event_id: str, seq: int) -> None:
        self.run_id = run_id
        self.event_id = event_id
        self.seq = seq


def _loop_event(
    state: RunState,
    ev: Trigger,
    tool: str,
    v: Verdict | GuardAbort,
    published: bool,
    th: Thresholds,
    signature: str,
    kind: str = "loop_event",
) -> Decision:
    """The loop_event for a verdict (warn / block) or an abort (guard or recovery); `kind`
    names it in its id, `signature` is the loop signature of the call it is about.

    The openclaw-2026.9 profile adds its name, the verdict's liveness signal and, on a
    published warning, the note OpenClaw's runner shows the model, before `id` (the
    configurable profile's payload stays as it always was: docs/semantics.md).
    """
    did = decision_id(ev.run_id, ev.event_id, kind)
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
        "signature": signature,
    }
    if isinstance(v, Verdict) and v.detector == FLEET_DETECTOR:
        payload["fleet_signal_id"] = v.warning_key.split(":")[1]  # fleet:<signal id>:<sig>
    if th.semantics == OPENCLAW_2026_9:
        payload["semantics"] = th.semantics
        payload["liveness_signal"] = v.liveness_signal if isinstance(v, Verdict) else None
        if published and action == "warn":
            payload["note"] = warning_note(v.count)
    payload["enforced"] = th.enforce
    payload["policy_version"] = th.policy_version
    payload["id"] = did
    return Decision("loop_event", did, ev.run_id, payload)


def _command(ev: Trigger, command: str, fields: dict[str, JSON], th: Thresholds) -> Decision:
    """A block_call / abort_run command; `fields` follow the common header in wire order, and
    the deciding policy's version ends it."""
    cid = decision_id(ev.run_id, ev.event_id, command)
    payload: dict[str, JSON] = {
        "type": "command",
        "command": command,
        "command_id": cid,
        "run_id": ev.run_id,
        "trigger_event_id": ev.event_id,
        "seq": ev.seq,
        **fields,
        "policy_version": th.policy_version,
    }
    return Decision("command", cid, ev.run_id, payload)


def _block(
    state: RunState, ev: Trigger, call: ToolCall, v: Verdict, th: Thresholds, signature: str
) -> list[Decision]:
    fields: dict[str, JSON] = {
        "tool_call_id": call.tool_call_id,
        "tool": call.tool,
        "detector": v.detector,
        "count": v.count,
        "reason": v.message,
    }
    event = _loop_event(state, ev, call.tool, v, True, th, signature)
    return [event, _command(ev, "block_call", fields, th)]


def _abort(
    state: RunState,
    ev: Trigger,
    a: GuardAbort,
    th: Thresholds,
    signature: str,
    kind: str = "loop_event",
) -> list[Decision]:
    fields: dict[str, JSON] = {
        "detector": a.detector,
        "count": a.count,
        "tool": a.tool,
        "reason": a.message,
    }
    event = _loop_event(state, ev, a.tool, a, True, th, signature, kind)
    return [event, _command(ev, "abort_run", fields, th)] if th.enforce else [event]
