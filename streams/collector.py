"""The cyclic garbage collector's settings for LoopGuard's own processes.

Detection frees what it makes by reference counting: an event's values, records and decisions
form no reference cycles, so the cyclic collector finds nothing to free on the per-event path
(tests/unit/test_collector.py). What it does cost is scanning: a young collection walks every
object allocated since the last one that is still alive, and runs' states are exactly such
objects, so each collection of a growing set of runs scans records that will live for
minutes, and each full collection scans all of them.

- **The worker** (`freeze_startup_heap`): what it built before its first batch (Faust, the
  app, every module) lives as long as it does, so it is collected once and frozen out of later
  scans. Its runs' states are packed or bounded by the run cache; the default thresholds stay
  (the collector was 0.6 % of its CPU on workload L, docs/performance.md).
- **Offline commands** (`batch_collector`: replay, compare and explain, and replay's shards,
  which inherit it or set it themselves): a young collection every 10,000 net allocations
  instead of 700, a middle one every 100 young ones and a full one every 100 middle ones
  instead of 10, so a replay's states are scanned once or twice, not at every full collection.
  On workload M the collector's share of a replay fell from 6-7 % to ~2 %
  (docs/performance.md); cycles that other code makes are still collected, later.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["BATCH_THRESHOLDS", "batch_collector", "freeze_startup_heap", "set_batch_thresholds"]

#: `gc.set_threshold` of an offline command: (young collections every N net allocations,
#: a middle-generation collection every N young ones, a full one every N of those).
BATCH_THRESHOLDS: Final = (10_000, 100, 100)


def freeze_startup_heap() -> None:
    """Collect once, then keep every object alive now out of the cyclic collector's scans.

    Measured on workload L: 75-93 ms per full collection at ~100,000 objects, every few
    seconds at 1,000 calls/s, before; about 30 ms after (docs/performance.md).
    """
    gc.collect()
    gc.freeze()


def set_batch_thresholds() -> None:
    """Set this process's collector for an offline command (a replay shard's whole life)."""
    gc.set_threshold(*BATCH_THRESHOLDS)


@contextmanager
def batch_collector() -> Iterator[None]:
    """This process's collector set for an offline command within, as it was after: a caller
    that runs a command in its own process (a test, an embedding) keeps its own settings."""
    before = gc.get_threshold()
    set_batch_thresholds()
    try:
        yield
    finally:
        gc.set_threshold(*before)
