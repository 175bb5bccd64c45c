"""The detection agent: decode ▸ engine ▸ persist ▸ publish ▸ count, one batch at a time.

Batches come from `stream.take_events`; each run's state is read once and written once per
batch. Outputs are buffered in Faust's producer; Faust flushes it before every offset commit,
so an event is committed only after its outputs were sent (at-least-once; the engine drops
redelivered events). A batch holding a verdict flushes at once, so a runtime waiting for a
verdict never waits for a batch to fill.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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

__all__ = ["RunProcessor", "install_agent"]

log = logging.getLogger(__name__)


def _bind(event: Any) -> None:
    """Make `event` Faust's current event for table access in this task.

    Faust routes table reads, writes and changelog records to the partition of the current
    event, a context variable it sets only inside the stream's own iterator task. A batch
    agent (`take_events`) runs in another task, so we bind each run's own event explicitly.
    """
    _current_event.set(weakref.ref(event))


@dataclass(slots=True)
class _Touched:
    """A run read in this batch: its state, its bytes at batch start, what was applied."""

    state: RunState
    original: bytes | None
    event: Any  # the run's newest Faust event in this batch (its partition owns the state)
    applied: list[Event] = field(default_factory=list)


class RunProcessor:
    """Applies batches of input events to the run-state table and publishes decisions."""

    def __init__(self, wiring: Wiring, settings: Settings, policy: Policy, metrics: Metrics):
        self._w = wiring
        self._policy = policy.with_channel_tools(settings.channel_tools)
        self._metrics = metrics
        self._max_bytes = settings.max_message_bytes
        self._prefix_bytes = settings.dead_letter_prefix_bytes
        self._ttl_ms = int(settings.run_idle_ttl_seconds * 1000)
        self._sweep_every_ms = max(1, min(self._ttl_ms // 4, 60_000))
        self._thresholds: dict[str | None, Thresholds] = {}
        self._stream_ms: dict[int, int] = {}  # partition -> max record timestamp seen
        self._index: dict[int, dict[bytes, int | None]] = {}  # partition -> run key -> stamp
        self._next_sweep: dict[int, int] = {}

    async def process(self, events: Sequence[Any]) -> None:
        """Process one batch of Faust events; never raises for bad input or engine bugs."""
        started = perf_counter()
        touched: dict[str, _Touched] = {}
        by_type: Counter[str] = Counter()
        last_of_partition: dict[int, Any] = {}
        has_verdict = False
        for event in events:
            msg = event.message
            partition = msg.partition
            last_of_partition[partition] = event
            now = self._advance(partition, msg.timestamp)
            try:
                ev = self._parse(msg)
            except Rejected as exc:
                self._reject(msg, exc.reason, exc.detail, exc.run_id)
                continue
            run = touched.get(ev.run_id)
            if run is None:
                _bind(event)
                run = touched[ev.run_id] = self._load(msg.key, now)
            run.event = event
            state = run.state
            if is_duplicate(state, ev):
                self._metrics.duplicates.inc()
                continue
            try:
                decisions = process_event(state, ev, self._for(effective_agent(state, ev)))
            except Exception as exc:
                log.exception("engine failed on run %s event %s", ev.run_id, ev.event_id)
                run.state = self._rebuild(run)
                self._reject(msg, "engine_error", f"{type(exc).__name__}: {exc}", ev.run_id)
                continue
            run.applied.append(ev)
            state.stamp_ms = now
            by_type[ev.type] += 1
            for decision in decisions:
                has_verdict |= self._publish(msg.key, decision.kind, decision.to_wire())
        self._persist(touched)
        self._sweep(last_of_partition)
        metrics = self._metrics
        for event_type, n in by_type.items():
            metrics.count_events(event_type, n)
        metrics.runs_active.set(sum(len(ix) for ix in self._index.values()))
        if has_verdict:
            await self._w.app.producer.flush()
        metrics.observe_batch(perf_counter() - started, len(events))

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop the idle index of partitions this worker no longer owns."""
        for p in partitions:
            self._index.pop(p, None)
            self._stream_ms.pop(p, None)
            self._next_sweep.pop(p, None)

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

    def _load(self, key: bytes, now: int | None) -> _Touched:
        """The run's state at batch start (fresh when absent, idle or unreadable)."""
        raw = self._w.table.get(key)
        if raw is None:
            return _Touched(RunState(), None, None)
        try:
            state = RunState.from_json(raw)
        except InvalidState:
            log.exception("dropping unreadable state of run %r", key)
            return _Touched(RunState(), None, None)
        if self._is_idle(state.stamp_ms, now):
            return _Touched(RunState(), None, None)
        return _Touched(state, raw, None)

    def _rebuild(self, run: _Touched) -> RunState:
        """The state before the failed event: batch-start state plus this batch's good events."""
        state = RunState.from_json(run.original) if run.original is not None else RunState()
        for ev in run.applied:
            process_event(state, ev, self._for(effective_agent(state, ev)))
        if run.applied:
            state.stamp_ms = run.state.stamp_ms
        return state

    def _for(self, agent_id: str | None) -> Thresholds:
        """Thresholds of an agent (cached; the policy is immutable)."""
        th = self._thresholds.get(agent_id)
        if th is None:
            th = self._thresholds[agent_id] = self._policy.for_agent(agent_id)
        return th

    def _publish(self, key: bytes, kind: str, wire: dict[str, Any]) -> bool:
        """Send one decision to the control topic and count it; True for a verdict."""
        self._w.control.send_soon(key=key, value=encode(wire))
        if kind == "loop_event":
            self._metrics.count_detection(str(wire.get("detector")), str(wire.get("level")))
        elif kind == "command":
            self._metrics.count_command(str(wire.get("command")))
        return kind == "verdict"

    def _persist(self, touched: dict[str, _Touched]) -> None:
        """Write each touched run's state once, on its own partition."""
        table = self._w.table
        index = self._index
        for run in touched.values():
            if not run.applied:
                continue  # only duplicates or failures: nothing to write
            _bind(run.event)
            key = run.event.message.key
            table[key] = run.state.to_json().encode()
            stamp = run.state.stamp_ms
            index.setdefault(run.event.message.partition, {})[key] = stamp

    def _sweep(self, last_of_partition: dict[int, Any]) -> None:
        """Delete runs idle longer than the TTL, at most every few minutes of stream time."""
        table = self._w.table
        for partition, event in last_of_partition.items():
            now = self._stream_ms.get(partition)
            if now is None or now < self._next_sweep.get(partition, 0):
                continue
            self._next_sweep[partition] = now + self._sweep_every_ms
            runs = self._index.get(partition)
            if not runs:
                continue
            expired = [k for k, stamp in runs.items() if self._is_idle(stamp, now)]
            if expired:
                _bind(event)
                for key in expired:
                    del runs[key]
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
    """Register the detection agent (concurrency 1: it owns the table) and rebalance hook."""
    app = wiring.app
    within = settings.batch_within_ms / 1000

    @app.agent(wiring.inputs, name="loopguard-detect", concurrency=1)
    async def detect(stream: Any) -> None:
        """Consume both input topics in batches."""
        async for events in stream.take_events(settings.batch_max_events, within=within):
            await processor.process(events)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Forget idle bookkeeping of partitions that moved to another worker."""
        revoked = args[0] if args else kwargs.get("revoked", ())
        processor.forget_partitions({tp.partition for tp in revoked})
