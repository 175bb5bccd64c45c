"""A rebalance before the group's first commit reads again what Faust dropped.

In a rebalance Faust drops what a fetch returns for a paused or stopped partition (the
position has moved past those records) and relies on `perform_seek` to rewind to the
committed offsets. aiokafka's `seek_to_committed` moves only partitions with a committed
offset above 0, so a partition the group had not committed yet stayed past the dropped
records and nobody processed them (tests/chaos/test_rebalance.py on Kafka, 7-19 events per
partition; docs/reliability.md). These drive the worker's real Faust consumer (built, never
started: no broker is contacted) with its thread's two seek calls replaced by recorders.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from tests.unit.faust_rig import TOPIC, close_unstarted, unit_wiring


@pytest.fixture
async def consumer(tmp_path: Path) -> AsyncIterator[Any]:
    """The worker's consumer (with its run-state table, hence a changelog topic)."""
    consumer = unit_wiring(tmp_path, "unit-seek").app.consumer
    try:
        yield consumer
    finally:
        close_unstarted(consumer)


def _recorders(
    consumer: Any, monkeypatch: pytest.MonkeyPatch, committed: dict[TopicPartition, int | None]
) -> list[set[TopicPartition]]:
    """Make the thread answer `committed` and record every seek-to-beginning it is asked."""
    rewound: list[set[TopicPartition]] = []

    async def seek_to_committed() -> dict[TopicPartition, int | None]:
        return committed

    async def seek_to_beginning(*partitions: TopicPartition) -> None:
        rewound.append(set(partitions))

    monkeypatch.setattr(consumer._thread, "seek_to_committed", seek_to_committed)
    monkeypatch.setattr(consumer._thread, "seek_to_beginning", seek_to_beginning)
    return rewound


async def test_an_input_partition_never_committed_is_read_again_from_its_beginning(
    consumer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    never, at_zero, done = (TopicPartition(TOPIC, p) for p in range(3))
    changelog = TopicPartition(next(iter(consumer.app.tables.changelog_topics)), 0)
    committed = {never: None, at_zero: 0, done: 42, changelog: None}
    rewound = _recorders(consumer, monkeypatch, committed)

    await consumer.perform_seek()

    # The changelog is the table recovery's to position; the committed partition was sought.
    assert (rewound, consumer._read_offset[done]) == ([{never, at_zero}], 42)


async def test_no_seek_to_the_beginning_once_every_input_partition_is_committed(
    consumer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewound = _recorders(consumer, monkeypatch, {TopicPartition(TOPIC, 0): 7})
    await consumer.perform_seek()
    assert rewound == []
