"""The detection agent: decode ▸ engine ▸ publish ▸ count per batch; persist per checkpoint.

Live `RunState`s stay in memory per partition while the partition is assigned (the cache is
authoritative then, and is dropped on every revoke and assign, so a rebalance never leaves a
stale copy); the table is read only on a miss. A run quiet for `run_cache_idle_seconds` of
stream time leaves the cache once a checkpoint has written it (only its key and last event
time stay, for the idle sweep): memory follows the busy runs, not every run held until its
TTL. A run's state is written to the table once per checkpoint, and a checkpoint runs right
before every offset commit (`before_commit`): outputs acknowledged ▸ states written ▸
(Faust) changelog flushed ▸ offsets committed. So an event's offset is committed only after
its outputs and the state it produced were sent, and a redelivered event is dropped by the
engine (at-least-once). Decisions leave once per batch as one produce batch per partition,
so a verdict never waits for a batch to fill or a linger.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from time import perf_counter
from typing import Any

from faust.streams import _current_event

from config import Policy
from config.settings import Settings
from detectors import (
    Event,
    InvalidEvent,
    InvalidState,
    RunState,
    Thresholds,
    effective_agent,
    is_duplicate,
    parse_event,
    process_event,
)
from streams.app import Wiring
from streams.codec import Rejected, decode_object, encode
from streams.deadletter import Origin, dead_letter
from streams.metrics import Metrics
from streams.outbox import FaustOutbox, Outbox

__all__ = ["RunProcessor", "install_agent"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Live:
    """A cached run: its live state; `is_dirty` until the next checkpoint writes it."""

    state: RunState
    is_dirty: bool = False


_STATE_FIELDS = tuple(f.name for f in fields(RunState))


def _snapshot(state: RunState) -> RunState:
    """A copy the engine's in-place update cannot reach (containers copied, values shared).

    Engine values inside (records, observations) are frozen, so one level suffices; taken
    before each event so that an engine bug costs that event only (~2 µs, no serialising).
    """
    values = {}
    for name in _STATE_FIELDS:
        value = getattr(state, name)
        if isinstance(value, list | dict):
            value = value.copy()
        values[name] = value
    return RunState(**values)


class RunProcessor:
    """Applies batches of input events to cached run states; persists them at checkpoints."""

    def __init__(
        self,
        wiring: Wiring,
        settings: Settings,
        policy: Policy,
        metrics: Metrics,
        outbox: Outbox | None = None,
    ):
        self._w = wiring
        self._outbox: Outbox = outbox if outbox is not None else FaustOutbox(wiring)
        self._policy = policy.with_channel_tools(settings.channel_tools)
        self._metrics = metrics
        self._max_bytes = settings.max_message_bytes
        self._prefix_bytes = settings.dead_letter_prefix_bytes
        self._ttl_ms = int(settings.run_idle_ttl_seconds * 1000)
        self._sweep_every_ms = max(1, min(self._ttl_ms // 4, 60_000))
        self._cache_idle_ms = int(settings.run_cache_idle_seconds * 1000)
        self._thresholds: dict[str | None, Thresholds] = {}
        self._stream_ms: dict[int, int] = {}  # partition -> max record timestamp seen
        self._runs: dict[int, dict[bytes, _Live]] = {}  # partition -> run key -> live run
        # partition -> run key -> last event time (ms) of runs held in the table only
        self._cold: dict[int, dict[bytes, int | None]] = {}
        self._dirty: dict[int, dict[bytes, _Live]] = {}  # partition -> runs to write
        self._anchor: dict[int, Any] = {}  # partition -> a Faust event of it (table routing)
        self._next_sweep: dict[int, int] = {}
        self._lock = asyncio.Lock()  # a batch and a checkpoint never interleave

    async def process(self, events: Sequence[Any]) -> None:
        """Process one batch of Faust events; never raises for bad input or engine bugs."""
        async with self._lock:
            started = perf_counter()
            has_verdict = self._apply(events)
            await self._outbox.send(urgent=has_verdict)
            self._metrics.observe_batch(perf_counter() - started, len(events))

    async def before_commit(self) -> None:
        """Checkpoint: outputs delivered, then every changed run's state written once."""
        async with self._lock:
            if not any(self._dirty.values()):
                return
            await self._outbox.wait_delivered()
            self.checkpoint()
            # Table writes queue in Faust's producer buffer, whose own flush gives up after
            # 0.1 s without a send; drain it fully so no offset is committed ahead of its state.
            buffer = self._w.app.producer.buffer
            while buffer.size:
                await buffer.flush()

    def checkpoint(self) -> None:
        """Write each changed run's state to the table, then evict the idle ones from the cache."""
        table = self._w.table
        for partition, dirty in self._dirty.items():
            if not dirty:
                continue
            token = _current_event.set(weakref.ref(self._anchor[partition]))
            try:
                for key, run in dirty.items():
                    table[key] = run.state.to_json().encode()
                    run.is_dirty = False
            finally:
                _current_event.reset(token)
            dirty.clear()
        for partition in self._runs:
            self._evict_idle(partition)
        self._count_runs()

    def _evict_idle(self, partition: int) -> None:
        """Move written runs quiet for the cache idle time (stream time) out of the cache."""
        now = self._stream_ms.get(partition)
        runs = self._runs[partition]
        if now is None or not runs:
            return
        horizon = now - self._cache_idle_ms
        idle = [
            key
            for key, run in runs.items()
            if not run.is_dirty and run.state.stamp_ms is not None and run.state.stamp_ms <= horizon
        ]
        if idle:
            cold = self._cold.setdefault(partition, {})
            for key in idle:
                cold[key] = runs.pop(key).state.stamp_ms

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop everything cached for partitions whose ownership changed (revoke or assign)."""
        for p in partitions:
            self._runs.pop(p, None)
            self._cold.pop(p, None)
            self._dirty.pop(p, None)
            self._anchor.pop(p, None)
            self._stream_ms.pop(p, None)
            self._next_sweep.pop(p, None)
        self._count_runs()

    def _count_runs(self) -> None:
        """Set the held (cached or table-only) and cached run gauges."""
        cached = sum(len(r) for r in self._runs.values())
        self._metrics.runs_cached.set(cached)
        self._metrics.runs_active.set(cached + sum(len(c) for c in self._cold.values()))

    def _apply(self, events: Sequence[Any]) -> bool:
        """Apply a batch to the cached states; True when it produced a verdict."""
        by_type: Counter[str] = Counter()
        has_verdict = False
        touched: set[int] = set()
        runs_of = self._runs
        for event in events:
            msg = event.message
            partition = msg.partition
            if partition not in touched:
                touched.add(partition)
                self._anchor[partition] = event
                runs_of.setdefault(partition, {})
                self._dirty.setdefault(partition, {})
            now = self._advance(partition, msg.timestamp)
            try:
                ev = self._parse(msg)
            except Rejected as exc:
                self._reject(msg, exc.reason, exc.detail, exc.run_id)
                continue
            key = msg.key
            runs = runs_of[partition]
            run = runs.get(key)
            if run is None:
                cold = self._cold.get(partition)
                if cold:
                    cold.pop(key, None)
                run = runs[key] = self._load(event, now)
            elif self._is_idle(run.state.stamp_ms, now):
                run.state = RunState()
            state = run.state
            if is_duplicate(state, ev):
                self._metrics.duplicates.inc()
                continue
            before = _snapshot(state)
            try:
                decisions = process_event(state, ev, self._for(effective_agent(state, ev)))
            except Exception as exc:
                log.exception("engine failed on run %s event %s", ev.run_id, ev.event_id)
                run.state = before
                self._reject(msg, "engine_error", f"{type(exc).__name__}: {exc}", ev.run_id)
                continue
            if not run.is_dirty:
                run.is_dirty = True
                self._dirty[partition][key] = run
            state.stamp_ms = now
            by_type[ev.type] += 1
            for decision in decisions:
                has_verdict |= self._publish(key, decision.kind, decision.to_wire())
        for partition in touched:
            self._sweep(partition)
        metrics = self._metrics
        for event_type, n in by_type.items():
            metrics.count_events(event_type, n)
        self._count_runs()
        return has_verdict

    def _parse(self, msg: Any) -> Event:
        """Decode and validate one message; its Kafka key must be its run_id."""
        obj = decode_object(msg.value, self._max_bytes)
        try:
            ev = parse_event(obj)
        except InvalidEvent as exc:
            run_id = obj.get("run_id")
            run_id = run_id if isinstance(run_id, str) else None
            raise Rejected(exc.reason, exc.detail, run_id) from None
        if msg.key is None or msg.key != ev.run_id.encode():
            raise Rejected(
                "key_mismatch",
                f"the Kafka key must be the run_id {ev.run_id!r}, got {msg.key!r}"[:300],
                ev.run_id,
            )
        return ev

    def _advance(self, partition: int, timestamp_s: float | None) -> int | None:
        """Stream time of a partition: the largest record timestamp seen (ms)."""
        current = self._stream_ms.get(partition)
        if timestamp_s is None:
            return current
        ts = int(timestamp_s * 1000)
        if current is None or ts > current:
            self._stream_ms[partition] = current = ts
        return current

    def _is_idle(self, stamp_ms: int | None, now: int | None) -> bool:
        """True when a run saw no event for longer than the idle TTL, in stream time."""
        return stamp_ms is not None and now is not None and now - stamp_ms > self._ttl_ms

    def _load(self, event: Any, now: int | None) -> _Live:
        """A cache miss: the table's state (fresh when absent, unreadable or idle)."""
        _current_event.set(weakref.ref(event))  # Faust routes table reads by current event
        key = event.message.key
        raw = self._w.table.get(key)
        if raw is None:
            return _Live(RunState())
        try:
            state = RunState.from_json(raw)
        except InvalidState:
            log.exception("dropping unreadable state of run %r", key)
            return _Live(RunState())
        return _Live(RunState() if self._is_idle(state.stamp_ms, now) else state)

    def _for(self, agent_id: str | None) -> Thresholds:
        """Thresholds of an agent (cached; the policy is immutable)."""
        th = self._thresholds.get(agent_id)
        if th is None:
            th = self._thresholds[agent_id] = self._policy.for_agent(agent_id)
        return th

    def _publish(self, key: bytes, kind: str, wire: dict[str, Any]) -> bool:
        """Queue one decision for the control topic and count it; True for a verdict."""
        self._outbox.add(key, encode(wire))
        if kind == "loop_event":
            self._metrics.count_detection(str(wire.get("detector")), str(wire.get("level")))
        elif kind == "command":
            self._metrics.count_command(str(wire.get("command")))
        return kind == "verdict"

    def _sweep(self, partition: int) -> None:
        """Delete runs idle longer than the TTL, at most every few minutes of stream time."""
        now = self._stream_ms.get(partition)
        if now is None or now < self._next_sweep.get(partition, 0):
            return
        self._next_sweep[partition] = now + self._sweep_every_ms
        runs = self._runs.get(partition, {})
        cold = self._cold.get(partition, {})
        expired = [k for k, run in runs.items() if self._is_idle(run.state.stamp_ms, now)]
        expired += [k for k, stamp_ms in cold.items() if self._is_idle(stamp_ms, now)]
        if not expired:
            return
        table = self._w.table
        dirty = self._dirty.get(partition, {})
        _current_event.set(weakref.ref(self._anchor[partition]))
        for key in expired:
            runs.pop(key, None)
            cold.pop(key, None)
            dirty.pop(key, None)
            if key in table:
                del table[key]

    def _reject(self, msg: Any, reason: str, detail: str, run_id: str | None) -> None:
        """Dead-letter one message and count it."""
        origin = Origin(msg.topic, msg.partition, msg.offset, _ms(msg.timestamp), msg.key)
        record = dead_letter(
            origin, msg.value, reason, detail, prefix_bytes=self._prefix_bytes, run_id=run_id
        )
        self._w.dead_letter.send_soon(key=msg.key, value=encode(record))
        self._metrics.count_rejected(reason)


def _ms(timestamp_s: float | None) -> int | None:
    """Faust's record timestamp (seconds) as integer milliseconds."""
    return None if timestamp_s is None else int(timestamp_s * 1000)


def install_agent(wiring: Wiring, processor: RunProcessor, settings: Settings) -> None:
    """Register the detection agent (concurrency 1: it owns the table) and its hooks."""
    app = wiring.app
    within = settings.batch_within_ms / 1000
    app.before_commit.append(processor.before_commit)
    # A checkpoint queues one changelog record per changed run (~1,000 on workload P) at once;
    # with Faust's default (100) the conductor would stop delivering input until they drain.
    app.producer.buffer.max_messages = max(10_000, 4 * settings.batch_max_events)

    @app.agent(wiring.inputs, name="loopguard-detect", concurrency=1)
    async def detect(stream: Any) -> None:
        """Consume both input topics in batches."""
        async for events in stream.take_events(settings.batch_max_events, within=within):
            await processor.process(events)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop the cache of partitions that may move to another worker."""
        revoked = args[0] if args else kwargs.get("revoked", ())
        processor.forget_partitions({tp.partition for tp in revoked})

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop any cache of newly assigned partitions: their table state is authoritative."""
        assigned = args[0] if args else kwargs.get("assigned", ())
        processor.forget_partitions({tp.partition for tp in assigned})
