"""Faust internals LoopGuard relies on, in one place (one module, one job: the Faust seams).

- Table routing: a Faust table picks the partition of a read or write from the *current
  event* (`faust.streams._current_event`, a context variable), and offers no public way to
  name the partition. The worker reads and writes run states outside Faust's per-event stream
  (a batch, a checkpoint, a sweep), so `TableStore` sets that variable to an event of the
  partition around each access. Upstream: faust-streaming/faust #497 ("Writing into Table with
  Stream.take() not allowed": `Cannot modify table key from outside of stream iteration`).
"""

from __future__ import annotations

import weakref
from typing import Any

from faust.streams import _current_event

__all__ = ["TableStore"]


class TableStore:
    """A Faust table as the processing core's `StateStore`, routed by partition."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._anchors: dict[int, Any] = {}  # partition -> a Faust event of it (routing)

    def anchor(self, partition: int, event: Any) -> None:
        """Remember an event of `partition`: table accesses for it are routed through it."""
        self._anchors[partition] = event

    def forget(self, partition: int) -> None:
        """Drop the anchor of a partition this worker no longer owns."""
        self._anchors.pop(partition, None)

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The stored state of a run, or None."""
        _current_event.set(weakref.ref(self._anchors[partition]))
        value: bytes | None = self._table.get(key)
        return value

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        """Write a run's state (a changelog record at the next producer flush)."""
        token = _current_event.set(weakref.ref(self._anchors[partition]))
        try:
            self._table[key] = value
        finally:
            _current_event.reset(token)

    def delete(self, partition: int, key: bytes) -> None:
        """Delete a run's state if present."""
        token = _current_event.set(weakref.ref(self._anchors[partition]))
        try:
            if key in self._table:
                del self._table[key]
        finally:
            _current_event.reset(token)
