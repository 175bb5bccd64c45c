"""A partition's acked, not yet committed offsets (`AckedOffsets`), held as ranges.

Faust keeps them as a list and a set of `int`s per partition (`Consumer._acked`,
`Consumer._acked_index`) and sorts the list at every commit. The worker commits only what
its checkpoint has written (streams/worker/faust/internals.py, "Commit hook"), so the acked
offsets of a whole checkpoint interval wait there: ~275,000 of them, ~1.9 KB per active run,
when bench/memory.py reads the worker's RSS (docs/performance.md). Offsets are
acked nearly in order, so a few ranges hold them all.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

__all__ = ["AckedOffsets"]


class AckedOffsets:
    """A set of offsets as sorted, disjoint, non-adjacent half-open ranges `[start, end)`."""

    __slots__ = ("_ends", "_size", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._size = 0

    def add(self, offset: int) -> bool:
        """Add one offset; False when it was in already."""
        ends = self._ends
        if ends and offset == ends[-1]:  # the common case: the next offset of the last range
            ends[-1] = offset + 1
            self._size += 1
            return True
        if offset in self:
            return False
        self.add_range(offset, offset + 1)
        return True

    def add_range(self, start: int, end: int) -> None:
        """Add every offset of `[start, end)` (some may be in already)."""
        if start >= end:
            return
        starts, ends = self._starts, self._ends
        # The ranges that touch or overlap [start, end) are merged with it into one.
        lo = bisect_right(ends, start - 1)  # first range ending at or after `start`
        hi = bisect_right(starts, end)  # past the last range starting at or before `end`
        if lo < hi:
            new_start, new_end = min(start, starts[lo]), max(end, ends[hi - 1])
            covered = sum(ends[i] - starts[i] for i in range(lo, hi))
        else:
            new_start, new_end, covered = start, end, 0
        starts[lo:hi] = [new_start]
        ends[lo:hi] = [new_end]
        self._size += new_end - new_start - covered

    def __contains__(self, offset: object) -> bool:
        if type(offset) is not int:
            return False
        i = bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[int]:
        for start, end in zip(self._starts, self._ends, strict=True):
            yield from range(start, end)

    def __repr__(self) -> str:
        ranges = ", ".join(f"[{s}, {e})" for s, e in zip(self._starts, self._ends, strict=True))
        return f"AckedOffsets({ranges})"

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The ranges `[start, end)`, lowest first."""
        return list(zip(self._starts, self._ends, strict=True))

    def lowest(self) -> int:
        """The lowest offset (the set is not empty)."""
        return self._starts[0]

    def highest(self, below: int | None = None) -> int | None:
        """The highest offset (below `below`, if given); None when there is none."""
        ends = self._ends
        if below is None:
            return ends[-1] - 1 if ends else None
        i = bisect_left(self._starts, below) - 1
        return None if i < 0 else min(ends[i], below) - 1

    def take_first_run(self, below: int | None = None) -> int | None:
        """Remove the lowest run of consecutive offsets (only its part below `below`, if
        given) and return the offset after it, the one to commit; None when there is none."""
        starts, ends = self._starts, self._ends
        if not starts:
            return None
        start, end = starts[0], ends[0]
        if below is not None and end > below:
            if start >= below:
                return None
            starts[0] = below
            self._size -= below - start
            return below
        del starts[0], ends[0]
        self._size -= end - start
        return end
