"""One partition's runs: the live cache, the table-only stamps, the dirty set, stream time and
the sweep schedule, kept in one object so that forgetting a partition forgets all of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopguard.detectors import RunState

__all__ = ["LiveRun", "PartitionRuns"]


@dataclass(slots=True)
class LiveRun:
    """A cached run: its live state, its last event's stream time (`stamp_ms`, None without
    record times); `is_dirty` until the next checkpoint writes it."""

    state: RunState
    stamp_ms: int | None = None
    is_dirty: bool = False


@dataclass(slots=True)
class PartitionRuns:
    """The runs of one partition that this worker (or replay) holds."""

    live: dict[bytes, LiveRun] = field(default_factory=dict)
    # run key -> last event time (ms) of runs held in the store only (evicted from `live`)
    cold: dict[bytes, int | None] = field(default_factory=dict)
    dirty: dict[bytes, LiveRun] = field(default_factory=dict)
    stream_ms: int | None = None  # the largest record timestamp seen (stream time)
    next_sweep_ms: int = 0

    def advance(self, timestamp_ms: int | None) -> int | None:
        """Move stream time to `timestamp_ms` if later; return the partition's stream time."""
        if timestamp_ms is not None and (self.stream_ms is None or timestamp_ms > self.stream_ms):
            self.stream_ms = timestamp_ms
        return self.stream_ms

    def mark_dirty(self, key: bytes, run: LiveRun) -> None:
        """Remember that `run` changed since the last checkpoint."""
        if not run.is_dirty:
            run.is_dirty = True
            self.dirty[key] = run

    def evict_idle(self, horizon_ms: int) -> None:
        """Move written runs whose last event is at or before `horizon_ms` to `cold`."""
        idle = [
            key
            for key, run in self.live.items()
            if not run.is_dirty and run.stamp_ms is not None and run.stamp_ms <= horizon_ms
        ]
        for key in idle:
            self.cold[key] = self.live.pop(key).stamp_ms

    def drop(self, keys: list[bytes]) -> None:
        """Forget these runs entirely (expired)."""
        for key in keys:
            self.live.pop(key, None)
            self.cold.pop(key, None)
            self.dirty.pop(key, None)
