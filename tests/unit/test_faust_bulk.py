"""Bulk delivery keeps what per-record delivery keeps: order, reads, holes, acks, tracking.

The worker's real Faust app, consumer and conductor with scripted fetches (tests/unit/
faust_rig.py, no broker), bulks on as in the worker (streams/worker/faust/bulk.py). Each test
either compares a bulk with the same records delivered one by one, or shows that a case a bulk
must not take (a hole, records already read, the conductor about to wait, a full queue) goes
the per-record way. The chaos suite runs the worker with bulks on against real brokers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from hypothesis import given
from hypothesis import strategies as st

from loopguard_fleet.streams.processing.driver import _ms
from loopguard_fleet.streams.worker.faust.batches import ack_all, take_batches
from loopguard_fleet.streams.worker.faust.bulk import Bulk, RecordView, messages_of, records_in
from loopguard_fleet.streams.worker.faust.delivery import BULK_QUEUE_ITEMS, Deliveries
from tests.unit.faust_rig import (
    CONDUCTOR_WAITS,
    TOPIC,
    TP0,
    Rig,
    build_rig,
    make_the_conductor_wait,
    records,
    turns,
)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    """The rig with bulks on and the input topic as the conductor's channel."""
    async with build_rig(tmp_path, monkeypatch, bulks=True) as built:
        yield built


def _items(rig: Rig) -> list[Any]:
    """Count the items the rig's agent takes off the queue (an event or a bulk each)."""
    items: list[Any] = []
    queue = rig.wiring.inputs.queue
    get = queue.get

    async def counted() -> Any:
        item = await get()
        items.append(item)
        return item

    queue.get = counted  # type: ignore[method-assign]
    return items


async def test_a_fetched_run_of_consecutive_records_arrives_in_bulks_of_a_batch(rig: Rig) -> None:
    items = _items(rig)
    rig.fetches = [records(b"b1", range(150)), records(b"b2", range(150, 160))]
    await rig.run()
    await rig.consumer.commit()
    assert rig.received == [(b"b1", o) for o in range(150)] + [(b"b2", o) for o in range(150, 160)]
    assert [records_in(i) for i in items] == [100, 50, 10]  # the rig's bulks hold 100 at most
    assert all(type(i) is Bulk for i in items)
    assert rig.commits == [{TP0: 160}]
    assert (len(rig.consumer._acked[TP0]), len(rig.consumer._unacked_messages)) == (0, 0)


async def test_past_the_queues_bulk_room_a_fetch_goes_on_record_by_record(rig: Rig) -> None:
    items = _items(rig)
    size = 100 * BULK_QUEUE_ITEMS + 600
    rig.fetches = [records(b"b1", range(size))]
    await rig.run()
    assert rig.received == [(b"b1", o) for o in range(size)]
    # No await between the bulks: the agent takes none of them before the queue holds
    # BULK_QUEUE_ITEMS, and the rest of the fetch takes the per-record path, in order.
    assert [records_in(i) for i in items] == [100] * BULK_QUEUE_ITEMS + [1] * 600


async def test_without_bulks_the_same_fetches_go_record_by_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with build_rig(tmp_path, monkeypatch, bulks=False) as rig:
        items = _items(rig)
        rig.fetches = [records(b"b1", range(150))]
        await rig.run()
    assert (len(items), rig.received) == (150, [(b"b1", o) for o in range(150)])


async def test_a_fetch_with_a_hole_goes_record_by_record_and_is_committed_past(rig: Rig) -> None:
    items = _items(rig)
    rig.fetches = [records(b"b1", [*range(10), *range(15, 20)])]
    await rig.run()
    await rig.consumer.commit()
    assert rig.received == [(b"b1", o) for o in [*range(10), *range(15, 20)]]
    assert (len(items), rig.commits) == (15, [{TP0: 20}])


async def test_a_fetch_after_a_hole_since_the_last_read_goes_record_by_record(rig: Rig) -> None:
    items = _items(rig)
    rig.fetches = [records(b"b1", range(10)), records(b"b2", range(15, 20))]
    await rig.run()
    await rig.consumer.commit()
    assert [records_in(i) for i in items] == [10, 1, 1, 1, 1, 1]
    assert rig.commits == [{TP0: 20}]  # the hole 10..14 was recorded, as record by record


async def test_records_already_read_go_record_by_record_and_are_dropped(rig: Rig) -> None:
    items = _items(rig)
    rig.fetches = [records(b"b1", range(5)), records(b"b2", range(8))]
    await rig.run()
    # As without bulks (tests/unit/test_faust_drain.py): offsets below the last read one drop.
    assert rig.received == [(b"b1", o) for o in range(5)] + [(b"b2", o) for o in range(4, 8)]
    assert [records_in(i) for i in items] == [5, 1, 1, 1, 1]


async def test_a_seek_after_a_bulk_reads_again_from_the_seek(rig: Rig) -> None:
    rig.committed = 60
    rig.fetches = [records(b"b1", range(150)), records(b"b2", range(60, 120))]

    async def seek_once(n: int) -> None:
        if n == 150:  # the agent took the first fetch's bulk: recovery seeks back to 60
            await rig.consumer.perform_seek()

    await rig.run(seek_once)
    assert rig.received == [(b"b1", o) for o in range(150)] + [(b"b2", o) for o in range(60, 120)]
    assert rig.consumer._read_offset[TP0] == 119


@pytest.mark.parametrize("condition", [*CONDUCTOR_WAITS, "queue holds bulks"])
async def test_no_bulk_is_delivered_when_it_could_not_be_delivered_record_by_record(
    rig: Rig, condition: str
) -> None:
    app = rig.wiring.app
    queue = rig.wiring.inputs.queue
    deliveries = Deliveries(app)
    if condition in CONDUCTOR_WAITS:
        await make_the_conductor_wait(app, condition)
    else:
        for start in range(0, 10 * BULK_QUEUE_ITEMS, 10):
            fetched = records(b"v", range(start, start + 10))[TP0]
            assert deliveries.of(TP0).bulk(TP0, fetched, rig.consumer._to_message)
    before = queue.qsize()
    fetched = records(b"v", range(1000, 1010))[TP0]
    assert deliveries.of(TP0).bulk(TP0, fetched, rig.consumer._to_message) is False
    assert queue.qsize() == before


def _view(record: ConsumerRecord[bytes, bytes], message: Any) -> tuple[Any, ...]:
    return (
        message.topic,
        message.partition,
        message.offset,
        message.key,
        message.value,
        message.timestamp,
        _ms(message.timestamp),
    )


@given(st.lists(st.integers(min_value=0, max_value=2**53), min_size=1, max_size=20))
def test_a_bulks_records_read_as_fausts_messages_of_them(stamps: list[int]) -> None:
    from types import SimpleNamespace

    from faust.transport.drivers.aiokafka import Consumer as FaustConsumer

    faust_like = SimpleNamespace(app=SimpleNamespace(consumer_generation_id=0))
    fetched = [
        ConsumerRecord(TOPIC, 0, o, ts, 0, b"k", b"v%d" % o, None, 1, 2, [])
        for o, ts in enumerate(stamps)
    ]
    event = SimpleNamespace(message=SimpleNamespace(offset=len(stamps) - 1))
    views = list(messages_of([Bulk(event, fetched)]))
    assert all(type(v) is RecordView for v in views)
    by_faust = [FaustConsumer._to_message(faust_like, TP0, r) for r in fetched]  # type: ignore[arg-type]
    assert [_view(r, v) for r, v in zip(fetched, views, strict=True)] == [
        _view(r, m) for r, m in zip(fetched, by_faust, strict=True)
    ]


def _bookkeeping(rig: Rig) -> tuple[Any, ...]:
    consumer = rig.consumer
    return (
        {tp: v.ranges for tp, v in consumer._acked.items()},
        consumer._n_acked,
        # what a rebalance's `wait_empty` still waits for (Faust leaves a record acked below
        # the committed offset in the set, and its `_clean_unacked_messages` drops it there)
        [m.offset for m in consumer._unacked_messages if not m.acked],
        consumer._waiting_for_ack.done(),
    )


@pytest.mark.parametrize("committed", [None, 0, 5, 9, 10, 20])
async def test_acking_a_bulk_is_acking_each_of_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, committed: int | None
) -> None:
    outcomes = []
    for how in ("each", "bulk"):
        async with build_rig(tmp_path / how, monkeypatch, bulks=True) as rig:
            consumer = rig.consumer
            consumer._committed_offset[TP0] = committed
            consumer._waiting_for_ack = asyncio.get_running_loop().create_future()
            fetched = records(b"v", range(3, 10))[TP0]
            if how == "each":
                direct = Deliveries(rig.wiring.app).of(TP0)
                for r in fetched:
                    assert direct(consumer._to_message(TP0, r))
            else:
                assert Deliveries(rig.wiring.app).of(TP0).bulk(TP0, fetched, consumer._to_message)
            queue = rig.wiring.inputs.queue
            taken = [queue.get_nowait() for _ in range(queue.qsize())]
            for item in taken:
                consumer.track_message(item.message)
            ack_all(consumer, taken)
            outcomes.append(_bookkeeping(rig))
            assert [m.offset for m in messages_of(taken)] == list(range(3, 10))
    assert outcomes[1] == outcomes[0]


async def test_a_bulk_is_tracked_while_its_batch_runs_and_counted_in_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with build_rig(tmp_path, monkeypatch, subscribe_inputs=False, bulks=True) as rig:
        rig.fetches = [records(b"b1", range(30)), records(b"b2", range(30, 40))]
        stream = rig.wiring.app.stream(rig.wiring.inputs)
        batches = take_batches(stream, 5)
        seen: list[tuple[list[int], int]] = []  # (records per item, unacked while it runs)

        async def look(events: list[Any]) -> None:
            seen.append(([records_in(e) for e in events], len(rig.consumer._unacked_messages)))

        first = batches.__anext__()
        pending = rig.wiring.app.loop.create_task(first)
        await turns(2)
        await rig.subscribe()

        async def agent() -> None:
            await look(await pending)
            async for events in batches:
                await look(events)

        await rig.run(agent=agent)
        await turns(5)
        # A batch holds whole bulks (5 records at most, unless one bulk holds more); each is
        # one tracked message until its batch is acked, after which nothing waits for acks.
        assert seen == [([30], 1), ([10], 1)]
        assert (len(rig.consumer._unacked_messages), rig.consumer._n_acked) == (0, 40)
