"""A rebalance that assigns no partition (the group's topics are gone) seeks nothing.

After a broker lost its data, or the worker's topics were deleted, the group rejoins with no
partition to assign, and Faust's recovery still seeks "every assigned partition" to its
committed offset. aiokafka asserts that there is one, so the worker crashed (exit 1 and an
`AssertionError` traceback) before its broker watch could stop it with exit 75 and a line
saying what happened (tests/chaos/test_broker_restart.py on Kafka). These drive the worker's
real Faust consumer and its thread's real aiokafka consumer (built, never started: no broker
is contacted), only running the thread's calls in the test's own loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from loopguard_fleet.streams.worker.faust.internals import seek_assigned_to_committed
from tests.unit.faust_rig import TOPIC, close_unstarted, unit_wiring


@pytest.fixture
async def consumer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The worker's Faust consumer, its thread holding a real (unstarted) aiokafka consumer."""
    consumer = unit_wiring(tmp_path, "unit-seek-none").app.consumer
    thread = consumer._thread
    kafka = thread._create_worker_consumer(consumer.transport)

    async def call_thread(method: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await method(*args)

    monkeypatch.setattr(thread, "_consumer", kafka)
    monkeypatch.setattr(thread, "call_thread", call_thread)
    try:
        yield consumer
    finally:
        await kafka.stop()
        close_unstarted(consumer)


async def test_aiokafka_alone_refuses_to_seek_with_nothing_assigned() -> None:
    kafka = AIOKafkaConsumer(group_id="g", bootstrap_servers="127.0.0.1:9")
    try:
        with pytest.raises(AssertionError, match="No partitions are currently assigned"):
            await kafka.seek_to_committed()
    finally:
        await kafka.stop()


async def test_seeking_with_nothing_assigned_returns_no_offsets() -> None:
    kafka = AIOKafkaConsumer(group_id="g", bootstrap_servers="127.0.0.1:9")
    try:
        assert await seek_assigned_to_committed(kafka) == {}
    finally:
        await kafka.stop()


async def test_recovery_seek_after_an_empty_assignment_does_not_crash(consumer: Any) -> None:
    consumer._read_offset[TopicPartition(TOPIC, 0)] = 5

    await consumer.perform_seek()  # Faust's recovery, after the empty rebalance

    assert consumer.flow_active  # the seek resumed the flow it stopped
    assert dict(consumer._read_offset) == {TopicPartition(TOPIC, 0): 5}
