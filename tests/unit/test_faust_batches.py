"""The fast path's batches keep Faust's offset tracking and acks (streams/worker/faust/batches.py).

An agent over a real Faust stream of the input topic takes batches with `take_batches` while
the worker's real consumer and conductor deliver a scripted fetch (tests/unit/faust_rig.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from loopguard_fleet.streams.worker.faust.batches import ack_all, take_batches
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema
from tests.unit.faust_rig import TP0, Rig, build_rig, records, turns


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    """The rig without a channel: the agent's stream subscribes its own."""
    async with build_rig(tmp_path, monkeypatch, subscribe_inputs=False) as built:
        yield built


async def _run_batches(rig: Rig, max_events: int, on_batch: Any = None) -> list[list[int]]:
    """Deliver the rig's fetches to an agent taking `take_batches`; the offsets per batch."""
    stream = rig.wiring.app.stream(rig.wiring.inputs)
    batches = take_batches(stream, max_events)
    seen: list[list[int]] = []

    async def agent() -> None:
        async for events in batches:
            seen.append([e.message.offset for e in events])
            if on_batch is not None:
                await on_batch(events)

    first = batches.__anext__()  # subscribes the stream's channel, then waits for events
    pending = rig.wiring.app.loop.create_task(first)
    await turns(2)
    await rig.subscribe()

    async def rest() -> None:
        events = await pending
        seen.append([e.message.offset for e in events])
        if on_batch is not None:
            await on_batch(events)
        await agent()

    await rig.run(agent=rest)
    return seen


async def test_a_batch_is_what_is_queued_up_to_the_maximum(rig: Rig) -> None:
    rig.fetches = [records(b"b1", range(250))]
    seen = await _run_batches(rig, max_events=60)
    flat = [o for b in seen for o in b]
    assert (max(len(b) for b in seen), len(seen) >= 5, flat) == (60, True, list(range(250)))


async def test_events_are_tracked_while_their_batch_runs_and_acked_after(rig: Rig) -> None:
    rig.fetches = [records(b"b1", range(30))]
    unacked_during: list[int] = []

    async def look(events: Any) -> None:
        unacked_during.append(len(rig.consumer._unacked_messages))

    await _run_batches(rig, max_events=10, on_batch=look)
    assert (unacked_during, len(rig.consumer._unacked_messages)) == ([10, 10, 10], 0)


async def test_a_commit_during_a_batch_stops_before_it(rig: Rig) -> None:
    rig.fetches = [records(b"b1", range(30))]
    seen: list[tuple[int, int | None]] = []  # (first offset of the batch, committed offset)

    async def commit(events: Any) -> None:
        await rig.consumer.commit()
        seen.append((events[0].message.offset, rig.consumer._committed_offset[TP0]))

    await _run_batches(rig, max_events=10, on_batch=commit)
    assert seen == [(0, 0), (10, 10), (20, 20)]


async def test_the_batches_end_when_faust_ends_the_agents_stream() -> None:
    """Faust stops an agent by throwing StopAsyncIteration into its channel's queue: the
    batches end (the agent returns) instead of the generator raising RuntimeError."""
    from types import SimpleNamespace

    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    queue: ThrowableQueue = ThrowableQueue(flow_control=FlowControlEvent())

    class Channel:  # Faust's channel as take_batches uses it: an async iterator with a queue
        def __init__(self) -> None:
            self.queue = queue

        def __aiter__(self) -> Channel:
            return self

        async def __anext__(self) -> Any:
            raise AssertionError("take_batches reads the queue, not the iterator")

    stream = SimpleNamespace(
        channel=Channel(),
        app=SimpleNamespace(consumer=SimpleNamespace(track_message=lambda message: None)),
    )
    batches = take_batches(stream, 10)
    waiting = asyncio.ensure_future(batches.__anext__())
    await asyncio.sleep(0)
    queue._throw(StopAsyncIteration())
    with pytest.raises(StopAsyncIteration):  # the generator's end, not a RuntimeError
        await waiting


# ack_all against Faust's own Event.ack, on the same messages: the consumer's bookkeeping after
# acking a batch must be the same, whatever the messages' states.

OTHER = TP("unit.not-acking", 0)  # a topic without acks (the conductor does not track it)


def _batch(rig: Rig) -> list[Any]:
    """Events in every state an ack can meet: the rig's consumer has committed offset 5."""
    consumer = rig.consumer
    consumer._committed_offset[TP0] = 5
    make = RawSchema().event_maker(rig.wiring.app)
    plain = [ConsumerRecord(TP0.topic, 0, o, 0, 0, b"k", b"v", None, 1, 1, []) for o in
             (3, 4, 5, 6, 6, 7, 8, 9)]  # fmt: skip
    other = ConsumerRecord(OTHER.topic, 0, 1, 0, 0, b"k", b"v", None, 1, 1, [])
    messages = [consumer._to_message(TP0, r) for r in plain] + [consumer._to_message(OTHER, other)]
    for m in messages:
        m.incref(1)  # the conductor's reference for the agent's channel
        consumer.track_message(m)
    messages[5].incref(1)  # offset 7 is held by a second stream too: not acked yet
    messages[6].acked = True  # offset 8 was acked already
    return [make(m) for m in messages]


def _bookkeeping(rig: Rig, events: list[Any]) -> tuple[Any, ...]:
    consumer = rig.consumer
    return (
        {tp: list(v) for tp, v in consumer._acked.items()},
        {tp: set(v) for tp, v in consumer._acked_index.items()},
        consumer._n_acked,
        sorted((m.tp, m.offset) for m in consumer._unacked_messages),
        [(e.message.acked, e.message.refcount) for e in events],
        consumer._waiting_for_ack.done(),
    )


async def test_ack_all_leaves_the_bookkeeping_event_ack_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = []
    for how in ("Event.ack", "ack_all"):
        async with build_rig(tmp_path / how, monkeypatch) as rig:
            events = _batch(rig)
            rig.consumer._waiting_for_ack = asyncio.get_running_loop().create_future()
            if how == "Event.ack":
                for event in events:
                    event.ack()
            else:
                ack_all(rig.consumer, events)
            outcomes.append(_bookkeeping(rig, events))
    faust_s, ours = outcomes
    assert ours == faust_s
    assert ours[2] == 3  # offsets 5, 6 and 9: the rest below the commit, held, acked or repeated
