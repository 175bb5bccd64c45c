"""Fleet signals in a live worker (docs/fleet.md, "Replay and determinism"): the fleet topic,
the fleet task that owns its partitions, and what the detection agent sends it.

Each worker sends its tool_calls' contributions to the fleet topic keyed by signature, and
ticks of its event time to every fleet partition. The fleet task (one Faust agent) runs a
`FleetTask` (streams/processing/fleet.py: one fleet stage per fleet partition, fed in offset
order) and writes each signal change to the control topic and, as an input record, to every
partition of the tool-calls topic, where each worker applies it to its partition's firing set.

Everything goes out through the commit gate (streams/worker/commit_gate.py). Each fleet
partition's state is written to the run table at every checkpoint (`FleetCheckpoint`, under
`state_key(partition)`: the fleet topic is co-partitioned with the input topics, so the same
worker owns both; a large state as chunks under a manifest written last), and the commit
passes a fleet record only once a written state counts it: a restarted or rebalanced worker
loads the state and skips the records it already counts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.detectors.fleet.tools import top_tools
from loopguard_fleet.streams.processing.fleet import (
    FleetTask,
    observation_record,
    signal_key,
    tick_record,
    tool_use_record,
)
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import BatchOutbox
from loopguard_fleet.streams.wire.codec import encode
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter
from loopguard_fleet.streams.worker.app import Wiring
from loopguard_fleet.streams.worker.commit_gate import CommitGate
from loopguard_fleet.streams.worker.faust.batches import take_batches
from loopguard_fleet.streams.worker.faust.bulk import Bulk, messages_of
from loopguard_fleet.streams.worker.faust.internals import TableStore
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

__all__ = [
    "MANIFEST_PREFIX",
    "SNAPSHOT_MAX_BYTES",
    "TICK_EVERY_MS",
    "FleetCheckpoint",
    "FleetLink",
    "chunk_key",
    "install_fleet",
    "join_state",
    "next_slot",
    "split_state",
    "stale_chunks",
    "state_key",
]

log = logging.getLogger(__name__)

#: How far a worker's event time moves before it tells the fleet partitions (ticks bound the
#: signals' delay after the last contribution, resolutions included).
TICK_EVERY_MS: Final = 500
#: The largest fleet state written as one table record (a producer request is 1 MiB at
#: most). A larger one is split into chunks of this size under keys of their own, and the
#: state's key gets a manifest naming them, written last (`split_state`, `join_state`).
SNAPSHOT_MAX_BYTES: Final = 768 * 1024
#: What a manifest starts with: a state (`FleetTask.dump`, JSON) never starts with a NUL.
MANIFEST_PREFIX: Final = b"\x00loopguard-fleet-chunks:"


def state_key(partition: int) -> bytes:
    """The run-table key of a fleet partition's state: bytes no run id's UTF-8 key can hold
    (the partition is in it, so a store shared by partitions keeps them apart)."""
    return b"\xff\xfeloopguard-fleet-windows:%d" % partition


def chunk_key(partition: int, slot: int, index: int) -> bytes:
    """The run-table key of one chunk of a large fleet state (`split_state`)."""
    return state_key(partition) + b"\x1f%d\x1f%d" % (slot, index)


def next_slot(head: bytes | None) -> int:
    """The chunk slot (0 or 1) a new large state goes to: not the one the stored manifest
    `head` names, so that its chunks stay whole until the new manifest replaces it."""
    manifest = _manifest(head)
    return 1 - manifest["slot"] if manifest and manifest.get("slot") in (0, 1) else 0


def split_state(
    partition: int, slot: int, value: bytes, chunk_bytes: int = SNAPSHOT_MAX_BYTES
) -> list[tuple[bytes, bytes]]:
    """The table records that store a fleet partition's state, in write order: the state
    itself under `state_key` when it fits in one record; else its chunks under keys of this
    slot (`next_slot`), then the manifest under `state_key`. Written in this order to one
    changelog partition, a manifest is never read without its chunks, and the state it
    replaces stays whole in the other slot until it is written (`stale_chunks`). Two slots
    bound what a crash between the writes and the deletes can leave behind."""
    if len(value) <= chunk_bytes:
        return [(state_key(partition), value)]
    chunks = [value[i : i + chunk_bytes] for i in range(0, len(value), chunk_bytes)]
    out = [(chunk_key(partition, slot, i), c) for i, c in enumerate(chunks)]
    manifest = {
        "slot": slot,
        "chunks": len(chunks),
        "bytes": len(value),
        "sha256": hashlib.sha256(value).hexdigest(),
    }
    out.append((state_key(partition), MANIFEST_PREFIX + orjson.dumps(manifest)))
    return out


def _manifest(head: bytes | None) -> dict[str, Any] | None:
    """The manifest a state key holds, None when it holds a state (or nothing)."""
    if head is None or not head.startswith(MANIFEST_PREFIX):
        return None
    try:
        doc = orjson.loads(head[len(MANIFEST_PREFIX) :])
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _chunks_of(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """The (slot, chunk count) a manifest names, None when it is malformed."""
    slot, count = manifest.get("slot"), manifest.get("chunks")
    if slot not in (0, 1) or type(count) is not int or count < 0:
        return None
    return slot, count


def join_state(partition: int, get: Callable[[bytes], bytes | None]) -> bytes | None:
    """A fleet partition's stored state, from one record or from the chunks its manifest
    names; None (the partition starts afresh, logged) when a chunk is missing or differs."""
    head = get(state_key(partition))
    manifest = _manifest(head)
    if manifest is None:
        return head
    slot, count = _chunks_of(manifest) or (0, 0)
    parts = [get(chunk_key(partition, slot, i)) for i in range(count)]
    value = b"".join(p for p in parts if p is not None)
    if None in parts or hashlib.sha256(value).hexdigest() != manifest.get("sha256"):
        log.warning("fleet partition %d: chunked state not loaded (a chunk missing)", partition)
        return None
    return value


def stale_chunks(partition: int, head: bytes | None) -> list[bytes]:
    """The chunk keys of the manifest `head` (the state a write replaced), to delete once the
    new state is written."""
    manifest = _manifest(head)
    chunks = _chunks_of(manifest) if manifest else None
    if chunks is None:
        return []
    slot, count = chunks
    return [chunk_key(partition, slot, i) for i in range(count)]


@dataclass(slots=True)
class FleetLink:
    """The detection agent's side: sends a batch's contributions and event-time ticks."""

    stage: PartitionFleet
    topic: Any  # faust TopicT: the fleet topic
    partitions: int
    gate: CommitGate
    source_topic: str  # the tool-calls topic: contributions come from its events
    # At-least-once: the batch's fleet records go as one closed aiokafka batch per fleet
    # partition, as decisions do (Faust's per-record `send_soon` path cost most of what fleet
    # signals cost: docs/fleet.md, "Measured"); exactly-once: None, through the gate, each in
    # the transaction of the input partition it came from.
    outbox: BatchOutbox | None = None
    ticked_ms: int | None = None

    async def send(self) -> None:
        """Send the contributions held since the last batch, and a tick if time moved; the
        next checkpoint waits for their delivery."""
        stage = self.stage
        for source, obs, windows in stage.take():
            self._emit(source, obs.signature.encode(), encode(observation_record(obs, windows)))
        for source, use, windows in stage.take_uses():  # keyed by tool: one task judges a tool
            key = signal_key({"kind": "tool", "tool": use.tool})
            self._emit(source, key, encode(tool_use_record(use, windows)))
        latest, ticked = stage.latest_ms, self.ticked_ms
        if latest is not None and (ticked is None or latest >= ticked + TICK_EVERY_MS):
            self.ticked_ms = latest
            tick = encode(tick_record(latest))
            for p in range(self.partitions):
                self._emit(stage.latest_partition, b"tick", tick, p)
        if self.outbox is not None:
            await self.outbox.send(urgent=False)
            for fut in self.outbox.take_sent():
                self.gate.track(fut)

    def _emit(self, source: int, key: bytes, value: bytes, partition: int | None = None) -> None:
        if self.outbox is None:
            self.gate.send(self.topic, key, value, partition, source=(self.source_topic, source))
        elif partition is None:
            self.outbox.add(key, value)  # the partition Faust's default partitioner picks
        else:
            self.outbox.add_to(partition, key, value)


@dataclass(slots=True)
class FleetCheckpoint:
    """The fleet task's side of the checkpoint: each fleet partition's state, taken with the
    offset it reaches and written to the run table before the commit passes that offset."""

    task: FleetTask
    store: TableStore
    gate: CommitGate
    topic: str  # the fleet topic's name
    taken: dict[int, int] = field(default_factory=dict)  # partition -> offset of its last state

    def load(self, partition: int) -> None:
        """A fleet partition's state from the table, on its first record since assignment."""
        stored = join_state(partition, lambda key: self.store.get(partition, key))
        if self.task.load(partition, stored):
            self.taken[partition] = self.task.offsets[partition]

    def take_snapshots(self) -> Callable[[], None] | None:
        """The states of the partitions that read records since their last one (see
        `Snapshots` in streams/worker/commit_gate.py)."""
        states: list[tuple[int, int, bytes]] = []
        for partition, offset in self.task.offsets.items():
            if self.taken.get(partition) == offset:
                continue
            value = self.task.dump(partition)
            self.taken[partition] = offset
            self.gate.read(self.topic, partition, offset - 1)
            states.append((partition, offset, value))
        return (lambda: self._write(states)) if states else None

    def _write(self, states: list[tuple[int, int, bytes]]) -> None:
        """Write the states taken, but none of a partition forgotten meanwhile (revoked: its
        next owner's state is not this worker's to write)."""
        for partition, offset, value in states:
            if partition in self.task.offsets and self.taken.get(partition) == offset:
                head = self.store.get(partition, state_key(partition))
                for key, record in split_state(partition, next_slot(head), value):
                    self.store.put(partition, key, record)
                for key in stale_chunks(partition, head):
                    self.store.delete(partition, key)  # after the state that replaced them

    def untake_snapshots(self) -> None:
        """Take every partition's state again at the next checkpoint."""
        self.taken.clear()

    def forget(self, partitions: set[int]) -> None:
        """Drop what is held for fleet partitions whose ownership changed."""
        self.task.forget(partitions)
        for p in partitions:
            self.taken.pop(p, None)


def install_fleet(
    wiring: Wiring,
    settings: Settings,
    fleet: FleetSettings,
    stage: PartitionFleet,
    gate: CommitGate,
    store: TableStore,
    metrics: Metrics,
    batched: bool = True,
) -> tuple[FleetLink, FleetCheckpoint]:
    """Declare the fleet topic and register the fleet task; the link the agent sends with, and
    the task's side of the checkpoint (`gate` and `store`: the detection agent's; `batched`:
    the link sends in closed batches, False under exactly-once)."""
    app = wiring.app
    raw = RawSchema()
    name = fleet_topic_of(settings.app_id)
    topic = app.topic(name, partitions=settings.partitions, schema=raw)
    tool_calls = app.topic(settings.topic_tool_calls, partitions=settings.partitions, schema=raw)
    outbox = BatchOutbox(app, name, settings.partitions) if batched else None
    link = FleetLink(stage, topic, settings.partitions, gate, settings.topic_tool_calls, outbox)
    task = FleetTask(fleet)
    checkpoint = FleetCheckpoint(task, store, gate, name)

    def publish(source: int, decision_payload: dict[str, Any]) -> None:
        """A signal change, made from fleet partition `source`'s records."""
        key, value = signal_key(decision_payload), encode(decision_payload)
        at = (name, source)
        gate.send(wiring.control, key, value, source=at)
        if decision_payload.get("kind") == "tool":  # tool health decides no call: control only
            return
        for p in range(settings.partitions):  # each input partition applies it in its order
            gate.send(tool_calls, key, value, p, source=at)

    @app.agent(topic, name="loopguard-fleet", concurrency=1)
    async def fleet_task(stream: Any) -> None:
        """Count contributions per fleet partition; publish each signal change."""
        # Faust's own per-event iteration does not know this worker's acked-offset books:
        # batches as the detection agent takes them (streams/worker/faust/batches.py).
        async for events in take_batches(stream, settings.batch_max_events):
            for event in events:  # the table (each partition's state) is routed through them
                store.anchor(event.message.partition, event.event if type(event) is Bulk else event)
            for msg in messages_of(events):
                handle(msg)
            count()

    def handle(msg: Any) -> None:
        """One fleet record, in its partition's offset order."""
        if task.needs(msg.partition):
            checkpoint.load(msg.partition)
        try:
            changes = task.feed(msg.partition, orjson.loads(msg.value), msg.offset)
        except orjson.JSONDecodeError:
            changes = None
        if changes is None:
            origin = Origin(msg.topic, msg.partition, msg.offset, None, msg.key)
            record = dead_letter(
                origin, msg.value, "invalid_fleet_record", "not a fleet record",
                prefix_bytes=settings.dead_letter_prefix_bytes,
            )  # fmt: skip
            gate.send(wiring.dead_letter, msg.key, encode(record), source=(name, msg.partition))
        else:
            for d in changes:
                publish(msg.partition, d.to_wire())
                counter = (
                    metrics.fleet_tool_signals if "kind" in d.payload else metrics.fleet_signals
                )
                counter.labels(state=d.payload["state"]).inc()

    def count() -> None:
        """The task's firing signatures and what it dropped since the last batch."""
        metrics.fleet_firing.set(task.firing)
        if fleet.tool_health.enabled:
            metrics.fleet_tools_firing.set(task.tools_firing)
            metrics.set_tool_ratios(top_tools(task.tool_ratios()))
        late, full = task.take_dropped()  # a state loaded again is not counted again
        metrics.fleet_dropped.labels(reason="late").inc(late)
        metrics.fleet_dropped.labels(reason="full").inc(full)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def forget_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop the state of fleet partitions that may move: the next owner loads it."""
        revoked = args[0] if args else kwargs.get("revoked", ())
        checkpoint.forget({tp.partition for tp in revoked if tp.topic == name})

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def forget_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Load the state of assigned fleet partitions again: the table's is authoritative and
        their records are read again from the committed offset."""
        assigned = args[0] if args else kwargs.get("assigned", ())
        checkpoint.forget({tp.partition for tp in assigned if tp.topic == name})

    return link, checkpoint
