"""The one processing core: decode ▸ load ▸ apply ▸ publish ▸ sweep, per partition, Faust-free.

`RunDriver` turns input messages into decisions and dead letters, keeping each run's
`RunState` in a per-partition cache over a `StateStore`. The stream worker drives it with
Faust's messages, its table and its producers (streams/worker/agent.py); tests drive it with plain
objects. A checkpoint writes every changed run once and evicts runs quiet for the cache idle
time (stream time); the sweep deletes runs idle past the TTL (docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import (
    NO_VERDICT_YET,
    Applied,
    Decision,
    Event,
    InvalidEvent,
    InvalidState,
    RunState,
    apply_event,
    is_duplicate,
    parse_event,
)
from loopguard_fleet.detectors.fleet.tools import tool_use_of
from loopguard_fleet.detectors.process import GivenVerdict
from loopguard_fleet.streams.processing.fleet import FleetStage, signal_key
from loopguard_fleet.streams.processing.fleet_partition import FIRING_KEY
from loopguard_fleet.streams.processing.hot import HotRuns
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.partition import (
    LiveRun,
    PartitionRuns,
    Snapshot,
    snapshot_state,
)
from loopguard_fleet.streams.processing.policy_switch import (
    BEFORE_FIRST,
    EVERY_POLICY_TOPIC,
    MAX_SWITCHES,
    SWITCH_KEY,
    SWITCH_TYPE,
    InForce,
    StoredSwitches,
    SwitchTimeline,
    dump_switches,
    follows,
    load_switches,
    read_switch,
    switch_entry,
    switch_offset,
)
from loopguard_fleet.streams.processing.stored import decode_stored, encode_stored
from loopguard_fleet.streams.wire.codec import InputRejected, decode_object, encode, run_key
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter

__all__ = [
    "DriverLimits",
    "Message",
    "Outputs",
    "RunDriver",
    "StateStore",
    "TakenRun",
    "event_time_ms",
]

log = logging.getLogger(__name__)

_LATEST = 1 << 63  # an offset after every switch
Place = tuple[str, int]  # an input topic-partition: (topic, partition)


class Message(Protocol):
    """An input record as the driver reads it (Faust's `Message` has these attributes)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> float | None: ...  # seconds, as Faust gives it


class StateStore(Protocol):
    """Where run states live between checkpoints (the worker's Faust table)."""

    def get(self, partition: int, key: bytes) -> bytes | None: ...
    def put(self, partition: int, key: bytes, value: bytes) -> None: ...
    def delete(self, partition: int, key: bytes) -> None: ...


class Outputs(Protocol):
    """Where decisions and dead letters go (the worker's control and dead-letter topics)."""

    def decision(self, key: bytes, value: bytes, source: tuple[str, int]) -> None: ...
    def dead_letter(self, key: bytes | None, value: bytes, source: tuple[str, int]) -> None: ...


@dataclass(frozen=True, slots=True)
class DriverLimits:
    """The settings the core needs (from `Settings`, the composition root)."""

    max_message_bytes: int
    dead_letter_prefix_bytes: int
    run_idle_ttl_ms: int
    run_cache_idle_ms: int
    hot_runs: int = 0  # runs whose states stay objects, the others packed (0: all; hot.py)

    @property
    def sweep_every_ms(self) -> int:
        """Stream time between two TTL sweeps of a partition."""
        return max(1, min(self.run_idle_ttl_ms // 4, 60_000))


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


def _ms(timestamp_s: float | None) -> int | None:
    """A record timestamp (seconds) as integer milliseconds."""
    return None if timestamp_s is None else int(timestamp_s * 1000)


@dataclass(frozen=True, slots=True)
class TakenRun:
    """A changed run as a checkpoint took it: its cached object, its state then."""

    partition: int
    key: bytes
    run: LiveRun
    snapshot: Snapshot
    stamp_ms: int | None


class RunDriver:
    """Applies input messages to cached run states; persists them at checkpoints.

    `offline` (replay, the chaos oracle): input lines carry no Kafka key or record time, so a
    run's key is derived from its run_id and stream time is the largest event `ts` seen, and
    only when the limits set an idle TTL (docs/audit.md). `fleet` (fleet signals on in the
    policy): the fleet stage, over the one input order of a replay or over a worker's
    partitions (streams/processing/fleet.py). `follows`: the policy topic whose
    `policy_switch` records apply (docs/policy.md; every topic's by default, None: none);
    `base_document`: the base policy's document, stored with a partition's switches so that
    a worker started with another policy resumes it as it was (a worker; None: not stored);
    `v1_topic`: the input topic whose switches a stored record of the first format holds
    (the tool-calls topic; policy_switch.load_switches).

    The policy is kept per input topic-partition (`Place`: the message's topic and
    partition), the run states per partition: both input topics' partition p hold the same
    runs, and each topic-partition switches at its own offsets.
    """

    def __init__(
        self,
        policy: Policy,
        limits: DriverLimits,
        store: StateStore,
        outputs: Outputs,
        metrics: Metrics,
        *,
        offline: bool = False,
        fleet: FleetStage | None = None,
        follows: str | None = EVERY_POLICY_TOPIC,
        base_document: Mapping[str, Any] | None = None,
        v1_topic: str | None = None,
    ) -> None:
        self._base = InForce(policy)  # a partition's policy until its first switch record
        self._follows = follows  # the policy topic whose switch records apply (None: none)
        # Each input topic-partition's switches and policy at each offset, loaded on its
        # first use (docs/policy.md, "Where a switch applies"): the base until its first.
        self._timelines: dict[Place, SwitchTimeline] = {}
        # Each table partition's stored switches (every topic's), and the partitions whose
        # switches the next checkpoint stores; the base policy's document, stored before the
        # first switch.
        self._stored: dict[int, StoredSwitches] = {}
        self._switched: set[int] = set()
        self._v1_topic = v1_topic
        self._base_document = base_document
        self._fleet = fleet
        # Tool health sends a use of each tool_call's tool (docs/fleet.md, "Tool health").
        self._tool_health = fleet is not None and fleet.settings.tool_health.enabled
        self.event_ms = 0  # the event time of the message being applied (fleet stage only)
        self._advanced_ms: int | None = None  # the last event time the fleet stage was given
        self._offline = offline
        self._limits = limits
        self._store = store
        self._outputs = outputs
        self._metrics = metrics
        self._partitions: dict[int, PartitionRuns] = {}
        self._hot = HotRuns(limits.hot_runs)

    @property
    def policy(self) -> Policy:
        """The policy of partitions that read no switch record."""
        return self._base.policy

    def policy_of(self, topic: str, partition: int, offset: int = _LATEST) -> Policy:
        """The policy deciding an input topic-partition's event at `offset` (default: next)."""
        return self.in_force(topic, partition, offset).policy

    def restart_policy(self, topic: str, partition: int) -> None:
        """Decide a topic-partition with the base policy again, as before its first switch
        record (a replay reading the next partition of a topic into its one partition)."""
        place = (topic, partition)
        stored = self._stored.setdefault(partition, StoredSwitches())
        stored.topics[topic] = []
        self._timelines[place] = SwitchTimeline(
            stored.topics[topic], self._base, f"{topic}[{partition}]"
        )
        self._switched.discard(partition)

    def _timeline(self, place: Place, offset: int = _LATEST) -> SwitchTimeline:
        """A topic-partition's switches, loaded from its table partition's stored record on
        first use since assignment (for an event at `offset`: its policy is exported)."""
        timeline = self._timelines.get(place)
        if timeline is not None:
            return timeline
        topic, partition = place
        stored = self._stored.get(partition)
        if stored is None:
            raw = self._store.get(partition, SWITCH_KEY)
            stored = self._stored[partition] = load_switches(raw, self._v1_topic)
        timeline = self._timelines[place] = SwitchTimeline(
            stored.of(topic), self._base, f"{topic}[{partition}]"
        )
        in_force = timeline.at(offset)
        if in_force is not self._base:
            # A worker that resumes a switched partition (a restart, a rebalance) decides
            # with the stored version, not its start-up one: it exports it as in force.
            self._metrics.set_policy(in_force.policy.version)
        return timeline

    def _apply_switch(self, msg: Message, obj: dict[str, Any]) -> None:
        """A `policy_switch` input record: its topic-partition decides its events after it
        with the record's policy. A switch read for the first time joins the topic-
        partition's switches, stored by the next checkpoint (docs/policy.md); a switch read
        again (at or before the last one held), or the version in force: nothing changes."""
        policy = read_switch(obj, self._base.policy)
        partition, offset = msg.partition, msg.offset
        timeline = self._timeline((msg.topic, partition), offset)
        if offset <= timeline.last_at or timeline.at(offset).policy.version == policy.version:
            return
        if not timeline.entries and self._base_document is not None:
            timeline.add(BEFORE_FIRST, self._base_entry(), self._base)
        timeline.add(offset, obj, InForce(policy, switch_offset(obj)))
        if not self._offline:  # a worker reads on in offset order; a replay may look back
            timeline.trim(MAX_SWITCHES + 1)
        self._switched.add(partition)
        self._metrics.set_policy(policy.version)
        log.info("%s[%d] decides with policy %s from offset %d", msg.topic, partition,
                 policy.version, offset)  # fmt: skip

    def _base_entry(self) -> dict[str, Any]:
        """The base policy as a switch entry (what decided before the first switch)."""
        assert self._base_document is not None
        topic = self._follows or EVERY_POLICY_TOPIC
        return switch_entry(self._base_document, self._base.policy.version, topic)

    @property
    def has_fleet(self) -> bool:
        """True when the driver runs a fleet stage (fleet signals on)."""
        return self._fleet is not None

    @property
    def has_dirty(self) -> bool:
        """True when a checkpoint has runs to write."""
        return bool(self._switched) or any(p.dirty for p in self._partitions.values())

    @property
    def partitions(self) -> Mapping[int, PartitionRuns]:
        """The runs held per partition (a read-only view, for probes and tests)."""
        return MappingProxyType(self._partitions)

    def partition(self, partition: int) -> PartitionRuns:
        """The runs held for one partition (created on first use)."""
        runs = self._partitions.get(partition)
        if runs is None:
            runs = self._partitions[partition] = PartitionRuns()
        return runs

    def apply(self, messages: Iterable[Message]) -> bool:
        """Apply a batch of messages; True when it produced a verdict. Never raises for bad
        input or engine bugs: those messages are dead-lettered."""
        by_type: Counter[str] = Counter()
        has_verdict = False
        touched: set[int] = set()
        decode, key_of, step, publish = self.decode, self.key_of, self.step, self.publish
        for msg in messages:
            touched.add(msg.partition)
            ev = decode(msg)
            if ev is None:
                continue
            key = key_of(msg, ev)
            applied = step(msg, key, ev)
            if applied is None or applied.is_duplicate:
                continue
            by_type[ev.type] += 1
            if applied.decisions:
                has_verdict |= publish(key, applied.decisions, (msg.topic, msg.partition))
        for partition in touched:
            self.sweep(partition)
        for event_type, n in by_type.items():
            self._metrics.count_events(event_type, n)
        self.count_runs()
        return has_verdict

    def decode(self, msg: Message) -> Event | None:
        """Decode and validate one message, moving its partition's stream time; None when it
        was refused (dead-lettered)."""
        return self.accept(msg, None)

    def accept(self, msg: Message, obj: dict[str, Any] | None) -> Event | None:
        """`decode`, given the value already decoded with `decode_object` when `obj` is not
        None (a replay shard decodes each line once, to route it): the same validation,
        stream time and dead letters, without the second JSON decode."""
        runs = self._partitions.get(msg.partition) or self.partition(msg.partition)
        if not self._offline:
            runs.advance(_ms(msg.timestamp))
        try:
            if obj is None:
                obj = decode_object(msg.value, self._limits.max_message_bytes)
            if obj.get("type") == SWITCH_TYPE:
                if follows(obj, self._follows):
                    self._apply_switch(msg, obj)
                return None  # applied to the partition's policy (or another group's): no event
            if self._fleet is not None and obj.get("type") == "fleet_signal":
                self._apply_signal(msg, obj)
                return None  # applied to the partition's firing set: no run event
            return self._parse(msg, runs, obj)
        except InputRejected as exc:
            self._reject(msg, exc.reason, exc.detail, exc.run_id)
            return None

    def _apply_signal(self, msg: Message, obj: dict[str, Any]) -> None:
        """A `fleet_signal` input record to its partition's firing set (docs/fleet.md), which
        is stored at once: a restart or a rebalance loads it back with the partition."""
        fleet = self._fleet
        assert fleet is not None
        partition = msg.partition
        self._load_firing(fleet, partition)
        if not fleet.apply_record(partition, obj):
            raise InputRejected("invalid_fleet_signal", "signature, state and evidence fields")
        self._store.put(partition, FIRING_KEY, fleet.dump(partition))

    def _load_firing(self, fleet: FleetStage, partition: int) -> None:
        """Load a partition's firing set from the store on its first use since assignment."""
        if fleet.needs(partition):
            fleet.load(partition, self._store.get(partition, FIRING_KEY))

    def key_of(self, msg: Message, ev: Event) -> bytes:
        """The run's key: the record's (checked by `decode`), offline derived from its run_id."""
        key = run_key(ev.run_id) if self._offline else msg.key
        assert key is not None  # decode refuses a key that is not the run_id
        return key

    def step(
        self, msg: Message, key: bytes, ev: Event, verdict: GivenVerdict = NO_VERDICT_YET
    ) -> Applied | None:
        """Load the run (cache, then store) and apply one decoded event to it: its decisions,
        or that it was a duplicate; None when the engine failed (the message dead-lettered,
        the run's state as before it). `verdict`: `apply_event`'s, computed by the caller on
        the state this step loads, under this driver's thresholds for the run's agent."""
        partition = msg.partition
        runs = self._partitions.get(partition) or self.partition(partition)
        now = runs.stream_ms
        run = runs.live.get(key)
        if run is None or (now is not None and self._is_idle(run.stamp_ms, now)):
            run = self._live(runs, partition, key, now)  # a miss, or idle past the TTL
        state = self._hot.use(run)
        saved = state.save()
        # effective_agent and the thresholds cache, inlined: this is the worker's hot path
        agent = state.agent_id if state.agent_id is not None else ev.agent_id
        offset = msg.offset
        timeline = self._timelines.get((msg.topic, partition)) or self._timeline(
            (msg.topic, partition), offset
        )
        in_force = timeline.last if offset > timeline.last_at else timeline.at(offset)
        th = in_force.thresholds.get(agent) or in_force.for_agent(agent)
        if in_force.tuned and ev.call is not None:
            th = in_force.policy.for_call(agent, ev.call.tool)  # loopguard.tools: per-tool tuning
        fleet = self._fleet
        signals: list[Decision] = []
        try:
            if fleet is None or is_duplicate(state, ev):  # a redelivery moves no event time
                applied = apply_event(state, ev, th, verdict)
            else:
                # Records share event times (a record timestamp is in ms): the stage moves
                # only when time does, and nothing moves it back.
                if self.event_ms != self._advanced_ms:
                    self._advanced_ms = self.event_ms
                    signals = fleet.advance(partition, self.event_ms)
                if fleet.needs(partition):
                    self._load_firing(fleet, partition)
                # Only a tool_call reads the fleet (its contribution, the early rule), under
                # the fleet settings of the policy in force at its offset: a pushed policy
                # switches the early rule and `enabled` where it switches the thresholds.
                is_call = ev.type == "tool_call"
                view = None
                if is_call:
                    view = fleet.view(partition, self.event_ms, in_force.policy.fleet)
                applied = apply_event(state, ev, th, verdict, view)
                obs = applied.observation
                if obs is not None:
                    fleet.contribute(partition, obs, in_force.windows)
                if self._tool_health and is_call and ev.call is not None:
                    use = tool_use_of(ev.call, th, ev.run_id, state.agent_id, self.event_ms, obs)
                    fleet.use(partition, use, in_force.windows)
        except Exception as exc:  # the dead-letter policy: an engine bug costs one event
            log.exception("engine failed on run %s event %s", ev.run_id, ev.event_id)
            state.restore(saved)
            self._reject(msg, "engine_error", f"{type(exc).__name__}: {exc}", ev.run_id)
            return None
        if applied.is_duplicate:
            self._metrics.duplicates.inc()
            return applied
        if not run.is_dirty:
            runs.mark_dirty(key, run)
        run.stamp_ms = now
        if signals:  # the fleet's changes first: they were applied before this event
            return Applied(signals + applied.decisions, False, applied.observation)
        return applied

    def publish(self, key: bytes, decisions: Iterable[Decision], source: tuple[str, int]) -> bool:
        """Queue decisions made from an event of `source` (its input topic-partition) for the
        control topic and count them; True when one is a verdict."""
        has_verdict = False
        for decision in decisions:
            has_verdict |= self._publish(key, decision, source)  # compiled: a direct call
        return has_verdict

    def checkpoint(self) -> None:
        """Write each changed run's state to the store, then evict the idle ones from memory."""
        for taken in self.take_dirty():
            self.write_taken(taken)
        self.evict_idle()

    def take_dirty(self) -> list[TakenRun]:
        """Each changed run as it is now (its state copied, ~1 µs, or its packed bytes), no
        longer dirty: the worker's checkpoint writes them with `write_taken` while batches go
        on (its agent). The partitions' policy switches read since the last call are stored
        now: they belong to the same offsets as the runs taken."""
        for partition in self._switched:
            self._store.put(partition, SWITCH_KEY, dump_switches(self._stored[partition]))
        self._switched.clear()
        taken: list[TakenRun] = []
        for partition, runs in self._partitions.items():
            for key, run in runs.dirty.items():
                taken.append(TakenRun(partition, key, run, run.snapshot(), run.stamp_ms))
                run.is_dirty = False
            runs.dirty.clear()
        return taken

    def write_taken(self, taken: TakenRun) -> None:
        """Write a taken run to the store, unless it left the cache since it was taken (its
        partition forgotten or the run swept): the store must not get it back."""
        if self._cached(taken) is None:
            return
        state = snapshot_state(taken.snapshot)
        self._store.put(taken.partition, taken.key, encode_stored(state, taken.stamp_ms))

    def untake(self, taken: Iterable[TakenRun]) -> None:
        """Mark taken runs dirty again, those still cached: a checkpoint that did not write
        them (cancelled, or its outputs failed) leaves them to the next one."""
        for t in taken:
            runs = self._cached(t)
            if runs is not None:
                runs.mark_dirty(t.key, t.run)

    def _cached(self, taken: TakenRun) -> PartitionRuns | None:
        """The partition still caching a taken run (the same object), else None."""
        runs = self._partitions.get(taken.partition)
        return runs if runs is not None and runs.live.get(taken.key) is taken.run else None

    def evict_idle(self) -> None:
        """Move runs quiet for the cache idle time, and written, out of memory (stream time)."""
        for runs in self._partitions.values():
            if runs.stream_ms is not None:
                self._hot.discard(runs.evict_idle(runs.stream_ms - self._limits.run_cache_idle_ms))
        self.count_runs()

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop everything held for partitions whose ownership changed (revoke or assign)."""
        partitions = set(partitions)
        for place in [place for place in self._timelines if place[1] in partitions]:
            del self._timelines[place]
        for p in partitions:
            self._stored.pop(p, None)
            self._switched.discard(p)
            runs = self._partitions.pop(p, None)
            if runs is not None:
                self._hot.discard(runs.live.values())
        self.count_runs()

    def count_runs(self) -> None:
        """Set the held (cached or store-only) and cached run gauges."""
        cached = sum(len(p.live) for p in self._partitions.values())
        cold = sum(len(p.cold) for p in self._partitions.values())
        self._metrics.runs_cached.set(cached)
        self._metrics.runs_active.set(cached + cold)
        self._metrics.runs_packed.set(
            max(0, cached - len(self._hot)) if self._limits.hot_runs else 0
        )

    def _parse(self, msg: Message, runs: PartitionRuns, obj: dict[str, Any]) -> Event:
        """Validate one decoded message; its key must be its run_id (offline: none, and the
        event's `ts` moves stream time)."""
        if self._fleet is not None:
            # The event time: the event's `ts` where it has one, else the record's time.
            at = event_time_ms(obj.get("ts"))
            self.event_ms = at if at is not None else (_ms(msg.timestamp) or self.event_ms)
        if self._offline and self._limits.run_idle_ttl_ms:
            raw_ts = obj.get("ts")
            if raw_ts is not None:  # fleets that do not stamp events pay nothing here
                runs.advance(event_time_ms(raw_ts))
        try:
            ev = parse_event(obj)
        except InvalidEvent as exc:
            run_id = obj.get("run_id")
            run_id = run_id if isinstance(run_id, str) else None
            raise InputRejected(exc.reason, exc.detail, run_id) from None
        if self._offline:
            return ev
        if msg.key is None or msg.key != run_key(ev.run_id):
            raise InputRejected(
                "key_mismatch",
                f"the Kafka key must be the run_id {ev.run_id!r}, got {msg.key!r}"[:300],
                ev.run_id,
            )
        return ev

    def _is_idle(self, stamp_ms: int | None, now: int | None) -> bool:
        """True when a run saw no event for longer than the idle TTL, in stream time."""
        return (
            stamp_ms is not None
            and now is not None
            and now - stamp_ms > self._limits.run_idle_ttl_ms
        )

    def load(self, partition: int, key: bytes) -> LiveRun:
        """A run as its next event sees it: cached, else from the store; fresh when new or
        idle past the TTL."""
        runs = self.partition(partition)
        return self._live(runs, partition, key, runs.stream_ms)

    def _live(self, runs: PartitionRuns, partition: int, key: bytes, now: int | None) -> LiveRun:
        """The run's cached state, loaded on a miss; fresh when idle past the TTL."""
        run = runs.live.get(key)
        if run is not None and now is None:
            return run  # no stream time (no record times, or replay without a TTL): never idle
        if run is None:
            runs.cold.pop(key, None)
            run = runs.live[key] = self._load(partition, key, now)
        elif self._is_idle(run.stamp_ms, now):
            run.state, run.stamp_ms = RunState(), None
        return run

    def _load(self, partition: int, key: bytes, now: int | None) -> LiveRun:
        """A cache miss: the store's run (fresh when absent, unreadable or idle)."""
        raw = self._store.get(partition, key)
        if raw is None:
            return LiveRun(RunState())
        try:
            state, stamp_ms = decode_stored(raw)
        except InvalidState:
            log.exception("dropping unreadable state of run %r", key)
            return LiveRun(RunState())
        return LiveRun(RunState()) if self._is_idle(stamp_ms, now) else LiveRun(state, stamp_ms)

    def in_force(self, topic: str, partition: int, offset: int = _LATEST) -> InForce:
        """The policy (thresholds cached) deciding a topic-partition's event at `offset`."""
        return self._timeline((topic, partition), offset).at(offset)

    def _publish(self, key: bytes, decision: Decision, source: tuple[str, int]) -> bool:
        """Queue one decision for the control topic and count it; True for a verdict. A fleet
        signal is keyed by its signature (or tool), not by the run that moved event time past
        it."""
        wire = decision.to_wire()
        if decision.kind == "fleet_signal":
            key = signal_key(wire)
        self._outputs.decision(key, encode(wire), source)
        if decision.kind == "loop_event":
            mode = "observe" if wire.get("enforced") is False else "enforce"
            self._metrics.count_detection(str(wire.get("detector")), str(wire.get("level")), mode)
        elif decision.kind == "command":
            self._metrics.count_command(str(wire.get("command")))
        return decision.kind == "verdict"

    def sweep(self, partition: int) -> None:
        """Delete runs idle longer than the TTL, at most every few minutes of stream time."""
        runs = self.partition(partition)
        now = runs.stream_ms
        if now is None or now < runs.next_sweep_ms:
            return
        runs.next_sweep_ms = now + self._limits.sweep_every_ms
        expired = [k for k, run in runs.live.items() if self._is_idle(run.stamp_ms, now)]
        expired += [k for k, stamp_ms in runs.cold.items() if self._is_idle(stamp_ms, now)]
        self._hot.discard(runs.drop(expired))
        for key in expired:
            self._store.delete(partition, key)

    def _reject(self, msg: Message, reason: str, detail: str, run_id: str | None) -> None:
        """Dead-letter one message and count it."""
        origin = Origin(msg.topic, msg.partition, msg.offset, _ms(msg.timestamp), msg.key)
        record = dead_letter(
            origin,
            msg.value,
            reason,
            detail,
            prefix_bytes=self._limits.dead_letter_prefix_bytes,
            run_id=run_id,
        )
        self._outputs.dead_letter(msg.key, encode(record), (msg.topic, msg.partition))
        self._metrics.count_rejected(reason)
