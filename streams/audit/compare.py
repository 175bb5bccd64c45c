"""What-if: replay the current policy and a candidate over the same history in one pass.

Each line is decoded and validated once; the same event then goes to both policies' states.
The report says, per detector, agent and tool, which decisions (loop events) the candidate
gains and loses; which runs it blocks earlier or later and by how many calls; how many tool
calls would not have run after each policy's first block (the saving); and which runs that
were healthy under the current policy it now hits (docs/audit.md, "compare").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import (
    CONFIGURABLE,
    NO_VERDICT_YET,
    Decision,
    Event,
    Thresholds,
    detect_pair,
    effective_agent,
    hash_outcome,
    is_duplicate,
)
from loopguard_fleet.detectors.process import GivenVerdict
from loopguard_fleet.streams.audit.replay import Rejected, Replayer
from loopguard_fleet.streams.audit.shadow import LoopEvent, ShadowDecisions
from loopguard_fleet.streams.processing.policy_switch import EVERY_POLICY_TOPIC

__all__ = [
    "CompareReport",
    "RunOutcome",
    "ShadowSide",
    "compare",
    "compare_shadow",
    "render_summary",
    "shadow_note",
]

SIDES = ("current", "candidate")
BOTH = 2  # `CompareReport.tally`'s side of an event counted once for both sides


def _sides(side: int) -> tuple[int, ...]:
    """The report sides (0 current, 1 candidate) a tally side stands for."""
    return (0, 1) if side == BOTH else (side,)


@dataclass(slots=True)
class RunOutcome:
    """One run under both policies: calls seen, first stop (call number, detector, action)."""

    agent_id: str | None = None
    calls: int = 0
    decisions: list[int] = field(default_factory=lambda: [0, 0])
    first: list[tuple[int, str, str] | None] = field(default_factory=lambda: [None, None])

    def saved(self, side: int) -> int:
        """Calls that would not have run had the run stopped at this side's first stop."""
        first = self.first[side]
        if first is None:
            return 0
        call, _, action = first
        ran = call - 1 if action == "block" else call  # a blocked call never ran
        return max(0, self.calls - ran)


@dataclass(slots=True)
class ShadowSide:
    """Where the candidate's decisions came from when read back from a shadow group's
    control topic: the topic, its policy versions (loop events each) among the decisions
    matched to the input, and the loop events whose trigger event was not in the input."""

    topic: str
    versions: dict[str, int] = field(default_factory=dict)
    decisions: int = 0
    unmatched: int = 0

    def to_json(self) -> dict[str, Any]:
        """The `candidate_topic` key of the JSON report."""
        return {
            "topic": self.topic,
            "policy_versions": dict(sorted(self.versions.items())),
            "decisions": self.decisions,
            "unmatched": self.unmatched,
        }


@dataclass(slots=True)
class CompareReport:
    """Everything `compare` found; `to_json` is the documented JSON form."""

    events: int = 0
    rejected: int = 0
    runs_seen: int = 0
    policy_names: tuple[str, str] = ("current", "candidate")
    thresholds: tuple[dict[str, object], dict[str, object]] = ({}, {})
    #: Loop events by (side, detector, action, tool, agent); side BOTH for an event of a
    #: shared run, counted once for the two sides (`_account`, once per event, stays cheap:
    #: `counts` expands this when the report is read).
    tally: Counter[tuple[int, str, str, str, str]] = field(default_factory=Counter)
    changes: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    runs: dict[str, RunOutcome] = field(default_factory=dict)
    #: Set when the candidate's decisions were read back from a shadow group's control topic
    #: (its thresholds are then unknown: `thresholds["candidate"]` is null).
    shadow: ShadowSide | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values (sorted keys and runs: deterministic)."""
        runs = sorted(self.runs.items())
        counts = self.counts()
        stopped = [(r, o) for r, o in runs if o.first[0] is not None or o.first[1] is not None]
        both = [(r, o) for r, o in stopped if o.first[0] is not None and o.first[1] is not None]
        deltas = [o.first[1][0] - o.first[0][0] for _, o in both]  # type: ignore[index]
        healthy_hit = [(r, o) for r, o in runs if o.decisions[0] == 0 and o.decisions[1] > 0]
        thresholds: dict[str, object] = dict(zip(SIDES, self.thresholds, strict=True))
        extra: dict[str, Any] = {}
        if self.shadow is not None:
            thresholds["candidate"] = None
            extra["candidate_topic"] = self.shadow.to_json()
        return {
            "policies": dict(zip(SIDES, self.policy_names, strict=True)),
            **extra,
            "thresholds": thresholds,
            "events": self.events,
            "rejected": self.rejected,
            "runs": self.runs_seen,
            "decisions": {s: _by(counts, i, "detector") for i, s in enumerate(SIDES)},
            "by_detector": self._diff(counts, "detector"),
            "by_agent": self._diff(counts, "agent"),
            "by_tool": self._diff(counts, "tool"),
            "runs_stopped": {
                "current": sum(o.first[0] is not None for _, o in stopped),
                "candidate": sum(o.first[1] is not None for _, o in stopped),
                "both": len(both),
                "earlier": sum(d < 0 for d in deltas),
                "later": sum(d > 0 for d in deltas),
                "same_call": sum(d == 0 for d in deltas),
                "only_candidate": sum(o.first[0] is None for _, o in stopped),
                "only_current": sum(o.first[1] is None for _, o in stopped),
                "calls_earlier_total": -sum(d for d in deltas if d < 0),
            },
            "saved_calls": {
                "current": sum(o.saved(0) for _, o in runs),
                "candidate": sum(o.saved(1) for _, o in runs),
                "difference": sum(o.saved(1) - o.saved(0) for _, o in runs),
            },
            "healthy_runs_newly_hit": {
                "warned": sum(o.first[1] is None for _, o in healthy_hit),
                "stopped": sum(o.first[1] is not None for _, o in healthy_hit),
                "run_ids": [r for r, _ in healthy_hit],
            },
            "stopped_runs": [_run_json(r, o) for r, o in stopped],
        }

    def counts(self) -> Counter[tuple[int, str, str, str]]:
        """Loop events by (side, dimension, key, action): dimension "detector", "agent" or
        "tool", side 0 (current) or 1 (candidate)."""
        out: Counter[tuple[int, str, str, str]] = Counter()
        for (side, detector, action, tool, agent), n in self.tally.items():
            for s in _sides(side):
                out[(s, "detector", detector, action)] += n
                out[(s, "agent", agent, action)] += n
                out[(s, "tool", tool, action)] += n
        return out

    def _diff(
        self, counts: Counter[tuple[int, str, str, str]], dim: str
    ) -> dict[str, dict[str, int]]:
        keys = sorted({k for (_, d, k, _) in counts if d == dim})
        out: dict[str, dict[str, int]] = {}
        for key in keys:
            a = sum(n for (s, d, k, _), n in counts.items() if s == 0 and d == dim and k == key)
            b = sum(n for (s, d, k, _), n in counts.items() if s == 1 and d == dim and k == key)
            out[key] = {
                "current": a,
                "candidate": b,
                "gained": self.changes[(dim, key, "gained")],
                "lost": self.changes[(dim, key, "lost")],
            }
        return out


def _by(
    counts: Counter[tuple[int, str, str, str]], side: int, dim: str
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (s, d, key, action), n in sorted(counts.items()):
        if s == side and d == dim:
            out.setdefault(key, {})[action] = n
    return out


def _run_json(run_id: str, o: RunOutcome) -> dict[str, Any]:
    def side(i: int) -> dict[str, Any] | None:
        first = o.first[i]
        if first is None:
            return None
        return {"first_stop_call": first[0], "detector": first[1], "action": first[2]}

    a, b = o.first
    delta = None if a is None or b is None else b[0] - a[0]
    return {
        "run_id": run_id,
        "agent_id": o.agent_id,
        "calls": o.calls,
        "current": side(0),
        "candidate": side(1),
        "delta_calls": delta,
        "saved_calls": {"current": o.saved(0), "candidate": o.saved(1)},
    }


def _loop_events(decisions: list[Decision]) -> list[LoopEvent]:
    """(detector, action, tool) of each loop event."""
    out = []
    for d in decisions:
        if d.kind == "loop_event":
            p = d.payload
            out.append((str(p["detector"]), str(p["action"]), str(p["tool"])))
    return out


def compare(
    current: Policy,
    candidate: Policy,
    items: Iterable[tuple[int, bytes]],
    idle_ttl_ms: int | None = None,
    *,
    share_runs: bool = True,
    follows: str | None = EVERY_POLICY_TOPIC,
) -> CompareReport:
    """Replay both policies over `items` in one pass and collect the differences.

    `share_runs` (the default) holds a run once while both policies would leave it in the
    same state (see `_Shared`); off, every event goes to both sides. The report is the same.
    `follows`: the policy topic whose switch records the current side applies.
    """
    # The current side follows the input's policy switch records, as the workers did; the
    # candidate is what would have decided instead, all along.
    sides = (
        Replayer(current, idle_ttl_ms=idle_ttl_ms, follows=follows),
        Replayer(candidate, idle_ttl_ms=idle_ttl_ms, follows=None),
    )
    report = CompareReport(thresholds=(current.effective(None), candidate.effective(None)))
    first, second = sides
    # Policy-independent work is done once: each line is decoded and validated (args hashed)
    # once, and under the configurable profile the result of an event that goes to both
    # sides is hashed once for both (an event of a shared run goes to one side as it is).
    tools = current.channel_tools
    shared_hash = current.semantics == candidate.semantics == CONFIGURABLE and (
        candidate.channel_tools == tools
    )
    # A fleet stage counts every run of its side: with fleet signals on, no run is shared.
    has_fleet = current.fleet.enabled or candidate.fleet.enabled
    shared = _Shared(first, second) if share_runs and not has_fleet else None
    for pos, raw in items:
        ev = first.decode(pos, raw)
        if ev is None:  # a policy switch (or a topic's next partition): the current side's
            if shared is not None:
                shared.policy_changed()
            continue
        if isinstance(ev, Rejected):
            continue
        if shared is not None and shared.holds(ev):
            out = first.feed_event(ev, shared.verdict)  # the call decided once, not twice
            _account(report, ev, first, out, out)
            continue
        second.stream_ms = first.stream_ms  # same line, same stream time (the candidate
        # side reads it only when fed, as below; a shared run's line never reaches it)
        if has_fleet:  # the line's event time, read by each side's own decode
            second.decode(pos, raw)
        if shared_hash:
            ev = hash_outcome(ev, tools)
        outs = (first.feed_event(ev), second.feed_event(ev))
        if shared is not None:
            shared.rejoin(ev)
        _account(report, ev, first, *outs)
    report.events = first.stats.events
    report.rejected = first.stats.rejected
    return report


def compare_shadow(
    current: Policy,
    shadow: ShadowDecisions,
    topic: str,
    items: Iterable[tuple[int, bytes]],
    idle_ttl_ms: int | None = None,
    *,
    follows: str | None = EVERY_POLICY_TOPIC,
) -> CompareReport:
    """Replay the current policy over `items`; take the candidate's decisions from a shadow
    group's control topic (`shadow`), each counted at the input event that triggered it.

    The report is the one `compare` gives with the shadow group's policy as the candidate:
    call numbers, runs and agents come from the input, as for the current side, and a
    run's first stop is its first loop event whose action is block or abort (in observe
    mode, the decision that enforce would have sent as a command). `shadow` is consumed.
    """
    first = Replayer(current, idle_ttl_ms=idle_ttl_ms, follows=follows)
    report = CompareReport(thresholds=(current.effective(None), {}), shadow=ShadowSide(topic))
    versions: Counter[str] = Counter()
    for pos, raw in items:
        ev = first.decode(pos, raw)
        if ev is None or isinstance(ev, Rejected):
            continue
        out = _loop_events(first.feed_event(ev))
        found, version = shadow.take(ev.run_id, ev.event_id)
        if version is not None:
            versions[version] += len(found)
        run = _run(report, ev)
        if not out and not found:
            _forget_if_quiet(report, ev, run)
            continue
        _tally(report, ev, first, run, out, found)
    report.events = first.stats.events
    report.rejected = first.stats.rejected
    report.shadow = ShadowSide(topic, dict(versions), versions.total(), shadow.left())
    return report


# The Thresholds fields that only `detect` reads (detectors/engine.py and detectors/rules/):
# two policies that differ in nothing else change a run's state alike whenever their verdicts
# on a call are equal.
_DETECT_ONLY = (
    "enabled",
    "warning_threshold",
    "critical_threshold",
    "unknown_tool_threshold",
    "global_circuit_breaker_threshold",
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
)
_SAME, _DETECT_DIFFERS, _OTHER_DIFFERS = 0, 1, 2


class _Shared:
    """Runs held once, by the current side's replayer, while both policies agree on them.

    A run is shared until an event on which the two policies could change it differently:
    a call on which their verdicts differ (or one of an agent whose thresholds differ beyond
    `_DETECT_ONLY`, or with life events held). The candidate side then takes a copy of the
    run's state before that event (`Replayer.adopt`) and both sides replay the run from there
    on, as they would have from the start. Until then each event costs one engine step
    instead of two: each call is decided under both policies with one walk of the history
    (`detect_pair`), and the current side's verdict goes to its engine step (`verdict`,
    `apply_event`'s), which then does not decide the call again. Most runs of a fleet never
    diverge.

    A forked run is shared again as soon as both sides' states (and last event times) are
    equal after an event: the engine is a function of the state and the event, so from
    equal states the two sides would step alike until their verdicts differ again. A run
    looping past the candidate's lower threshold is like that: the candidate blocks the
    call, the current policy warns, and after the call's result the two states are equal
    again (on workload P with criticalThreshold 12, 89 % of the forked runs' events).
    """

    def __init__(self, first: Replayer, second: Replayer) -> None:
        self.first = first
        self.second = second
        self.forked: set[str] = set()
        self._kinds: dict[str | None, int] = {}
        self._pairs: dict[str | None, tuple[Thresholds, Thresholds]] = {}  # by agent
        #: The current side's verdict on the call `holds` last kept shared, for its engine
        #: step; NO_VERDICT_YET when `holds` decided no call.
        self.verdict: GivenVerdict = NO_VERDICT_YET

    def holds(self, ev: Event) -> bool:
        """True when `ev` applies to a shared run and keeps it shared (feed the first side
        only, with `verdict`; the candidate's decisions are the same); False after forking
        the run."""
        self.verdict = NO_VERDICT_YET
        if ev.run_id in self.forked:
            return False
        run = self.first.live_run(ev.run_id)
        state = run.state
        if is_duplicate(state, ev):
            return True
        agent = effective_agent(state, ev)
        kind = self._kinds.get(agent)
        if kind is None:
            kind = self._kinds[agent] = self._kind(agent)
        if kind == _SAME:
            return True
        if kind == _DETECT_DIFFERS and not state.held:
            call = ev.call
            if ev.type != "tool_call" or call is None:
                return True
            pair = self._pairs.get(agent)
            if pair is None:
                pair = self._pairs[agent] = (
                    self.first.thresholds(agent),
                    self.second.thresholds(agent),
                )
            verdict, candidate = detect_pair(state, call, *pair)
            if verdict == candidate:
                self.verdict = verdict
                return True
        self.forked.add(ev.run_id)
        self.second.adopt(ev.run_id, run)
        return False

    def policy_changed(self) -> None:
        """The current side's policy changed (a switch record): how the two sides' thresholds
        differ is found again, per agent, at each shared run's next event."""
        self._kinds.clear()
        self._pairs.clear()

    def rejoin(self, ev: Event) -> None:
        """Share a forked run again if both sides now hold equal states (called after each
        event of a forked run: the comparison mostly meets the same record objects, as the
        candidate's copy shares them, so it costs little)."""
        run_id = ev.run_id
        if run_id not in self.forked:
            return
        a, b = self.first.live_run(run_id), self.second.live_run(run_id)
        if a.stamp_ms != b.stamp_ms or a.state != b.state or a.state.held:
            return
        if self._kinds.get(effective_agent(a.state, ev)) != _DETECT_DIFFERS:
            return  # policies that differ beyond detection fork again at the next event
        self.forked.discard(run_id)
        self.second.drop(run_id)

    def _kind(self, agent: str | None) -> int:
        a, b = self.first.thresholds(agent), self.second.thresholds(agent)
        if self.first.tool_table() or self.second.tool_table():
            # Per-tool tuning decides per call, not per agent: such runs are decided apart.
            same = a == b and self.first.tool_table() == self.second.tool_table()
            return _SAME if same else _OTHER_DIFFERS
        if a == b:
            return _SAME
        if a.semantics == b.semantics == CONFIGURABLE and b == replace(
            a, **{name: getattr(b, name) for name in _DETECT_ONLY}
        ):
            return _DETECT_DIFFERS
        return _OTHER_DIFFERS


def _account(
    report: CompareReport, ev: Event, first: Replayer, out_a: list[Decision], out_b: list[Decision]
) -> None:
    """Count one event's decisions under each side (`out_a is out_b`: a shared run's event,
    one list for both; most events have none, so that path is kept short)."""
    run = _run(report, ev)
    if not out_a and not out_b:
        _forget_if_quiet(report, ev, run)
        return
    if out_a is out_b:
        found = _loop_events(out_a)
        if found:
            _count(report, run, BOTH, found, _agent(first, ev, run))
        return
    _tally(report, ev, first, run, _loop_events(out_a), _loop_events(out_b))


def _run(report: CompareReport, ev: Event) -> RunOutcome:
    """The outcome of the event's run, its calls counted up to this event."""
    run = report.runs.get(ev.run_id)
    if run is None:
        run = report.runs[ev.run_id] = RunOutcome()
        report.runs_seen += 1
    if ev.type == "tool_call":
        run.calls += 1
    return run


def _forget_if_quiet(report: CompareReport, ev: Event, run: RunOutcome) -> None:
    """After an event without decisions: a run that ended with none has only its count."""
    if ev.type == "run_end" and run.decisions == [0, 0]:
        del report.runs[ev.run_id]


def _tally(
    report: CompareReport,
    ev: Event,
    first: Replayer,
    run: RunOutcome,
    found_a: list[LoopEvent],
    found_b: list[LoopEvent],
) -> None:
    """Count one event's loop events under each side, and what the candidate gains or loses."""
    if not found_a and not found_b:
        return
    agent = _agent(first, ev, run)
    for side, found in enumerate((found_a, found_b)):
        _count(report, run, side, found, agent)
    if found_a == found_b:
        return  # nothing gained or lost
    a, b = Counter(found_a), Counter(found_b)
    for label, diff in (("gained", b - a), ("lost", a - b)):
        for (detector, _, tool), n in diff.items():
            for dim, key in (("detector", detector), ("agent", agent), ("tool", tool)):
                report.changes[(dim, key, label)] += n


def _agent(first: Replayer, ev: Event, run: RunOutcome) -> str:
    """The agent an event's loop events count under (the run's, "-" when none), kept on
    the run's outcome for the report."""
    state = first.state_of(ev.run_id)
    agent = (state.agent_id if state is not None else None) or ev.agent_id or "-"
    run.agent_id = agent
    return agent


def _count(
    report: CompareReport,
    run: RunOutcome,
    side: int,
    found: list[LoopEvent],
    agent: str,
) -> None:
    """Tally one side's loop events (side BOTH: a shared run's, for the two sides) and note
    each side's first stop."""
    tally = report.tally
    sides = _sides(side)
    for s in sides:
        run.decisions[s] += len(found)
    for detector, action, tool in found:
        tally[(side, detector, action, tool, agent)] += 1
        if action == "block" or action == "abort":
            for s in sides:
                if run.first[s] is None:
                    run.first[s] = (run.calls, detector, action)


MAX_LISTED_RUNS = 50  # runs listed in the text and HTML; the JSON report has every one


def moved_runs(stopped_runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs whose first stop the candidate changes: moved, newly stopped, no longer stopped;
    earliest moves first, then the newly stopped, then the released."""

    def order(r: dict[str, Any]) -> tuple[int, int, str]:
        if r["delta_calls"] is not None:
            return (0, r["delta_calls"], r["run_id"])
        return (1 if r["current"] is None else 2, 0, r["run_id"])

    changed = [r for r in stopped_runs if r["delta_calls"] != 0]
    return sorted(changed, key=order)


def threshold_changes(thresholds: dict[str, Any]) -> list[tuple[str, object, object]]:
    """(setting, current, candidate) for every effective threshold the two policies differ on."""
    out: list[tuple[str, object, object]] = []

    def walk(path: str, a: object, b: object) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(f"{path}.{key}" if path else str(key), a.get(key), b.get(key))
        elif a != b:
            out.append((path, a, b))

    walk("", thresholds.get("current", {}), thresholds.get("candidate", {}))
    return out


def shadow_note(j: dict[str, Any]) -> str | None:
    """The line that says where a candidate read back from a shadow topic comes from (its
    thresholds are unknown: only its policy version is), None for a candidate policy file."""
    src = j.get("candidate_topic")
    if src is None:
        return None
    versions = ", ".join(src["policy_versions"]) or "none"
    return (
        f"candidate decisions read from topic {src['topic']}: {src['decisions']} shadow loop "
        f"events, policy {versions}; {src['unmatched']} about events not in the input"
    )


def _first(side: dict[str, Any] | None) -> str:
    return "never" if side is None else f"{side['first_stop_call']} ({side['detector']})"


def render_summary(report: CompareReport) -> str:
    """A short summary for a terminal."""
    j = report.to_json()
    cur, cand = report.policy_names
    stop, saved, hit = j["runs_stopped"], j["saved_calls"], j["healthy_runs_newly_hit"]
    lines = [
        f"current:   {cur}",
        f"candidate: {cand}",
        f"{j['events']} events, {j['runs']} runs, {j['rejected']} rejected lines",
        "",
        f"{'detector':<28} {'current':>8} {'candidate':>10} {'gained':>7} {'lost':>6}",
    ]
    for det, row in j["by_detector"].items():
        lines.append(
            f"{det:<28} {row['current']:>8} {row['candidate']:>10} "
            f"{row['gained']:>7} {row['lost']:>6}"
        )
    lines += [
        "",
        f"runs stopped (block or abort): {stop['current']} → {stop['candidate']}; "
        f"earlier {stop['earlier']} (by {stop['calls_earlier_total']} calls in all), "
        f"later {stop['later']}, newly {stop['only_candidate']}, "
        f"no longer {stop['only_current']}",
        f"calls not run after the first stop: {saved['current']} → {saved['candidate']} "
        f"({saved['difference']:+d})",
        f"healthy runs newly hit: {hit['warned'] + hit['stopped']} "
        f"({hit['stopped']} stopped, {hit['warned']} only warned)",
    ]
    shadow = shadow_note(j)
    if shadow is not None:
        lines += ["", shadow]
    else:
        changes = threshold_changes(j["thresholds"])
        lines += ["", f"thresholds changed: {len(changes)}"]
        lines += [f"  {path}: {a!r} → {b!r}" for path, a, b in changes]
    moved = moved_runs(j["stopped_runs"])
    shown = moved[:MAX_LISTED_RUNS]
    more = (
        f" ({len(shown)} of {len(moved)}; all in --format json)" if len(moved) > len(shown) else ""
    )
    lines += ["", f"runs whose first stop moves: {len(moved)}{more}"]
    if shown:
        lines.append(f"  {'run':<40} {'current':>24} {'candidate':>24} {'calls':>6}")
    for r in shown:
        delta = "" if r["delta_calls"] is None else f"{r['delta_calls']:+d}"
        lines.append(
            f"  {r['run_id']:<40} {_first(r['current']):>24} {_first(r['candidate']):>24} "
            f"{delta:>6}"
        )
    return "\n".join(lines) + "\n"
