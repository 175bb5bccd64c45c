"""A fleet partition's state larger than one table record (docs/fleet.md, "Restarts and
rebalances keep the fleet counts"): written as chunks under a manifest written last, so a
partial write is never loaded, and read back whole by the next owner of the partition."""

from __future__ import annotations

import orjson

from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.streams.processing.fleet import FleetTask
from loopguard_fleet.streams.worker.commit_gate import CommitGate
from loopguard_fleet.streams.worker.fleet import (
    SNAPSHOT_MAX_BYTES,
    FleetCheckpoint,
    chunk_key,
    join_state,
    next_slot,
    split_state,
    stale_chunks,
    state_key,
)

T0 = 1_764_000_000_000
SETTINGS = FleetSettings(enabled=True, window_seconds=60, min_runs=3)


class DictStore:
    """The run table as a dict per partition, writes in order (a changelog's order)."""

    def __init__(self) -> None:
        self.data: dict[tuple[int, bytes], bytes] = {}
        self.log: list[tuple[str, bytes]] = []

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.data.get((partition, key))

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self.data[partition, key] = value
        self.log.append(("put", key))

    def delete(self, partition: int, key: bytes) -> None:
        self.data.pop((partition, key), None)
        self.log.append(("delete", key))


async def no_drain() -> None:
    """Nothing to drain: the checkpoint's writes are what the test reads."""


def big_task(signatures: int) -> FleetTask:
    """A fleet task whose partition 0 counts this many single-run signatures."""
    task = FleetTask(SETTINGS)
    for i in range(signatures):
        record = {
            "type": "fleet_observation", "signature": f"{i:032x}", "tool": "read",
            "run_id": f"run-{i}", "agent_id": f"agent-{i % 50}", "ts": T0 + i, "streak": 1,
            "is_failure": True,
        }  # fmt: skip
        task.feed(0, record, i)
    return task


def test_a_state_that_fits_is_one_record_and_a_large_one_chunks_with_the_manifest_last() -> None:
    assert split_state(3, 1, b"{}") == [(state_key(3), b"{}")]
    value = bytes(range(256)) * 10
    records = split_state(3, 1, value, chunk_bytes=1000)
    assert [k for k, _ in records] == [chunk_key(3, 1, i) for i in range(3)] + [state_key(3)]
    stored = dict(records)
    assert join_state(3, stored.get) == value


def test_a_partial_write_is_never_loaded() -> None:
    old, new = b"o" * 2500, b"n" * 2600
    stored = dict(split_state(0, next_slot(None), old, chunk_bytes=1000))
    head = stored[state_key(0)]
    slot = next_slot(head)
    assert slot == 1  # the other slot: the stored state's chunks stay whole meanwhile
    # The new state's chunks are written, its manifest not yet: the old state loads whole.
    stored.update(split_state(0, slot, new, chunk_bytes=1000)[:-1])
    assert join_state(0, stored.get) == old
    stored.update(split_state(0, slot, new, chunk_bytes=1000)[-1:])
    assert join_state(0, stored.get) == new
    # The replaced state's chunks go once the new manifest is written.
    assert stale_chunks(0, head) == [chunk_key(0, 0, i) for i in range(3)]
    assert next_slot(stored[state_key(0)]) == 0
    del stored[chunk_key(0, 1, 1)]
    assert join_state(0, stored.get) is None  # a chunk missing: start afresh, never half


def test_a_checkpoint_writes_a_large_fleet_state_that_a_new_owner_loads_whole() -> None:
    task = big_task(6_000)  # about 1 MB of state: over one record's budget
    assert len(task.dump(0)) > SNAPSHOT_MAX_BYTES
    store, gate = DictStore(), CommitGate(no_drain)
    checkpoint = FleetCheckpoint(task, store, gate, "lg-fleet")  # type: ignore[arg-type]
    write = checkpoint.take_snapshots()
    assert write is not None  # the partition's commit can pass its records
    write()
    puts = [k for op, k in store.log if op == "put"]
    assert puts[-1] == state_key(0) and len(puts) == 3  # two chunks, then the manifest
    restored = FleetTask(SETTINGS)
    FleetCheckpoint(restored, store, gate, "lg-fleet").load(0)  # type: ignore[arg-type]
    assert restored.dump(0) == task.dump(0)
    # A later, smaller state replaces it and its chunks go, after it.
    task.forget([0])
    task.feed(0, {"type": "fleet_tick", "ts": T0}, 6_000)
    again = checkpoint.take_snapshots()
    assert again is not None
    again()
    assert [op for op, _ in store.log[3:]] == ["put", "delete", "delete"]
    assert orjson.loads(store.get(0, state_key(0)) or b"")["offset"] == 6_001
