"""`loopguard explain RUN_ID`: one run's timeline with the evidence behind every decision.

For each of the run's events: its call number, tool, args hash and outcome hash; before each
call, the counts every rule reads (docs/semantics.md §5: no_progress, recent_count, unknown_streak,
ping_pong) and, in the openclaw-2026.9 profile, the run's critical verdicts so far (the runner's
recovery allowance); the post-compaction guard's window; and the decisions with their detector,
count, warning key, message and note. The run is replayed exactly as `loopguard replay` does
(same decoder, same idle TTL), only the other runs' events are not fed, unless the policy
turns fleet signals on: then every run is fed, and the timeline keeps the `fleet_signal`
messages whose evidence the run's early verdicts name (docs/fleet.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import orjson

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import (
    JSON,
    OPENCLAW_2026_9,
    Decision,
    Event,
    InvalidEvent,
    RunState,
    Thresholds,
    effective_agent,
    parse_event,
)
from loopguard_fleet.detectors.compaction_guard import guard_thresholds
from loopguard_fleet.detectors.history import repeat_counts
from loopguard_fleet.detectors.rules import known_poll, ping_pong, unknown_tool
from loopguard_fleet.streams.audit.inputs import PartitionStart
from loopguard_fleet.streams.audit.replay import Rejected, Replayer
from loopguard_fleet.streams.processing.policy_switch import EVERY_POLICY_TOPIC, SWITCH_TYPE
from loopguard_fleet.streams.wire.codec import InputRejected, decode_object

__all__ = ["Row", "Timeline", "explain_run", "render_json", "render_table"]


@dataclass(slots=True)
class Row:
    """One event of the run, with what the rules saw and what they decided."""

    line: int
    seq: int
    type: str
    event_id: str
    call: int | None = None  # 1-based call number of the run (tool_call and its result)
    tool: str | None = None
    tool_call_id: str | None = None
    args_hash: str | None = None
    outcome_hash: str | None = None
    counts: dict[str, int] | None = None  # before a call: the counts each rule read
    known_poll: bool | None = None
    guard: dict[str, int] | None = None  # armed window / position of an observed outcome
    # openclaw-2026.9, before a call: the run's critical verdicts so far (its recovery
    # allowance is spent at 1; the next critical ends the run)
    critical_loops: int | None = None
    duplicate: bool = False
    decisions: list[dict[str, JSON]] = field(default_factory=list)


@dataclass(slots=True)
class Timeline:
    """A run's rows in input order, with the agent and thresholds that applied."""

    run_id: str
    agent_id: str | None = None
    thresholds: dict[str, object] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    # The firing fleet signals behind the run's early verdicts (fleet signals on only)
    fleet_signals: list[dict[str, JSON]] = field(default_factory=list)
    lines: int = 0  # input lines read
    rejected: int = 0  # of which not an event (the replay's rejections)


def _counts(state: RunState, ev: Event, th: Thresholds) -> tuple[dict[str, int], bool]:
    call = ev.call
    assert call is not None  # tool events carry a call
    streak, _, recent = repeat_counts(state.history, call.tool, call.args_hash)
    unknown, _ = unknown_tool.unknown_streak(state.history, call.tool)
    pp, _, _ = ping_pong.streak(state.history, call.args_hash)
    counts = {"no_progress": streak, "recent_count": recent, "unknown_streak": unknown}
    counts["ping_pong"] = pp
    return counts, th.known_poll or known_poll.is_known_poll(call)


def _outcome_hash(state: RunState, seq: int) -> str | None:
    for rec in reversed(state.history):
        if rec.seq == seq:
            return rec.result_hash
    return None


def explain_run(
    policy: Policy,
    items: Iterable[tuple[int, bytes]],
    run_id: str,
    idle_ttl_ms: int | None = None,
    follows: str | None = EVERY_POLICY_TOPIC,
) -> Timeline:
    """Replay the input and keep the timeline of one run (empty rows if it never appears);
    `follows`: the policy topic whose switch records apply."""
    replayer = Replayer(policy, idle_ttl_ms=idle_ttl_ms, follows=follows)
    timeline = Timeline(run_id)
    has_fleet = policy.fleet.enabled
    signals: list[dict[str, JSON]] = []
    calls: dict[str, int] = {}
    n_calls = 0
    in_force = policy
    for pos, raw in items:
        if isinstance(raw, PartitionStart):  # a topic's next partition: its own switches
            replayer.feed_line(pos, raw)
            continue
        timeline.lines += 1
        try:
            obj = decode_object(raw, replayer.max_line_bytes)
        except InputRejected:
            timeline.rejected += 1
            continue
        if obj.get("type") == SWITCH_TYPE:  # the policy of the events after it
            if isinstance(replayer.feed_line(pos, raw, obj), Rejected):
                timeline.rejected += 1
            continue
        replayer.observe_time(obj)  # other runs' times count, as in a replay
        replayer.observe_event_time(obj)
        replayer.place(pos, raw)  # the switch in force at its own offset decides it
        try:
            ev = parse_event(obj)
        except InvalidEvent:
            timeline.rejected += 1
            continue
        if ev.run_id != run_id:
            if has_fleet:  # the fleet counts every run
                _keep_signals(signals, replayer.feed_event(ev))
            continue
        state = replayer.state_for(ev)
        row = Row(pos, ev.seq, ev.type, ev.event_id)
        tool = ev.call.tool if ev.call is not None else None
        th = replayer.call_thresholds(effective_agent(state, ev), tool)
        if ev.call is not None:
            row.tool, row.tool_call_id, row.args_hash = (
                ev.call.tool,
                ev.call.tool_call_id,
                ev.call.args_hash,
            )
            if ev.type == "tool_call":
                n_calls += 1
                if ev.call.tool_call_id:
                    calls[ev.call.tool_call_id] = n_calls
                row.call = n_calls
                row.counts, row.known_poll = _counts(state, ev, th)
                if th.semantics == OPENCLAW_2026_9:
                    row.critical_loops = state.critical_loops
            else:
                row.call = calls.get(ev.call.tool_call_id or "", n_calls or None)
        remaining = state.guard_remaining
        guard_th = guard_thresholds(state, th)  # an armed guard's window is its arming policy's
        dups = replayer.stats.duplicates
        decisions = replayer.feed_event(ev)
        state = replayer.state_of(ev.run_id) or state
        row.duplicate = replayer.stats.duplicates > dups
        if ev.type == "tool_result":
            row.outcome_hash = _outcome_hash(state, ev.seq)
        _guard(row, th if ev.type == "compaction" else guard_th, remaining, state)
        _keep_signals(signals, decisions)
        row.decisions = [d.to_wire() for d in decisions if d.kind != "fleet_signal"]
        timeline.rows.append(row)
        in_force = replayer.in_force().policy  # the run's, after a policy switch
        if timeline.agent_id is None and state.agent_id is not None:
            timeline.agent_id = state.agent_id
    timeline.thresholds = in_force.effective(timeline.agent_id)
    named = {d.get("fleet_signal_id") for r in timeline.rows for d in r.decisions}
    timeline.fleet_signals = [s for s in signals if s["signal_id"] in named]
    return timeline


def _keep_signals(signals: list[dict[str, JSON]], decisions: list[Decision]) -> None:
    """Keep the firing `fleet_signal` messages among decisions."""
    for d in decisions:
        if d.kind == "fleet_signal" and d.payload["state"] == "firing":
            signals.append(d.to_wire())


def _guard(row: Row, th: Thresholds, remaining_before: int, state: RunState) -> None:
    window = th.post_compaction_window_size
    if row.type == "compaction" and th.post_compaction_guard:
        row.guard = {"window": window, "remaining": state.guard_remaining}
    elif row.type == "tool_result" and remaining_before > 0:
        aborted = any(d.get("action") == "abort" for d in row.decisions)
        if aborted or state.guard_remaining < remaining_before:
            row.guard = {"window": window, "position": window - remaining_before + 1}


def render_json(timeline: Timeline) -> str:
    """The timeline as one indented JSON document."""
    doc = {
        "run_id": timeline.run_id,
        "agent_id": timeline.agent_id,
        "thresholds": timeline.thresholds,
        "events": [asdict(r) for r in timeline.rows],
    }
    if timeline.fleet_signals:
        doc["fleet_signals"] = timeline.fleet_signals
    return json_text(doc)


def json_text(doc: object) -> str:
    """Indented JSON; a lone surrogate in a string (a run id, a tool) is written `\\uXXXX`."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    except orjson.JSONEncodeError:  # orjson refuses lone surrogates; the json module escapes
        return json.dumps(doc, indent=2) + "\n"


def _short(h: str | None) -> str:
    if not h:
        return "-"
    tool, _, digest = h.rpartition(":")
    return f"{tool}:{digest[:10]}" if tool else digest[:10]


def _counts_text(row: Row) -> str:
    c = row.counts
    if c is None:
        return ""
    poll = " poll" if row.known_poll else ""
    crit = "" if row.critical_loops is None else f" crit={row.critical_loops}"
    return (
        f"np={c['no_progress']} rc={c['recent_count']} "
        f"pp={c['ping_pong']} unk={c['unknown_streak']}{poll}{crit}"
    )


def _decision_text(d: dict[str, JSON]) -> str:
    if d.get("type") == "loop_event":
        pub = "" if d.get("published") else " (unpublished)"
        return f"{str(d['action']).upper()} {d['detector']} count {d['count']}{pub}"
    if d.get("type") == "command":
        return f"→ {d['command']}"
    return f"verdict {d.get('decision')}"


def render_table(timeline: Timeline) -> str:
    """The timeline as a table for a terminal, evidence lines under each decision."""
    th = timeline.thresholds
    out = [
        f"run {timeline.run_id}  agent {timeline.agent_id or '-'}  "
        f"enabled={th.get('enabled')} warning={th.get('warningThreshold')} "
        f"critical={th.get('criticalThreshold')} "
        f"global={th.get('globalCircuitBreakerThreshold')} "
        f"unknown={th.get('unknownToolThreshold')} history={th.get('historySize')}",
        f"{'call':>5} {'seq':>6}  {'event':<11} {'tool':<14} {'args hash':<22} "
        f"{'outcome hash':<22} {'counts before the call':<30} decision",
    ]
    for r in timeline.rows:
        call = "" if r.call is None else str(r.call)
        event = "duplicate" if r.duplicate else r.type
        counts = _counts_text(r)
        if r.guard is not None and "position" in r.guard:
            counts = f"guard {r.guard['position']}/{r.guard['window']}"
        elif r.guard is not None:
            counts = f"guard armed, window {r.guard['window']}"
        decided = [_decision_text(d) for d in r.decisions if d.get("type") == "loop_event"]
        line = (
            f"{call:>5} {r.seq:>6}  {event:<11} {(r.tool or ''):<14.14} "
            f"{_short(r.args_hash):<22} {_short(r.outcome_hash):<22} {counts:<30} "
        )
        out.append((line + " ".join(decided)).rstrip())
        for d in r.decisions:
            if d.get("type") == "loop_event" and d.get("level") == "critical":
                out.append(f"{'':>14}why: {d['message']}")
                if d.get("warning_key"):
                    out.append(f"{'':>14}key: {d['warning_key']}")
            elif d.get("type") == "loop_event" and d.get("note"):
                out.append(f"{'':>14}note: {d['note']}")
            elif d.get("type") == "command":
                out.append(f"{'':>14}{_decision_text(d)} ({d['detector']})")
            if d.get("type") == "loop_event" and d.get("fleet_signal_id"):
                out.append(f"{'':>14}fleet: {_signal_text(timeline, d['fleet_signal_id'])}")
    return "\n".join(out) + "\n"


def _signal_text(timeline: Timeline, signal_id: JSON) -> str:
    """The evidence of the fleet signal an early verdict names."""
    for s in timeline.fleet_signals:
        if s["signal_id"] == signal_id:
            samples = ", ".join(str(r) for r in s["sample_run_ids"])  # type: ignore[union-attr]
            return (
                f"signal {signal_id} fired at {s['at_ms']} ms: {s['tool']} in {s['runs']} runs "
                f"across {s['agents']} agents (e.g. {samples})"
            )
    return f"signal {signal_id}"
