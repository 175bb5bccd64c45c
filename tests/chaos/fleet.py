"""The chaos suite's workload and oracle: a seeded fleet cut into waves, replayed offline.

`chaos_fleet(runs, seed)` takes `streams.simulate.fleet_events` (healthy and looping runs) and,
seeded per run, adds compactions to some healthy runs, asks for verdicts on some calls and
ends only some runs (the others keep live state). Each run's events are then cut at every
change of input topic, and segment k of a run goes into wave k:

    run r:  tool tool tool | compaction | tool tool | run_end
    wave:   0              | 1          | 2         | 3

Kafka orders a run's events within one topic only; across the two topics the worker sees them
in whatever order it fetches them. The harness lets the worker drain a wave (committed offsets
at the end) before producing the next, so the worker sees every run's events in exactly the
order they were produced, whatever faults happen inside a wave, and the oracle — the offline
`Replayer` over exactly the produced events, each run in produced order — is deterministic.
The oracle is the worker's own processing core (`RunDriver`, offline) fed the bytes the
harness produces, so it decodes, loads, applies and publishes as the worker does.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import Decision, RunState
from loopguard_fleet.streams.audit.replay import Rejected, Replayer
from loopguard_fleet.streams.demo.simulate import fleet_events, interleave

WireEvent = dict[str, Any]
TOOL_EVENTS = frozenset({"tool_call", "tool_result"})


def is_tool_event(event: WireEvent) -> bool:
    """True for events of the tool-calls topic; compaction and run_end go to compactions."""
    return event.get("type") in TOOL_EVENTS


def in_seq_order(events: Iterable[WireEvent]) -> list[WireEvent]:
    """Each run's events in seq order (runs one after another): the oracle's order."""
    return sorted(events, key=lambda e: (e["run_id"], e["seq"]))


def _renumber(run_id: str, events: list[WireEvent]) -> list[WireEvent]:
    """seq 1..n and event_id `<run_id>:<seq>` after inserting or dropping events."""
    out = []
    for i, ev in enumerate(events, 1):
        out.append({**ev, "seq": i, "event_id": f"{run_id}:{i}"})
    return out


def _shape_run(events: list[WireEvent], rng: random.Random) -> list[WireEvent]:
    """Seeded variations of one simulated run (see the module docstring)."""
    run_id = events[0]["run_id"]
    body = [e for e in events if e["type"] != "run_end"]
    has_compaction = any(e["type"] == "compaction" for e in body)
    if not has_compaction and rng.random() < 0.35 and len(body) >= 4:
        at = 2 * rng.randrange(1, len(body) // 2)  # between a result and the next call
        base = {k: body[0][k] for k in ("agent_id", "session_key") if k in body[0]}
        body = body[:at] + [{"type": "compaction", "run_id": run_id, **base}] + body[at:]
    shaped = []
    for ev in body:
        if ev["type"] == "tool_call" and rng.random() < 0.1:
            ev = {**ev, "want_verdict": True}
        shaped.append(ev)
    if rng.random() < 0.5:
        shaped.append({"type": "run_end", "run_id": run_id})
    return _renumber(run_id, shaped)


def _segments(events: list[WireEvent]) -> list[list[WireEvent]]:
    """Maximal runs of consecutive events bound for the same input topic."""
    out: list[list[WireEvent]] = []
    for ev in events:
        if out and is_tool_event(out[-1][-1]) == is_tool_event(ev):
            out[-1].append(ev)
        else:
            out.append([ev])
    return out


@dataclass
class Fleet:
    """A fleet's events in waves; each wave interleaves runs as the simulation did."""

    waves: list[list[WireEvent]]
    runs: list[str]

    @property
    def events(self) -> int:
        """Number of events over all waves."""
        return sum(len(w) for w in self.waves)


def chaos_fleet(runs: int, seed: int, *, prefix: str = "c") -> Fleet:
    """A seeded fleet of `runs` runs (healthy and looping) cut into topic-consistent waves."""
    flat = fleet_events(runs, seed, prefix=prefix, end_runs=True)
    order: dict[str, list[WireEvent]] = {}
    for ev in flat:
        order.setdefault(ev["run_id"], []).append(ev)
    shaped: dict[str, list[list[WireEvent]]] = {}
    for run_id, evs in order.items():
        rng = random.Random(f"{seed}:shape:{run_id}")
        shaped[run_id] = _segments(_shape_run(evs, rng))
    # Keep the simulation's interleaving: a wave lists runs' events in a seeded shuffle that
    # preserves each run's own order (same merge as fleet_events).
    depth = max(len(s) for s in shaped.values())
    waves = []
    for k in range(depth):
        queues = [list(reversed(s[k])) for s in shaped.values() if len(s) > k]
        waves.append(interleave(queues, random.Random(f"{seed}:wave:{k}")))
    return Fleet(waves, list(order))


def delay_compactions(fleet: Fleet) -> Fleet:
    """Move each run's compaction after the tool events that follow it (late compaction).

    The run's tool segments around the compaction merge into one wave, and the compaction
    gets a wave of its own after it: the worker sees later tool results first.
    """
    per_run: dict[str, list[list[WireEvent]]] = {}
    for wave in fleet.waves:
        seen: dict[str, list[WireEvent]] = {}
        for ev in wave:
            seen.setdefault(ev["run_id"], []).append(ev)
        for run_id, seg in seen.items():
            per_run.setdefault(run_id, []).append(seg)
    moved: dict[str, list[list[WireEvent]]] = {}
    for run_id, segs in per_run.items():
        out: list[list[WireEvent]] = []
        i = 0
        while i < len(segs):
            seg = segs[i]
            is_compaction = seg[0]["type"] == "compaction"
            if is_compaction and i + 1 < len(segs) and is_tool_event(segs[i + 1][0]):
                assert out and is_tool_event(out[-1][0])
                out[-1] = out[-1] + segs[i + 1]  # later tool results join the earlier ones
                out.append(seg)  # then the compaction
                i += 2
                continue
            if out and is_tool_event(out[-1][0]) == is_tool_event(seg[0]):
                out[-1] = out[-1] + seg
            else:
                out.append(seg)
            i += 1
        moved[run_id] = out
    depth = max(len(s) for s in moved.values())
    waves = []
    for k in range(depth):
        queues = [list(reversed(s[k])) for s in moved.values() if len(s) > k]
        waves.append(interleave(queues, random.Random(f"late:{k}")))
    return Fleet(waves, fleet.runs)


def redeliver(fleet: Fleet, copies: int, seed: int) -> Fleet:
    """Every event `copies` more times, each copy at a seeded later place in its wave.

    A copy always follows its original in the same partition (same key, same topic), as a
    redelivery would; copies of different events interleave freely.
    """
    rng = random.Random(f"{seed}:redeliver")
    waves = []
    for wave in fleet.waves:
        slots: list[tuple[float, int, WireEvent]] = []
        for i, ev in enumerate(wave):
            slots.append((float(i), 0, ev))
            for c in range(copies):
                slots.append((rng.uniform(i, len(wave)), c + 1, ev))
        slots.sort(key=lambda s: (s[0], s[1]))
        waves.append([ev for _, _, ev in slots])
    return Fleet(waves, fleet.runs)


@dataclass
class Oracle:
    """The offline replay of exactly the produced events, each run in produced order."""

    policy: Policy
    channel_tools: frozenset[str]
    replayer: Replayer = field(init=False)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0  # two decisions with the same id (must stay 0)

    def __post_init__(self) -> None:
        self.replayer = Replayer(self.policy, self.channel_tools)

    def feed(self, events: Iterable[WireEvent]) -> list[Decision]:
        """Replay events (in order) and remember their decisions by id."""
        return self.feed_raw(orjson.dumps(ev) for ev in events)  # the bytes the harness sends

    def feed_raw(self, values: Iterable[bytes]) -> list[Decision]:
        """Replay message values exactly as produced (any nesting depth), in order."""
        out: list[Decision] = []
        for value in values:
            got = self.replayer.feed_line(0, value)
            assert not isinstance(got, Rejected), f"the oracle refused {value[:200]!r}: {got}"
            for d in got:
                wire = d.to_wire()
                if d.id in self.decisions:
                    self.duplicates += 1
                self.decisions[d.id] = wire
                out.append(d)
        return out

    def states(self, runs: Sequence[str] | None = None) -> dict[str, RunState]:
        """The replay's state of each run (all runs by default)."""
        states = self.replayer.states
        return {r: states[r] for r in (runs if runs is not None else states)}
