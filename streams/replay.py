"""Offline replay: the same engine as the worker over a JSONL file or a topic's messages.

Deterministic: the same input and policy give byte-identical output. Runs are independent,
so interleaving runs in the input never changes any run's decisions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import orjson

from config import Policy
from detectors import (
    Decision,
    InvalidEvent,
    RunState,
    Thresholds,
    effective_agent,
    is_duplicate,
    parse_event,
    process_event,
)


@dataclass(slots=True)
class ReplayStats:
    """What a replay saw: events, decisions, rejected lines and redeliveries."""

    events: int = 0
    decisions: int = 0
    rejected: int = 0
    duplicates: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rejected:
    """One input line that could not be processed, with its 1-based line number."""

    line: int
    reason: str
    detail: str


class Replayer:
    """Holds every run's state while events are fed in order."""

    def __init__(self, policy: Policy, channel_tools: frozenset[str] | None = None) -> None:
        self.policy = policy
        self.channel_tools = channel_tools
        self.states: dict[str, RunState] = {}
        self.stats = ReplayStats()
        self._th: dict[str | None, Thresholds] = {}

    def thresholds(self, agent_id: str | None) -> Thresholds:
        """Resolved thresholds for an agent, with the service's channel tools applied."""
        th = self._th.get(agent_id)
        if th is None:
            th = self.policy.for_agent(agent_id)
            if self.channel_tools is not None:
                th = dataclasses.replace(th, channel_tools=self.channel_tools)
            self._th[agent_id] = th
        return th

    def feed(self, obj: object) -> list[Decision]:
        """Process one decoded event; raises InvalidEvent for a malformed one."""
        ev = parse_event(obj)
        state = self.states.get(ev.run_id)
        if state is None:
            state = self.states[ev.run_id] = RunState()
        self.stats.events += 1
        if is_duplicate(state, ev):
            self.stats.duplicates += 1
            return []
        out = process_event(state, ev, self.thresholds(effective_agent(state, ev)))
        self.stats.decisions += len(out)
        return out

    def reject(self, line: int, reason: str, detail: str) -> Rejected:
        """Count a malformed input line."""
        self.stats.rejected += 1
        self.stats.rejected_reasons[reason] = self.stats.rejected_reasons.get(reason, 0) + 1
        return Rejected(line, reason, detail)


def replay_lines(replayer: Replayer, lines: Iterable[bytes | str]) -> Iterator[Decision | Rejected]:
    """Decisions for each JSONL line in order, and a `Rejected` for each malformed line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            yield replayer.reject(n, "not_json", str(e))
            continue
        try:
            yield from replayer.feed(obj)
        except InvalidEvent as e:
            yield replayer.reject(n, e.reason, e.detail)


def encode_decision(d: Decision) -> bytes:
    """One decision as a compact JSON line (the control message's bytes)."""
    return orjson.dumps(d.to_wire())
