"""Offline replay: the worker's own processing core (`RunDriver`) over JSONL lines or a topic's
messages, with in-memory state and outputs.

Deterministic: the same input and policy give byte-identical output. Runs are independent,
so interleaving runs in the input never changes any run's decisions. Memory follows the live
runs: with an idle TTL, a run (or an ended run's tombstone) quiet for longer than the TTL in
stream time (the largest event `ts` seen) is dropped, as the worker drops it (docs/audit.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import (
    NO_VERDICT_YET,
    Decision,
    Event,
    RunState,
    Thresholds,
    parse_event,
)
from loopguard_fleet.detectors.jsjson import loads
from loopguard_fleet.detectors.process import GivenVerdict
from loopguard_fleet.streams.audit.inputs import PartitionStart, Placed, RefusedItem
from loopguard_fleet.streams.processing.driver import DriverLimits, RunDriver, event_time_ms
from loopguard_fleet.streams.processing.fleet import OrderedFleet
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.partition import LiveRun
from loopguard_fleet.streams.processing.policy_switch import EVERY_POLICY_TOPIC, InForce
from loopguard_fleet.streams.wire.codec import encode, run_key

__all__ = [
    "MAX_LINE_BYTES",
    "LineOutput",
    "LineResult",
    "MemoryOutputs",
    "MemoryStore",
    "Rejected",
    "ReplayStats",
    "Replayer",
    "encode_decision",
    "event_time_ms",
    "line_outputs",
    "render_table",
    "rendered",
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

    def __reduce__(self) -> tuple[type[Rejected], tuple[int, str, str]]:
        """Pickled by its fields (a replay shard sends it to the parent): compiled, the
        default restores a frozen class by assigning its fields, which it refuses."""
        return Rejected, (self.line, self.reason, self.detail)


LineResult = list[Decision] | Rejected  # what `Replayer.feed_line` gives for one line


class LineOutput(NamedTuple):
    """What one input line produced: rendered decisions, or its rejection."""

    pos: int
    data: bytes
    rejected: Rejected | None = None


# `LineOutput(...)` runs the named tuple's generated `__new__`, a Python frame per line with
# output; the tuple's own constructor builds the same value.
_new_tuple = tuple.__new__


class MemoryStore:
    """The `StateStore` of an offline replay: run states in a dict (replay never checkpoints,
    so it only answers misses and deletes expired runs)."""

    def __init__(self) -> None:
        self.values: dict[tuple[int, bytes], bytes] = {}

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The stored state of a run, if any."""
        return self.values.get((partition, key))

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        """Store a run's state."""
        self.values[(partition, key)] = value

    def delete(self, partition: int, key: bytes) -> None:
        """Forget a run's state."""
        self.values.pop((partition, key), None)


class MemoryOutputs:
    """The `Outputs` of an offline replay: the current line's control messages and refusals."""

    def __init__(self) -> None:
        self.decisions: list[bytes] = []
        self.dead_letters: list[bytes] = []

    def decision(self, key: bytes, value: bytes, source: tuple[str, int]) -> None:
        """Keep one control message (the bytes the worker would publish)."""
        self.decisions.append(value)

    def dead_letter(self, key: bytes | None, value: bytes, source: tuple[str, int]) -> None:
        """Keep one dead-letter record (from `source`, the input topic-partition)."""
        self.dead_letters.append(value)


class _Count:
    """A counter or gauge that keeps nothing: a replay reports its own stats."""

    def inc(self, amount: float = 1) -> None:
        """Count nothing."""

    def set(self, value: float) -> None:
        """Hold nothing."""


class OfflineMetrics(Metrics):
    """The driver's metrics for a replay: no Prometheus counting on the hot path (its locks
    cost as much as the driver's own steps); `ReplayStats` counts what a replay reports."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates = self.runs_cached = self.runs_active = self.runs_packed = _Count()  # type: ignore[assignment]

    def count_events(self, event_type: str, n: int = 1) -> None:
        """Count nothing."""

    def count_detection(self, detector: str, level: str, mode: str = "enforce") -> None:
        """Count nothing."""

    def count_command(self, command: str) -> None:
        """Count nothing."""

    def count_rejected(self, reason: str) -> None:
        """Count nothing."""


REPLAY_TOPIC = "replay"  # the topic of an input line that names none (a file's, one topic's)


class _Line:
    """One input line as the driver reads a message: no key, no record time, partition 0
    (every run of a replay is in one partition). Its topic names where its policy switches
    apply: `replay`, its line number the offset, for a file or one topic (a topic's next
    partition restarts it), or a `Placed` item's own topic-partition and offset (a merged
    replay of both input topics: each keeps its switches, as in the worker).

    One instance is reused for every line: the driver keeps no reference to a message."""

    __slots__ = ("offset", "topic", "value")
    partition = 0
    key = None
    timestamp = None

    def __init__(self) -> None:
        self.topic = REPLAY_TOPIC
        self.offset = 0
        self.value: bytes | None = None


class Replayer:
    """Feeds events in input order through one offline `RunDriver`; every run on partition 0."""

    def __init__(
        self,
        policy: Policy,
        channel_tools: frozenset[str] | None = None,
        idle_ttl_ms: int | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        follows: str | None = EVERY_POLICY_TOPIC,
    ) -> None:
        self.policy = policy if channel_tools is None else policy.with_channel_tools(channel_tools)
        self.idle_ttl_ms = idle_ttl_ms or None
        self.max_line_bytes = max_line_bytes
        self.stats = ReplayStats()
        self.outputs = MemoryOutputs()
        self.store = MemoryStore()
        ttl = self.idle_ttl_ms or 0  # 0: no TTL, stream time never moves (driver, offline)
        limits = DriverLimits(max_line_bytes, 0, run_idle_ttl_ms=ttl, run_cache_idle_ms=ttl)
        # Fleet signals on in the policy: the fleet stage over the input's order (docs/fleet.md).
        fleet = OrderedFleet(self.policy.fleet) if self.policy.fleet.enabled else None
        self.driver = RunDriver(
            self.policy,
            limits,
            self.store,
            self.outputs,
            OfflineMetrics(),
            offline=True,
            fleet=fleet,
            follows=follows,  # the policy topic whose switch records apply (docs/policy.md)
        )
        self._runs = self.driver.partition(0)
        self._msg = _Line()
        self._until_sweep = SWEEP_EVERY

    @property
    def stream_ms(self) -> int | None:
        """Stream time: the largest event `ts` seen (None without an idle TTL)."""
        return self._runs.stream_ms

    @stream_ms.setter
    def stream_ms(self, now: int | None) -> None:
        self._runs.stream_ms = now

    @property
    def states(self) -> dict[str, RunState]:
        """Every live run's state by run id (a new dict: for tests and the chaos oracle)."""
        return {k.decode("utf-8"): run.state for k, run in self._runs.live.items()}

    def state_of(self, run_id: str) -> RunState | None:
        """One live run's state, if held."""
        run = self._runs.live.get(run_key(run_id))
        return None if run is None else run.state

    def in_force(self) -> InForce:
        """The policy deciding the line placed last (`place`, or the line fed last)."""
        msg = self._msg
        return self.driver.in_force(msg.topic, 0, msg.offset)

    def thresholds(self, agent_id: str | None) -> Thresholds:
        """Resolved thresholds for an agent, with the service's channel tools applied."""
        return self.in_force().for_agent(agent_id)

    def call_thresholds(self, agent_id: str | None, tool: str | None) -> Thresholds:
        """Thresholds for one call of a tool (per-tool tuning applied); None: no call."""
        return self.in_force().for_call(agent_id, tool)

    def tool_table(self) -> dict[str, dict[str, dict[str, object]]]:
        """The policy's effective per-tool settings (empty without per-tool tuning)."""
        return self.in_force().policy.tool_table()

    def place(self, line: int, raw: bytes) -> None:
        """Read the next event as line `line` (`raw`: a `Placed` item's own topic-partition
        and offset), for callers that decode lines themselves and then `feed_event`."""
        msg = self._msg
        if isinstance(raw, Placed):
            msg.topic, msg.offset = raw.place, raw.offset
        else:
            msg.topic, msg.offset = REPLAY_TOPIC, line

    def state_for(self, ev: Event) -> RunState:
        """The run's state as the next event sees it: fresh when new or idle past the TTL."""
        run: LiveRun = self.driver.load(0, run_key(ev.run_id))
        return run.state

    def live_run(self, run_id: str) -> LiveRun:
        """The run as its next event sees it: loaded, fresh when new or idle past the TTL."""
        return self.driver.load(0, run_key(run_id))

    def adopt(self, run_id: str, run: LiveRun) -> None:
        """Hold a copy of `run` (another replayer's) as this run (`compare` forks a run it
        held once for both policies)."""
        state = RunState()
        state.restore(run.state.save())  # containers copied, immutable records shared
        key = run_key(run_id)
        self._runs.cold.pop(key, None)
        self._runs.live[key] = LiveRun(state, run.stamp_ms)

    def drop(self, run_id: str) -> None:
        """Forget a run (`compare` shares a forked run again, held by the other side)."""
        self._runs.drop([run_key(run_id)])

    def observe_time(self, obj: object) -> int | None:
        """Advance stream time with a decoded line's `ts` (every decodable line counts)."""
        if self.idle_ttl_ms is None or type(obj) is not dict:
            return None
        raw_ts = obj.get("ts")
        if raw_ts is not None:
            self._runs.advance(event_time_ms(raw_ts))
        return self._runs.stream_ms

    def observe_event_time(self, obj: object) -> None:
        """With fleet signals on, a decoded line's `ts` as the event time of the next event
        fed (for callers that parse lines themselves, as `explain` does)."""
        if self.driver.has_fleet and type(obj) is dict:
            at = event_time_ms(obj.get("ts"))
            if at is not None:
                self.driver.event_ms = at

    def advance_time(self, raw_ts: object) -> None:
        """Move stream time to a line's `ts` if later (a line replayed elsewhere: a shard
        keeps the stream time of every line, its own and the other shards')."""
        self._runs.advance(event_time_ms(raw_ts))

    def sweep(self) -> None:
        """Drop the runs idle past the TTL in stream time (their next event starts fresh)."""
        self._until_sweep = SWEEP_EVERY
        self._runs.next_sweep_ms = 0  # now, whatever the driver's schedule says
        self.driver.sweep(0)

    def feed_line(
        self, line: int, raw: bytes | str, obj: dict[str, Any] | None = None
    ) -> list[Decision] | Rejected:
        """Decode, load, apply and publish one input line: its decisions (their control
        messages in `outputs.decisions`, until the next line), or its refusal. `obj`: the
        line already decoded by `decode_object` (a shard that routed it), not decoded again."""
        msg = self._msg
        msg.offset = line
        if type(raw) is bytes:  # the hot path: one type check
            msg.value = raw
        elif isinstance(raw, Placed):  # a merged replay: its topic-partition's switches
            msg.topic, msg.offset, msg.value = raw.place, raw.offset, raw
        elif isinstance(raw, RefusedItem):
            self.outputs.decisions.clear()
            return self.reject(line, raw.reason, raw.detail)
        elif isinstance(raw, PartitionStart):  # the next topic partition: its own switches
            self.outputs.decisions.clear()
            self.driver.restart_policy(msg.topic, 0)
            return []
        else:
            msg.value = str(raw).encode()
        if self.outputs.decisions:
            self.outputs.decisions.clear()
        ev = self.driver.accept(msg, obj)
        if ev is None:  # refused, or a control record applied (a policy switch: no output)
            return self._refused(line) if self.outputs.dead_letters else []
        return self._feed(ev, publish=True)

    def feed_event(self, ev: Event, verdict: GivenVerdict = NO_VERDICT_YET) -> list[Decision]:
        """Load and apply one parsed event (its line's time already observed), not publishing:
        for callers that read the decisions themselves (compare, explain). An engine failure
        is counted as a rejected line. `verdict`: `apply_event`'s, on the run's state as
        `live_run` gives it, under `thresholds` of its agent (compare decides calls first)."""
        out = self._feed(ev, publish=False, verdict=verdict)
        return [] if isinstance(out, Rejected) else out

    def _feed(
        self, ev: Event, *, publish: bool, verdict: GivenVerdict = NO_VERDICT_YET
    ) -> list[Decision] | Rejected:
        stats = self.stats
        stats.events += 1
        key = run_key(ev.run_id)
        step = self.driver.step(self._msg, key, ev, verdict)
        self._until_sweep -= 1
        if self._until_sweep <= 0:
            self._until_sweep = SWEEP_EVERY
            self.driver.sweep(0)
        if step is None:
            return self._refused(self._msg.offset)
        if step.is_duplicate:
            stats.duplicates += 1
            return step.decisions
        out = step.decisions
        if out:
            stats.decisions += len(out)
            if publish:  # from the line's topic, on partition 0 (`_Line`)
                self.driver.publish(key, out, (self._msg.topic, 0))
        return out

    def feed(self, obj: object) -> list[Decision]:
        """Process one decoded event; raises InvalidEvent for a malformed one."""
        self.observe_time(obj)
        return self.feed_event(parse_event(obj))

    def decode(self, line: int, raw: bytes | str) -> Event | Rejected | None:
        """Decode and validate one line as the worker does (the driver's decode step); None
        for a line that is no event but was applied: a policy switch, a partition start."""
        if isinstance(raw, RefusedItem):
            return self.reject(line, raw.reason, raw.detail)
        if isinstance(raw, PartitionStart):
            self.driver.restart_policy(self._msg.topic, 0)
            return None
        msg = self._msg
        msg.value = raw.encode() if isinstance(raw, str) else raw
        self.place(line, msg.value)
        ev = self.driver.decode(msg)
        if ev is None:
            return self._refused(line) if self.outputs.dead_letters else None
        return ev

    def reject(self, line: int, reason: str, detail: str) -> Rejected:
        """Count a malformed input line."""
        self.stats.rejected += 1
        self.stats.rejected_reasons[reason] = self.stats.rejected_reasons.get(reason, 0) + 1
        return Rejected(line, reason, detail)

    def _refused(self, line: int) -> Rejected:
        """The refusal the driver just dead-lettered, as a rejected line (rare: decoded).

        The record is read back with the wire's own reader: its strings may hold lone
        surrogates (escaped), which orjson refuses. Bytes that are not UTF-8 are named as
        such, not as the JSON reader's complaint about them.
        """
        record = loads(self.outputs.dead_letters.pop())
        reason, detail = str(record["reason"]), str(record["detail"])
        if reason == "not_json":
            raw = self._msg.value or b""
            try:
                raw.decode()
            except UnicodeDecodeError as exc:
                detail = f"invalid UTF-8 at byte {exc.start}"
        return self.reject(line, reason, detail)


def replay_items(
    replayer: Replayer, items: Iterable[tuple[int, bytes]]
) -> Iterator[tuple[int, Decision | Rejected]]:
    """(position, decision) for each decision in input order, and (position, Rejected)."""
    feed = replayer.feed_line
    for pos, raw in items:
        got = feed(pos, raw)
        if isinstance(got, Rejected):
            yield pos, got
            continue
        for d in got:
            yield pos, d


def replay_lines(replayer: Replayer, lines: Iterable[bytes | str]) -> Iterator[Decision | Rejected]:
    """Decisions for each JSONL line in order, and a `Rejected` for each malformed line."""
    feed = replayer.feed_line
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        got = feed(n, line)
        if isinstance(got, Rejected):
            yield got
            continue
        yield from got


def encode_decision(d: Decision) -> bytes:
    """One decision as a compact JSON line (the control message's bytes, as the worker's)."""
    return encode(d.to_wire())


def render_table(d: Decision) -> str:
    """One decision as a fixed-width table row."""
    p = d.to_wire()
    if d.kind == "loop_event":
        pub = "" if p["published"] else " (unpublished)"
        return (
            f"{p['seq']!s:>6}  {p['run_id']!s:<20} {p['action']!s:<6} {p['detector']!s:<26} "
            f"{p['count']!s:>4}  {p['tool']}{pub}"
        )
    if d.kind == "command":
        return f"{p['seq']!s:>6}  {p['run_id']!s:<20} → {p['command']} ({p['detector']})"
    if d.kind == "fleet_signal":
        return (
            f"{'':>6}  {'(fleet)':<20} {p['state']!s:<9} {p['tool']} in {p['runs']} runs, "
            f"{p['agents']} agents (signal {str(p['signal_id'])[:12]})"
        )
    return f"{p['seq']!s:>6}  {p['run_id']!s:<20} verdict {p['decision']} {p['tool_call_id']}"


def rendered(table: bool, decisions: list[Decision], published: list[bytes]) -> bytes:
    """One line's output: the bytes the driver published, or table rows of its decisions."""
    if table:
        # backslashreplace: a lone surrogate (a run id, a tool) shows as \udc00, not a crash
        return "".join([render_table(d) + "\n" for d in decisions]).encode(
            errors="backslashreplace"
        )
    return b"\n".join(published) + b"\n"


def line_outputs(
    replayer: Replayer, table: bool, items: Iterable[tuple[int, bytes]]
) -> Iterator[LineOutput]:
    """Replay (pos, raw) items in order; only lines with output (or a rejection) are yielded.

    JSON output is the bytes the driver published (the worker's control messages); a table
    is rendered from the decisions. Compiled with the replayer (setup.py): the loop every
    line of a `--jobs 1` replay goes through."""
    published = replayer.outputs.decisions
    for pos, raw in items:
        # Called on the replayer, not through a bound method kept in a local: compiled, that is
        # a direct call, the bound method a generic one with its arguments parsed again.
        got = replayer.feed_line(pos, raw)
        if isinstance(got, Rejected):
            yield _new_tuple(LineOutput, (pos, b"", got))
        elif got:
            yield _new_tuple(LineOutput, (pos, rendered(table, got, published), None))
