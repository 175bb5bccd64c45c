"""Offline replay: the same engine as the worker over JSONL lines or a topic's messages.

Deterministic: the same input and policy give byte-identical output. Runs are independent,
so interleaving runs in the input never changes any run's decisions. Memory follows the live
runs: with an idle TTL, a run (or an ended run's tombstone) quiet for longer than the TTL in
stream time (the largest event `ts` seen) is dropped, as the worker drops it (docs/audit.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from loopguard.config import Policy
from loopguard.detectors import (
    Decision,
    Event,
    InvalidEvent,
    RunState,
    Thresholds,
    apply_event,
    effective_agent,
    parse_event,
)
from loopguard.streams.wire.codec import Rejected as CodecRejected
from loopguard.streams.wire.codec import decode_object, encode

__all__ = [
    "MAX_LINE_BYTES",
    "Rejected",
    "ReplayStats",
    "Replayer",
    "encode_decision",
    "event_time_ms",
    "replay_items",
    "replay_lines",
]

MAX_LINE_BYTES = 1_048_576  # the worker's default LOOPGUARD_MAX_MESSAGE_BYTES
SWEEP_EVERY = 65_536  # events between two sweeps of idle runs


@dataclass(slots=True)
class ReplayStats:
    """What a replay saw: events, decisions, rejected lines and redeliveries."""

    events: int = 0
    decisions: int = 0
    rejected: int = 0
    duplicates: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: ReplayStats) -> None:
        """Add another shard's counts to these."""
        self.events += other.events
        self.decisions += other.decisions
        self.rejected += other.rejected
        self.duplicates += other.duplicates
        for reason, n in other.rejected_reasons.items():
            self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + n

    def summary(self) -> str:
        """The one-line summary printed after a replay."""
        return (
            f"{self.events} events, {self.decisions} decisions, {self.duplicates} duplicates, "
            f"{self.rejected} rejected"
        )


@dataclass(frozen=True, slots=True)
class Rejected:
    """One input line that could not be processed, with its 1-based line number."""

    line: int
    reason: str
    detail: str


def event_time_ms(ts: object) -> int | None:
    """An event's optional `ts` (epoch milliseconds or RFC 3339) in epoch milliseconds."""
    if isinstance(ts, bool) or ts is None:
        return None
    if isinstance(ts, int | float):
        return int(ts)
    if isinstance(ts, str):
        try:
            return int(datetime.fromisoformat(ts).timestamp() * 1000)
        except ValueError:
            return None
    return None


class Replayer:
    """Holds every live run's state while events are fed in order."""

    def __init__(
        self,
        policy: Policy,
        channel_tools: frozenset[str] | None = None,
        idle_ttl_ms: int | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.policy = policy
        self.channel_tools = channel_tools
        self.idle_ttl_ms = idle_ttl_ms or None
        self.max_line_bytes = max_line_bytes
        self.states: dict[str, RunState] = {}
        self.stats = ReplayStats()
        self.stream_ms: int | None = None
        self._th: dict[str | None, Thresholds] = {}
        self._until_sweep = SWEEP_EVERY

    def thresholds(self, agent_id: str | None) -> Thresholds:
        """Resolved thresholds for an agent, with the service's channel tools applied."""
        th = self._th.get(agent_id)
        if th is None:
            th = self.policy.for_agent(agent_id)
            if self.channel_tools is not None:
                th = dataclasses.replace(th, channel_tools=self.channel_tools)
            self._th[agent_id] = th
        return th

    def state_for(self, ev: Event) -> RunState:
        """The run's state, fresh when the run is new or was idle past the TTL."""
        state = self.states.get(ev.run_id)
        ttl = self.idle_ttl_ms
        if ttl is not None:
            now = self.stream_ms
            if state is not None and _is_idle(state, now, ttl):
                state = None
            if state is None:
                state = self.states[ev.run_id] = RunState()
            state.stamp_ms = now
            self._until_sweep -= 1
            if self._until_sweep <= 0:
                self.sweep()
            return state
        if state is None:
            state = self.states[ev.run_id] = RunState()
        return state

    def observe_time(self, obj: object) -> int | None:
        """Advance stream time with a decoded line's `ts` (every decodable line counts)."""
        if self.idle_ttl_ms is None or type(obj) is not dict:
            return None
        raw_ts = obj.get("ts")
        if raw_ts is None:  # the common case in fleets that do not stamp events: no parsing
            return self.stream_ms
        ts = event_time_ms(raw_ts)
        if ts is not None and (self.stream_ms is None or ts > self.stream_ms):
            self.stream_ms = ts
        return self.stream_ms

    def sweep(self) -> None:
        """Drop the runs idle past the TTL in stream time (their next event starts fresh)."""
        self._until_sweep = SWEEP_EVERY
        ttl, now = self.idle_ttl_ms, self.stream_ms
        if ttl is None or now is None:
            return
        for run_id in [r for r, s in self.states.items() if _is_idle(s, now, ttl)]:
            del self.states[run_id]

    def feed_event(self, ev: Event) -> list[Decision]:
        """Process one parsed event (its line's time already observed)."""
        stats = self.stats
        stats.events += 1
        state = self.states.get(ev.run_id)
        if state is None or self.idle_ttl_ms is not None:
            state = self.state_for(ev)
        agent = effective_agent(state, ev)
        th = self._th.get(agent)
        applied = apply_event(state, ev, th if th is not None else self.thresholds(agent))
        if applied.is_duplicate:
            stats.duplicates += 1
        out = applied.decisions
        stats.decisions += len(out)
        return out

    def feed(self, obj: object) -> list[Decision]:
        """Process one decoded event; raises InvalidEvent for a malformed one."""
        self.observe_time(obj)
        return self.feed_event(parse_event(obj))

    def decode(self, line: int, raw: bytes | str) -> Event | Rejected:
        """Decode and validate one line as the worker does (streams/codec.decode_object)."""
        try:
            obj = decode_object(raw.encode() if isinstance(raw, str) else raw, self.max_line_bytes)
            self.observe_time(obj)
            return parse_event(obj)
        except CodecRejected as e:
            return self.reject(line, e.reason, e.detail)
        except InvalidEvent as e:
            return self.reject(line, e.reason, e.detail)

    def reject(self, line: int, reason: str, detail: str) -> Rejected:
        """Count a malformed input line."""
        self.stats.rejected += 1
        self.stats.rejected_reasons[reason] = self.stats.rejected_reasons.get(reason, 0) + 1
        return Rejected(line, reason, detail)


def _is_idle(state: RunState, now: int | None, ttl: int) -> bool:
    stamp = state.stamp_ms
    return stamp is not None and now is not None and now - stamp > ttl


def replay_items(
    replayer: Replayer, items: Iterable[tuple[int, bytes]]
) -> Iterator[tuple[int, Decision | Rejected]]:
    """(position, decision) for each decision in input order, and (position, Rejected)."""
    decode, feed = replayer.decode, replayer.feed_event
    for pos, raw in items:
        got = decode(pos, raw)
        if isinstance(got, Rejected):
            yield pos, got
            continue
        for d in feed(got):
            yield pos, d


def replay_lines(replayer: Replayer, lines: Iterable[bytes | str]) -> Iterator[Decision | Rejected]:
    """Decisions for each JSONL line in order, and a `Rejected` for each malformed line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        got = replayer.decode(n, line)
        if isinstance(got, Rejected):
            yield got
            continue
        yield from replayer.feed_event(got)


def encode_decision(d: Decision) -> bytes:
    """One decision as a compact JSON line (the control message's bytes, as the worker's)."""
    return encode(d.to_wire())
