"""A worker keeps its local store across a restart only after a clean stop.

A checkpoint writes run states into the local store (RocksDB) at once, while Faust records how
far the store follows the changelog only when a state's changelog record is delivered, or
under exactly-once when its transaction commits (faust/tables/base.py, `_on_changelog_sent`).
A worker killed in between leaves states in its store that the changelog never got; recovery
replays the changelog over them but cannot take them out. The restarted worker's states are
then ahead of its committed input offsets: it drops the redelivered events as duplicates and
never writes those states again, and the worker that takes the partition next reads the older
ones (found by tests/chaos/test_kafka_faults.py with a 0.1 s commit interval: under
exactly-once 6 of 150 run states missing from the changelog, at-least-once 3). Kafka Streams
wipes a task's local state after an unclean shutdown under exactly-once for the same reason;
the engine's seq watermark makes it needed at-least-once too. A marker in the data dir is
written at start and removed after a clean stop (exit status 0); a start that finds it empties
the data dir, and recovery rebuilds every state from the changelog.

A worker that found the broker had lost its data (streams/worker/broker_watch.py) leaves a
marker of its own, with what it found: its store belongs to a changelog that is gone, and the
start that finds it empties the data dir too, saying why (run states start empty).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Final

__all__ = ["BROKER_DATA_LOST_MARKER", "OPEN_MARKER", "close_store", "mark_data_lost", "open_store"]

log = logging.getLogger(__name__)

#: File in the worker's data dir while a worker runs on it.
OPEN_MARKER: Final = "STORE_OPEN"
#: File left in the data dir by a worker that found the broker had lost its data (what it
#: found): the local store belongs to a changelog that is gone.
BROKER_DATA_LOST_MARKER: Final = "BROKER_DATA_LOST"


def mark_data_lost(data_dir: Path, found: str) -> None:
    """Leave the data dir to the next start as a store whose changelog is gone (`found`: why)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / BROKER_DATA_LOST_MARKER).write_text(found + "\n")


def open_store(data_dir: Path) -> bool:
    """Mark the data dir in use by a worker, first emptying it when the last worker on it did
    not stop cleanly or found the broker had lost its data; True when it was emptied."""
    if (data_dir / BROKER_DATA_LOST_MARKER).exists():
        reason = (
            "the broker lost the changelog they belong to (see the previous run's log); run "
            "states start empty"
        )
    elif (data_dir / OPEN_MARKER).exists():
        reason = (
            "the last worker on it did not stop cleanly, and they may hold writes its "
            "changelog never got; they are rebuilt from the changelog"
        )
    else:
        reason = None
    if reason is not None:
        log.warning("discarding the local run states in %s: %s", data_dir, reason)
        shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / OPEN_MARKER).write_text("")
    return reason is not None


def close_store(data_dir: Path) -> None:
    """After a clean stop: the next worker may keep the data dir's store."""
    (data_dir / OPEN_MARKER).unlink(missing_ok=True)
