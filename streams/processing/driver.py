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
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Protocol

from loopguard.config import Policy
from loopguard.detectors import (
    Decision,
    Event,
    InvalidEvent,
    InvalidState,
    RunState,
    Thresholds,
    apply_event,
    effective_agent,
    parse_event,
)
from loopguard.streams.processing.metrics import Metrics
from loopguard.streams.processing.partition import LiveRun, PartitionRuns
from loopguard.streams.wire.codec import Rejected, decode_object, encode, run_key
from loopguard.streams.wire.deadletter import Origin, dead_letter

__all__ = ["DriverLimits", "Message", "Outputs", "RunDriver", "StateStore"]

log = logging.getLogger(__name__)


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

    def decision(self, key: bytes, value: bytes) -> None: ...
    def dead_letter(self, key: bytes | None, value: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class DriverLimits:
    """The settings the core needs (from `Settings`, the composition root)."""

    max_message_bytes: int
    dead_letter_prefix_bytes: int
    run_idle_ttl_ms: int
    run_cache_idle_ms: int

    @property
    def sweep_every_ms(self) -> int:
        """Stream time between two TTL sweeps of a partition."""
        return max(1, min(self.run_idle_ttl_ms // 4, 60_000))


_STATE_FIELDS = tuple(f.name for f in fields(RunState))


def snapshot(state: RunState) -> RunState:
    """A copy the engine's in-place update cannot reach (containers copied, values shared).

    Engine values inside (records, observations) are immutable, so one level suffices; taken
    before each event so that an engine bug costs that event only (~2 µs, no serialising).
    """
    values = {}
    for name in _STATE_FIELDS:
        value = getattr(state, name)
        if isinstance(value, list | dict):
            value = value.copy()
        values[name] = value
    return RunState(**values)


def _ms(timestamp_s: float | None) -> int | None:
    """A record timestamp (seconds) as integer milliseconds."""
    return None if timestamp_s is None else int(timestamp_s * 1000)


class RunDriver:
    """Applies input messages to cached run states; persists them at checkpoints."""

    def __init__(
        self,
        policy: Policy,
        limits: DriverLimits,
        store: StateStore,
        outputs: Outputs,
        metrics: Metrics,
    ) -> None:
        self._policy = policy
        self._limits = limits
        self._store = store
        self._outputs = outputs
        self._metrics = metrics
        self._thresholds: dict[str | None, Thresholds] = {}
        self._partitions: dict[int, PartitionRuns] = {}

    @property
    def has_dirty(self) -> bool:
        """True when a checkpoint has runs to write."""
        return any(p.dirty for p in self._partitions.values())

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
        for msg in messages:
            runs = self.partition(msg.partition)
            touched.add(msg.partition)
            now = runs.advance(_ms(msg.timestamp))
            try:
                ev = self._parse(msg)
            except Rejected as exc:
                self._reject(msg, exc.reason, exc.detail, exc.run_id)
                continue
            key = msg.key
            assert key is not None  # _parse refuses a key that is not the run_id
            run = self._live(runs, msg.partition, key, now)
            state = run.state
            before = snapshot(state)
            try:
                applied = apply_event(state, ev, self._for(effective_agent(state, ev)))
            except Exception as exc:  # the dead-letter policy: an engine bug costs one event
                log.exception("engine failed on run %s event %s", ev.run_id, ev.event_id)
                run.state = before
                self._reject(msg, "engine_error", f"{type(exc).__name__}: {exc}", ev.run_id)
                continue
            if applied.is_duplicate:
                self._metrics.duplicates.inc()
                continue
            decisions = applied.decisions
            runs.mark_dirty(key, run)
            state.stamp_ms = now
            by_type[ev.type] += 1
            for decision in decisions:
                has_verdict |= self._publish(key, decision)
        for partition in touched:
            self._sweep(partition)
        for event_type, n in by_type.items():
            self._metrics.count_events(event_type, n)
        self.count_runs()
        return has_verdict

    def checkpoint(self) -> None:
        """Write each changed run's state to the store, then evict the idle ones from memory."""
        for partition, runs in self._partitions.items():
            for key, run in runs.dirty.items():
                self._store.put(partition, key, run.state.to_json().encode())
                run.is_dirty = False
            runs.dirty.clear()
            if runs.stream_ms is not None:
                runs.evict_idle(runs.stream_ms - self._limits.run_cache_idle_ms)
        self.count_runs()

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop everything held for partitions whose ownership changed (revoke or assign)."""
        for p in partitions:
            self._partitions.pop(p, None)
        self.count_runs()

    def count_runs(self) -> None:
        """Set the held (cached or store-only) and cached run gauges."""
        cached = sum(len(p.live) for p in self._partitions.values())
        cold = sum(len(p.cold) for p in self._partitions.values())
        self._metrics.runs_cached.set(cached)
        self._metrics.runs_active.set(cached + cold)

    def _parse(self, msg: Message) -> Event:
        """Decode and validate one message; its key must be its run_id."""
        obj = decode_object(msg.value, self._limits.max_message_bytes)
        try:
            ev = parse_event(obj)
        except InvalidEvent as exc:
            run_id = obj.get("run_id")
            run_id = run_id if isinstance(run_id, str) else None
            raise Rejected(exc.reason, exc.detail, run_id) from None
        if msg.key is None or msg.key != run_key(ev.run_id):
            raise Rejected(
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

    def _live(self, runs: PartitionRuns, partition: int, key: bytes, now: int | None) -> LiveRun:
        """The run's cached state, loaded on a miss; fresh when idle past the TTL."""
        run = runs.live.get(key)
        if run is None:
            runs.cold.pop(key, None)
            run = runs.live[key] = LiveRun(self._load(partition, key, now))
        elif self._is_idle(run.state.stamp_ms, now):
            run.state = RunState()
        return run

    def _load(self, partition: int, key: bytes, now: int | None) -> RunState:
        """A cache miss: the store's state (fresh when absent, unreadable or idle)."""
        raw = self._store.get(partition, key)
        if raw is None:
            return RunState()
        try:
            state = RunState.from_json(raw)
        except InvalidState:
            log.exception("dropping unreadable state of run %r", key)
            return RunState()
        return RunState() if self._is_idle(state.stamp_ms, now) else state

    def _for(self, agent_id: str | None) -> Thresholds:
        """Thresholds of an agent (cached; the policy is immutable)."""
        th = self._thresholds.get(agent_id)
        if th is None:
            th = self._thresholds[agent_id] = self._policy.for_agent(agent_id)
        return th

    def _publish(self, key: bytes, decision: Decision) -> bool:
        """Queue one decision for the control topic and count it; True for a verdict."""
        wire = decision.to_wire()
        self._outputs.decision(key, encode(wire))
        if decision.kind == "loop_event":
            self._metrics.count_detection(str(wire.get("detector")), str(wire.get("level")))
        elif decision.kind == "command":
            self._metrics.count_command(str(wire.get("command")))
        return decision.kind == "verdict"

    def _sweep(self, partition: int) -> None:
        """Delete runs idle longer than the TTL, at most every few minutes of stream time."""
        runs = self._partitions[partition]
        now = runs.stream_ms
        if now is None or now < runs.next_sweep_ms:
            return
        runs.next_sweep_ms = now + self._limits.sweep_every_ms
        expired = [k for k, run in runs.live.items() if self._is_idle(run.state.stamp_ms, now)]
        expired += [k for k, stamp_ms in runs.cold.items() if self._is_idle(stamp_ms, now)]
        runs.drop(expired)
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
        self._outputs.dead_letter(msg.key, encode(record))
        self._metrics.count_rejected(reason)
