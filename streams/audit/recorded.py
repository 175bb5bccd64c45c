"""Audit of a live worker's fleet decisions from its recorded topics (docs/fleet.md, "Replay
and determinism"): the same processing core over the same records in the same per-partition
order gives the same control messages, early blocks and fleet signals included.

- `replay_recorded_inputs`: the input topics' records (the tool-calls topic holds the fleet
  task's `fleet_signal` records too), each partition in offset order, through a `RunDriver`
  whose fleet stage applies those records per partition, as the worker's does;
- `recompute_fleet_signals`: the fleet topic's records through the fleet task's core.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore, OfflineMetrics
from loopguard_fleet.streams.processing.driver import DriverLimits, Message, RunDriver
from loopguard_fleet.streams.processing.fleet import FleetTask
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.wire.codec import encode

__all__ = ["recompute_fleet_signals", "replay_recorded_inputs"]


def _in_partition_order(records: Iterable[Message]) -> list[Message]:
    """Each partition's records in offset order (partitions one after the other: runs and
    firing sets are per partition, so their interleaving changes nothing)."""
    return sorted(records, key=lambda m: (m.partition, m.topic, m.offset))


def replay_recorded_inputs(
    policy: Policy, records: Iterable[Message], max_message_bytes: int = 1_048_576
) -> list[bytes]:
    """The control messages the worker publishes for recorded input records."""
    outputs = MemoryOutputs()
    stage = PartitionFleet(policy.fleet) if policy.fleet.enabled else None
    limits = DriverLimits(max_message_bytes, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    driver = RunDriver(policy, limits, MemoryStore(), outputs, OfflineMetrics(), fleet=stage)
    for record in _in_partition_order(records):  # one by one: a partition's order is kept
        driver.apply([record])
    return outputs.decisions


def recompute_fleet_signals(settings: FleetSettings, records: Iterable[Message]) -> list[bytes]:
    """The `fleet_signal` messages the fleet task publishes for recorded fleet records
    (malformed ones skipped, as the task dead-letters them)."""
    task = FleetTask(settings)
    out: list[bytes] = []
    for record in _in_partition_order(records):
        try:
            changes = task.feed(record.partition, orjson.loads(record.value or b""))
        except orjson.JSONDecodeError:
            changes = None
        out += [encode(d.to_wire()) for d in changes or ()]
    return out
