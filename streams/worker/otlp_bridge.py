"""The live OTLP bridge (docs/audit.md, "Live: the OTLP bridge"): a Faust agent of the worker
reads the OTLP traces topic, turns its tool spans into wire events (`SpanBridge`, the core the
offline `--input-format otlp` uses) and publishes them keyed by run id on the tool-calls
topic, where the detection agent decides them as any runtime's.

An agent of the worker, not a separate role: it joins the worker's consumer group and its
commit, so the OTLP topic's offsets go through the same commit gate
(streams/worker/commit_gate.py) as the fleet task's: an offset is committed only once what was
published from it is delivered. One `SpanBridge` per OTLP partition, fed in offset order:
the same topic gives the same events. A record is committed only once none of its spans is
held any more (`HeldOffsets`): a crash re-reads the records whose spans the reorder window
still held.

No decision reads the wall clock: a partition that holds spans and read no record for a tick
gets a watermark record (`watermark_record`, the tick's time) written onto it, and its bridge
releases when it reads that record back, so a replay of the topic decides alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.otlp.core import SpanBridge, Step, watermark_record
from loopguard_fleet.streams.otlp.options import otlp_options
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.wire.codec import encode
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter
from loopguard_fleet.streams.worker.app import Wiring
from loopguard_fleet.streams.worker.commit_gate import CommitGate
from loopguard_fleet.streams.worker.faust.batches import take_batches
from loopguard_fleet.streams.worker.faust.bulk import messages_of
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

__all__ = ["TICK_S", "HeldOffsets", "install_otlp_bridge"]

#: How often a quiet partition holding spans gets a watermark record, so a run's last spans
#: are released about a window after they started.
TICK_S: Final = 0.5


@dataclass(slots=True)
class HeldOffsets:
    """One OTLP partition's records whose spans are still held: how far a commit may go."""

    spans: dict[tuple[str, str], int] = field(default_factory=dict)  # (run, span) -> offset
    count: dict[int, int] = field(default_factory=dict)  # offset -> spans held
    next_offset: int | None = None  # after the last record read

    def note(self, offset: int | None, step: Step) -> None:
        """Account a step: the record at `offset` (None: a tick) and what it held and released."""
        if offset is not None:
            self.next_offset = offset + 1
            for span in step.held:
                self.spans[span] = offset
                self.count[offset] = self.count.get(offset, 0) + 1
        for span in step.released:
            held_at = self.spans.pop(span, None)
            if held_at is not None:
                left = self.count[held_at] - 1
                if left:
                    self.count[held_at] = left
                else:
                    del self.count[held_at]

    def commit_below(self) -> int | None:
        """The first offset a commit may not pass (None: nothing read yet)."""
        if self.count:
            return min(self.count)
        return self.next_offset


def install_otlp_bridge(
    wiring: Wiring,
    settings: Settings,
    gate: CommitGate,
    metrics: Metrics,
) -> None:
    """Register the bridge agent on `settings.topic_otlp_spans` and its wall-clock tick.
    `gate`: the detection agent's, so that commits pass only released, delivered records."""
    app = wiring.app
    raw = RawSchema()
    source = settings.topic_otlp_spans
    assert source is not None, "the bridge is off"
    otlp = app.topic(source, schema=raw)
    tool_calls = app.topic(settings.topic_tool_calls, partitions=settings.partitions, schema=raw)
    options = otlp_options(settings)  # the LOOPGUARD_OTLP_* settings, as replay's flags
    bridges: dict[int, tuple[SpanBridge, HeldOffsets]] = {}
    quiet: set[int] = set()  # partitions that read no record since the last tick

    def bridge_of(partition: int) -> tuple[SpanBridge, HeldOffsets]:
        if partition not in bridges:
            bridges[partition] = (
                SpanBridge.of_options(options, settings.max_message_bytes),
                HeldOffsets(),
            )
        return bridges[partition]

    def publish(partition: int, step: Step, origin: Origin, value: bytes | None) -> None:
        """Send a step's events and dead-letter its refusals; move the commit limit."""
        metrics.count_otlp_ignored(step.skipped, step.duplicates)
        at = (source, partition)
        for key, event in step.events:
            gate.send(tool_calls, key, event, source=at)
        for refusal in step.refused:
            record = dead_letter(
                origin,
                value if refusal.whole_message else None,
                refusal.reason,
                refusal.detail,
                prefix_bytes=settings.dead_letter_prefix_bytes,
                run_id=refusal.run_id,
            )
            gate.send(wiring.dead_letter, origin.key, encode(record), source=at)
            metrics.count_rejected(refusal.reason)
        below = bridges[partition][1].commit_below()
        if below is not None:
            gate.read(source, partition, below - 1)

    @app.agent(otlp, name="loopguard-otlp-bridge", concurrency=1)
    async def otlp_bridge(stream: Any) -> None:
        """Feed each OTLP partition's payloads to its bridge, in offset order."""
        async for events in take_batches(stream, settings.batch_max_events):
            for msg in messages_of(events):
                bridge, held = bridge_of(msg.partition)
                quiet.discard(msg.partition)
                step = bridge.feed(msg.value)
                held.note(msg.offset, step)
                origin = Origin(msg.topic, msg.partition, msg.offset, None, msg.key)
                publish(msg.partition, step, origin, msg.value)

    @app.timer(interval=TICK_S)  # type: ignore[untyped-decorator]  # Faust's timer decorator is untyped
    async def otlp_tick() -> None:
        """Write a watermark record onto each quiet partition that holds spans: read back in
        offset order, it releases them, live and in a replay alike."""
        marker = watermark_record(time.time_ns())
        for partition, (bridge, _) in bridges.items():
            if partition in quiet and bridge.order.held:
                gate.send(otlp, None, marker, partition=partition, source=(source, partition))
            quiet.add(partition)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def forget_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop the held spans of partitions that move: their records were not committed,
        so the next owner reads them again."""
        revoked = args[0] if args else kwargs.get("revoked", ())
        for tp in revoked:
            if tp.topic == source:
                bridges.pop(tp.partition, None)
                quiet.discard(tp.partition)
