"""Batches of a Faust agent's events straight off its channel queue (the fast path's second half).

`Stream.take_events` moves every event through Faust's per-event stream machinery (the
stream's `__anext__`, a processor that appends it to a buffer, a background task feeding the
buffer, a timer) before the agent body sees the batch: on workload P that cost more than the
drain loop's tasks (docs/performance.md). `take_batches` takes what the
conductor already put into the agent's channel queue, in one go, and keeps what the stream
did per event that the rest of Faust relies on:

- `Consumer.track_message` when an event is taken (the unacked set a rebalance and a graceful
  stop wait on with `wait_empty`, and the acked-offset bookkeeping that commits read);
- the event's ack after the agent body returned for its batch (as `take_events`), so an
  offset is committable only once its batch was processed (the checkpoint before each commit
  then writes its state, streams/worker/agent.py). `ack_all` acks the whole batch in one
  pass: `Event.ack` is five calls and three takes of Faust's ack lock per event
  (`Message.ack`, `decref`, `Consumer.ack`), ~2 µs on workload P; the bookkeeping it leaves
  (acked offsets per partition, the unacked set, the count commit-every reads, the waiter a
  graceful stop waits on) is the same, event for event (tests/unit/test_faust_batches.py).

A batch holds what is queued when the agent asks, up to `max_events` records: it never waits
for a timer to fill, so a `want_verdict` call's verdict leaves with the batch it arrived in.
A queue item is a Faust event or a bulk (bulk.py: one item for many records, counted as its
records, so a batch may exceed `max_events` by one bulk); `ack_all` acks a bulk's records as
one range.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from faust.types.tuples import ConsumerMessage, ack_lock
from mode.utils.futures import notify

from loopguard_fleet.streams.worker.faust.bulk import Bulk, records_in

__all__ = ["ack_all", "ack_offset", "take_batches"]


async def take_batches(stream: Any, max_events: int) -> AsyncIterator[list[Any]]:
    """Yield lists of the events queued for `stream`'s agent; ack each list when asked for more."""
    channel = aiter(stream.channel)  # subscribes the agent's channel to the conductor
    queue = channel.queue
    get_nowait = queue.get_nowait
    consumer = stream.app.consumer
    track = consumer.track_message
    while True:
        try:
            events = [await queue.get()]
            held = records_in(events[0])
            while held < max_events and queue.qsize():
                item = get_nowait()
                events.append(item)
                held += records_in(item)
        except StopAsyncIteration:
            # How Faust ends an agent's stream when it stops the actor (it throws this into
            # the channel's queue, faust/agents/actor.py): the batches end, the agent returns.
            # Raised inside this generator it became a RuntimeError, the agent "crashed" and
            # the worker exited 1 instead of its own exit code (docs/reliability.md).
            return
        for event in events:
            track(event.message)
        try:
            yield events
        finally:
            ack_all(consumer, events)


def ack_all(consumer: Any, events: list[Any]) -> None:
    """Ack each event of a batch as `Event.ack` acks it (the module docstring), in one pass."""
    acks_enabled_for = consumer.app.topics.acks_enabled_for
    counted = 0
    tracked = False
    with ack_lock:  # as `Message.ack`: test-and-set and bookkeeping in one step
        for event in events:
            message = event.message  # a bulk's stands for all its records (bulk.py)
            if type(message) is not ConsumerMessage:
                message.ack(consumer)  # another kind of message: its own final ack
                continue
            if message.acked or message.decref():
                continue  # acked already, or still held by another stream
            message.acked = True
            if not acks_enabled_for(message.topic):
                continue
            tracked = True
            if type(event) is Bulk:
                counted += _ack_bulk(consumer, event)
            else:
                counted += ack_offset(consumer, message)
        consumer._n_acked += counted
        if tracked:
            notify(consumer._waiting_for_ack)


def ack_offset(consumer: Any, message: Any) -> bool:
    """Add an acked record's offset to its partition's acked offsets (acked.py) unless it is
    below the committed offset or in already; True when it was added (it then leaves the
    unacked set). Faust's per-record bookkeeping, for `ack_all` and the consumer's `ack`;
    called under Faust's ack lock, the acks enabled for the record's topic."""
    tp, offset = message.tp, message.offset
    committed = consumer._committed_offset[tp]
    if (committed is None or offset >= committed) and consumer._acked[tp].add(offset):
        consumer._unacked_messages.discard(message)
        return True
    return False


def _ack_bulk(consumer: Any, bulk: Bulk) -> int:
    """Add a bulk's offsets from the committed one on to its partition's acked offsets as one
    range, as `ack_offset` adds each record's; how many were new. Its message, acked once for
    all of them, leaves the unacked set."""
    message = bulk.message
    consumer._unacked_messages.discard(message)
    tp, end = message.tp, message.offset + 1
    committed = consumer._committed_offset[tp]
    first = bulk.records[0].offset
    start = first if committed is None else max(first, committed)
    if start >= end:
        return 0
    acked = consumer._acked[tp]
    before = len(acked)
    acked.add_range(start, end)
    return len(acked) - before
