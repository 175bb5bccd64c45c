"""Which cached runs keep their state as objects: the most recently used, up to a limit.

A run's state as objects is ~3.7 KB with 15 records, packed ~0.8 KB (detectors/packed.py).
A worker holding 10,000 active runs keeps the `limit` (`LOOPGUARD_RUN_CACHE_HOT_RUNS`) it used
last as objects and the others packed; a packed run's next event unpacks it, and the least
recently used run beyond the limit is packed in its place. Runs that are busy together within
the limit pay nothing; beyond it, each event of a run that was packed pays one unpack and one
pack (docs/performance.md). Detection does not change: `unpack`
gives back an equal state (tests/property/test_packed.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from loopguard_fleet.detectors import RunState
from loopguard_fleet.streams.processing.partition import LiveRun

__all__ = ["HotRuns"]


class HotRuns:
    """The runs used last, in order of use; `limit` 0 keeps every run's state as objects."""

    __slots__ = ("_limit", "_order")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._order: OrderedDict[LiveRun, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def use(self, run: LiveRun) -> RunState:
        """`run`'s state as objects, the run now the most recently used; packs the least
        recently used run when this one makes them one too many."""
        if not self._limit:
            return run.state
        order = self._order
        try:
            order.move_to_end(run)
        except KeyError:
            order[run] = None
            if len(order) > self._limit:
                order.popitem(last=False)[0].pack()
        return run.state

    def discard(self, runs: Iterable[LiveRun]) -> None:
        """Forget runs that left the cache."""
        order = self._order
        for run in runs:
            order.pop(run, None)
