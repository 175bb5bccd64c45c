"""How the fleet windows' laws cut a stream at watermarks (tests/property/test_fleet_*_props.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Timed(Protocol):
    @property
    def ts_ms(self) -> int: ...


T = TypeVar("T", bound=Timed)


def by_watermark(items: Sequence[T], marks: Sequence[int]) -> list[list[T]]:
    """Each item in the batch of the first watermark past its time (the last batch if none
    is), in the items' order: what a worker reads between two watermarks."""
    batches: list[list[T]] = [[] for _ in marks]
    for item in items:
        batches[next((k for k, m in enumerate(marks) if item.ts_ms < m), len(marks) - 1)].append(
            item
        )
    return batches


def every(step_s: int, end: int) -> list[int]:
    """Watermarks every `step_s` seconds up to `end` (epoch ms), `end` included."""
    return list(range(step_s * 1000, end, step_s * 1000)) + [end]
