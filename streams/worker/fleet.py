"""Fleet signals in a live worker (docs/fleet.md, "Replay and determinism"): the fleet topic,
the fleet task that owns its partitions, and what the detection agent sends it.

Each worker sends its tool_calls' contributions to the fleet topic keyed by signature, and
ticks of its event time to every fleet partition. The fleet task (one Faust agent) runs a
`FleetTask` (streams/processing/fleet.py: one fleet stage per fleet partition, fed in offset
order) and writes each signal change to the control topic and, as an input record, to every
partition of the tool-calls topic, where each worker applies it to its partition's firing set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.streams.processing.fleet import FleetTask, observation_record, tick_record
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.wire.codec import encode
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter
from loopguard_fleet.streams.worker.app import Wiring
from loopguard_fleet.streams.worker.faust.batches import take_batches
from loopguard_fleet.streams.worker.faust.bulk import messages_of
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

__all__ = ["TICK_EVERY_MS", "FleetLink", "install_fleet"]

log = logging.getLogger(__name__)

#: How far a worker's event time moves before it tells the fleet partitions (ticks bound the
#: signals' delay after the last contribution, resolutions included).
TICK_EVERY_MS: Final = 500


@dataclass(slots=True)
class FleetLink:
    """The detection agent's side: sends a batch's contributions and event-time ticks."""

    stage: PartitionFleet
    topic: Any  # faust TopicT: the fleet topic
    partitions: int
    ticked_ms: int | None = None

    def send(self) -> None:
        """Queue the contributions held since the last batch, and a tick if time moved."""
        for obs in self.stage.take():
            self.topic.send_soon(key=obs.signature.encode(), value=encode(observation_record(obs)))
        latest = self.stage.latest_ms
        if latest is None or (
            self.ticked_ms is not None and latest < self.ticked_ms + TICK_EVERY_MS
        ):
            return
        self.ticked_ms = latest
        tick = encode(tick_record(latest))
        for p in range(self.partitions):
            self.topic.send_soon(key=b"tick", value=tick, partition=p)


def install_fleet(
    wiring: Wiring,
    settings: Settings,
    fleet: FleetSettings,
    stage: PartitionFleet,
    note_read: Callable[[str, int, int], None],
    metrics: Metrics,
) -> FleetLink:
    """Declare the fleet topic and register the fleet task; the link the agent sends with.
    `note_read`: the detection agent's, so that the commit passes what the task processed."""
    app = wiring.app
    raw = RawSchema()
    topic = app.topic(fleet_topic_of(settings.app_id), partitions=settings.partitions, schema=raw)
    tool_calls = app.topic(settings.topic_tool_calls, partitions=settings.partitions, schema=raw)
    link = FleetLink(stage, topic, settings.partitions)
    task = FleetTask(fleet)
    dropped = [0, 0]  # (late, full) as last counted

    def publish(decision_payload: dict[str, Any]) -> None:
        key = str(decision_payload["signature"]).encode()
        value = encode(decision_payload)
        wiring.control.send_soon(key=key, value=value)
        for p in range(settings.partitions):  # each input partition applies it in its order
            tool_calls.send_soon(key=key, value=value, partition=p)

    @app.agent(topic, name="loopguard-fleet", concurrency=1)
    async def fleet_task(stream: Any) -> None:
        """Count contributions per fleet partition; publish each signal change."""
        # Faust's own per-event iteration does not know this worker's acked-offset books:
        # batches as the detection agent takes them (streams/worker/faust/batches.py).
        async for events in take_batches(stream, settings.batch_max_events):
            for msg in messages_of(events):
                handle(msg)
            count()

    def handle(msg: Any) -> None:
        """One fleet record, in its partition's offset order."""
        try:
            changes = task.feed(msg.partition, orjson.loads(msg.value))
        except orjson.JSONDecodeError:
            changes = None
        if changes is None:
            origin = Origin(msg.topic, msg.partition, msg.offset, None, msg.key)
            record = dead_letter(
                origin, msg.value, "invalid_fleet_record", "not a fleet record",
                prefix_bytes=settings.dead_letter_prefix_bytes,
            )  # fmt: skip
            wiring.dead_letter.send_soon(key=msg.key, value=encode(record))
        else:
            for d in changes:
                publish(d.to_wire())
                metrics.fleet_signals.labels(state=d.payload["state"]).inc()
        note_read(msg.topic, msg.partition, msg.offset)

    def count() -> None:
        """The task's firing signatures and what it dropped since the last batch."""
        metrics.fleet_firing.set(task.firing)
        late, full = task.dropped
        metrics.fleet_dropped.labels(reason="late").inc(late - dropped[0])
        metrics.fleet_dropped.labels(reason="full").inc(full - dropped[1])
        dropped[:] = [late, full]

    return link
