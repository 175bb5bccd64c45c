"""One partition's runs: the live cache, the table-only stamps, the dirty set, stream time and
the sweep schedule, kept in one object so that forgetting a partition forgets all of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopguard_fleet.detectors import RunState
from loopguard_fleet.detectors.packed import pack, unpack
from loopguard_fleet.detectors.state import SavedState

__all__ = ["LiveRun", "PartitionRuns", "Snapshot", "snapshot_state"]


Snapshot = SavedState | bytes  # a run's state as a checkpoint took it: saved, or packed


class LiveRun:
    """A cached run: its state, its last event's stream time (`stamp_ms`, None without record
    times); `is_dirty` until the next checkpoint writes it.

    The state is held as objects or packed (detectors/packed.py): `pack` packs it, and reading
    `state` unpacks it again (streams/processing/hot.py decides which runs stay unpacked).
    Equal only to itself, so that runs can be kept in sets and ordered dicts."""

    __slots__ = ("_packed", "_state", "is_dirty", "stamp_ms")

    def __init__(self, state: RunState, stamp_ms: int | None = None, is_dirty: bool = False):
        self._state: RunState | None = state
        self._packed: bytes | None = None
        self.stamp_ms = stamp_ms
        self.is_dirty = is_dirty

    @property
    def state(self) -> RunState:
        """The run's state as objects (unpacked first if it was packed)."""
        state = self._state
        if state is None:
            assert self._packed is not None
            state = self._state = unpack(self._packed)
            self._packed = None
        return state

    @state.setter
    def state(self, state: RunState) -> None:
        self._state, self._packed = state, None

    @property
    def packed(self) -> bytes | None:
        """The packed state while the run is packed, else None."""
        return self._packed

    def pack(self) -> None:
        """Hold the state packed until it is read again."""
        if self._state is not None:
            self._packed, self._state = pack(self._state), None

    def snapshot(self) -> Snapshot:
        """The state as it is now, out of reach of later events (`snapshot_state` reads it):
        the packed bytes as they are, or the state's saved values (RunState.save)."""
        state = self._state
        if state is None:
            assert self._packed is not None
            return self._packed
        return state.save()


def snapshot_state(snapshot: Snapshot) -> RunState:
    """A new state equal to the one `LiveRun.snapshot` took."""
    if isinstance(snapshot, bytes):
        return unpack(snapshot)
    state = RunState()
    state.restore(snapshot)
    return state


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

    def evict_idle(self, horizon_ms: int) -> list[LiveRun]:
        """Move written runs whose last event is at or before `horizon_ms` to `cold`; the
        runs moved."""
        idle = [
            key
            for key, run in self.live.items()
            if not run.is_dirty and run.stamp_ms is not None and run.stamp_ms <= horizon_ms
        ]
        out = []
        for key in idle:
            run = self.live.pop(key)
            self.cold[key] = run.stamp_ms
            out.append(run)
        return out

    def drop(self, keys: list[bytes]) -> list[LiveRun]:
        """Forget these runs entirely (expired); the cached ones dropped."""
        out = []
        for key in keys:
            run = self.live.pop(key, None)
            if run is not None:
                out.append(run)
            self.cold.pop(key, None)
            self.dirty.pop(key, None)
        return out
