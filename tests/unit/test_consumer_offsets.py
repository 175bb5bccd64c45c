"""The worker's consumer commits past holes and never lets a fetch straddle a seek.

These drive the real Faust consumer class of `streams.app` (built, never started: no broker
is contacted) through the calls its fetch loop makes: `_add_gap` when a record follows a
hole in the offsets, `ack` when the agent is done with a record, `_new_offset` when it
picks the offset to commit, and `perform_seek` during recovery. The end-to-end proof is
tests/chaos/test_crash.py (graceful restart), on the real broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP
from faust.types.tuples import Message

from tests.unit.faust_rig import TOPIC, close_unstarted, unit_wiring


@pytest.fixture
async def consumer(tmp_path: Path) -> AsyncIterator[Any]:
    """The worker's consumer, with the input topic registered as an acking topic."""
    wiring = unit_wiring(tmp_path, "unit-offsets")
    wiring.app.topics.add(wiring.inputs)
    await wiring.app.topics._update_indices()
    consumer = wiring.app.consumer
    assert consumer.app.topics.acks_enabled_for(TOPIC)
    try:
        yield consumer
    finally:
        close_unstarted(consumer)


def _record(offset: int) -> Message:
    return Message(TOPIC, 0, offset, 0.0, 0, None, b"k", b"v", None)


def _ack(consumer: Any, offsets: range) -> None:
    for offset in offsets:
        assert consumer.ack(_record(offset))


TP0 = TP(TOPIC, 0)


async def test_a_hole_in_the_offsets_is_committed_past_in_one_step(consumer: Any) -> None:
    consumer._committed_offset[TP0] = 100
    _ack(consumer, range(100, 105))
    # Offsets 105 and 106 do not exist (say, transaction markers); the record at 107 comes
    # next, so the fetch loop reports the hole as (last read + 1, offset of that record).
    await consumer._add_gap(TP0, 105, 107)
    _ack(consumer, range(107, 111))
    assert consumer._new_offset(TP0) == 111


async def test_commits_keep_pace_after_a_hole(consumer: Any) -> None:
    consumer._committed_offset[TP0] = 0
    _ack(consumer, range(10))
    await consumer._add_gap(TP0, 10, 12)
    _ack(consumer, range(12, 20))
    first = consumer._new_offset(TP0)
    consumer._committed_offset[TP0] = first
    _ack(consumer, range(20, 30))
    assert (first, consumer._new_offset(TP0)) == (20, 30)


async def test_the_record_after_a_hole_counts_only_once_acked(consumer: Any) -> None:
    consumer._committed_offset[TP0] = 0
    _ack(consumer, range(5))
    await consumer._add_gap(TP0, 5, 8)  # 5..7 do not exist; record 8 is not done yet
    _ack(consumer, range(9, 10))
    assert consumer._new_offset(TP0) == 8


async def test_the_flow_is_stopped_while_seeking_and_restored_after(
    consumer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    async def seek_to_committed() -> dict[TP, int]:
        seen.append(consumer.flow_active)
        return {TP0: 42}

    monkeypatch.setattr(consumer, "seek_to_committed", seek_to_committed)
    consumer.resume_flow()
    await consumer.perform_seek()
    assert (seen, consumer.flow_active, consumer._read_offset[TP0]) == ([False], True, 42)


async def test_a_seek_while_the_flow_is_stopped_leaves_it_stopped(
    consumer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def seek_to_committed() -> dict[TP, int]:
        return {TP0: 7}

    monkeypatch.setattr(consumer, "seek_to_committed", seek_to_committed)
    consumer.stop_flow()
    await consumer.perform_seek()
    assert consumer.flow_active is False
