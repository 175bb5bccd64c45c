"""Direct delivery puts a record where the conductor would, and only when it would not wait.

The worker's real Faust app, consumer and conductor (tests/unit/faust_rig.py, never started,
no broker): each test delivers the same records once through `Direct` and once through the
conductor's own compiled callback, or provokes one of the conditions under which the conductor
waits, and `Direct` must then deliver nothing (streams/worker/faust/delivery.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from faust.types import TP

from loopguard_fleet.streams.worker.faust.delivery import Deliveries
from loopguard_fleet.streams.worker.faust.drain import start_eagerly
from tests.unit.faust_rig import (
    CONDUCTOR_WAITS,
    TP0,
    Rig,
    build_rig,
    make_the_conductor_wait,
    records,
)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    """The rig with the input topic as the conductor's only channel for partition 0."""
    async with build_rig(tmp_path, monkeypatch) as built:
        yield built


def _messages(rig: Rig, tag: bytes, offsets: range) -> list[Any]:
    return [rig.consumer._to_message(TP0, r) for r in records(tag, offsets)[TP0]]


def _drain(queue: Any) -> list[Any]:
    out = []
    while queue.qsize():
        out.append(queue.get_nowait())
    return out


def _seen(events: list[Any]) -> list[tuple[Any, ...]]:
    """What the agent reads of an event, and the message's reference count."""
    return [
        (type(e), e.key, e.value, e.headers, e.message.offset, e.message.refcount) for e in events
    ]


async def test_a_record_arrives_as_the_conductor_delivers_it(rig: Rig) -> None:
    queue = rig.wiring.inputs.queue
    direct = Deliveries(rig.wiring.app).of(TP0)
    delivered = [direct(m) for m in _messages(rig, b"v", range(5))]
    by_direct = _drain(queue)
    for m in _messages(rig, b"v", range(5)):
        assert start_eagerly(rig.consumer.callback(m)) is None
    by_conductor = _drain(queue)
    assert delivered == [True] * 5
    assert _seen(by_direct) == _seen(by_conductor)
    assert [e.message.refcount for e in by_direct] == [1] * 5


@pytest.mark.parametrize("condition", CONDUCTOR_WAITS)
async def test_nothing_is_delivered_when_the_conductor_would_wait(rig: Rig, condition: str) -> None:
    app = rig.wiring.app
    queue = rig.wiring.inputs.queue
    deliveries = Deliveries(app)
    await make_the_conductor_wait(app, condition)
    (message,) = _messages(rig, b"v", range(1))
    assert (deliveries.of(TP0)(message), queue.qsize(), message.refcount) == (False, 0, 0)


async def test_nothing_is_delivered_into_a_full_queue(rig: Rig) -> None:
    queue = rig.wiring.inputs.queue
    direct = Deliveries(rig.wiring.app).of(TP0)
    results = [direct(m) for m in _messages(rig, b"v", range(queue.maxsize + 1))]
    assert results == [True] * queue.maxsize + [False]
    assert queue.qsize() == queue.maxsize


async def test_a_partition_of_two_channels_takes_the_conductors_path(rig: Rig) -> None:
    app = rig.wiring.app
    app.topics._tp_index[TP0].add(app.topic("another-channel-of-the-partition"))
    (message,) = _messages(rig, b"v", range(1))
    assert Deliveries(app).of(TP0)(message) is False


async def test_a_queue_under_pressure_stops_fetching_its_partition_with_one_callback(
    rig: Rig,
) -> None:
    queue = rig.wiring.inputs.queue
    deliveries = Deliveries(rig.wiring.app)
    for message in _messages(rig, b"v", range(queue.pressure_high_size + 5)):
        deliveries.reset()  # as the drain loop after each await: the callbacks stay the same
        assert deliveries.of(TP0)(message)
    assert TP0 in rig.consumer._buffered_partitions  # the fetcher leaves it out
    assert len(queue._pending_pressure_drop_callbacks) == 1
    _drain(queue)  # the agent takes everything: the drop callback resumes the partition
    assert TP0 not in rig.consumer._buffered_partitions


async def test_pressure_callbacks_name_the_partition_as_fausts_tp_whatever_the_fetch_key(
    rig: Rig,
) -> None:
    # aiokafka's fetch keys its records by its own `TopicPartition`, which equals Faust's `TP`
    # but is not one; Faust's consumer asserts that its active partitions are all `TP`s, and a
    # partition re-added under aiokafka's type crashed the worker there (the chaos suite).
    consumer, queue = rig.consumer, rig.wiring.inputs.queue
    fetch_key = TopicPartition(TP0.topic, TP0.partition)
    consumer._get_active_partitions().add(TP0)
    deliveries = Deliveries(rig.wiring.app)
    for message in _messages(rig, b"v", range(queue.pressure_high_size + 5)):
        assert deliveries.of(fetch_key)(message)
    assert [type(tp) for tp in consumer._buffered_partitions] == [TP]
    _drain(queue)  # the drop callback puts the partition back among the active ones
    active = consumer._get_active_partitions()  # raised AssertionError with the fetch key
    assert TP0 in active and all(type(tp) is TP for tp in active)


async def test_the_drain_loop_delivers_without_the_conductors_callback(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = rig.consumer
    conductor_calls = []
    callback = consumer.callback

    def counted(message: Any) -> Any:
        conductor_calls.append(message.offset)
        return callback(message)

    monkeypatch.setattr(consumer, "callback", counted)
    rig.fetches = [records(b"b1", range(150))]
    await rig.run()
    assert (rig.received, conductor_calls) == ([(b"b1", o) for o in range(150)], [])
