"""Faust's fetch-to-conductor loop without a task per message (the worker's fast path).

faust-streaming's `Consumer._drain_messages` hands every record to the conductor with
`wait_first(callback(message), suspend_flow.wait())`: four tasks and an `asyncio.wait` per
record, which held any Faust agent below ~8,000 events/s here (docs/performance.md; upstream
faust-streaming/faust #229, robinhood/faust #563). What the `wait_first` buys
is that a callback blocked in flow control (Faust's flow control, the producer buffer, a full
channel queue) is abandoned when the flow is suspended for a seek, a rebalance or a recovery.

This loop keeps that and pays for it only when a callback blocks:

- A partition's records of one fetch go into the agent's channel queue as one bulk (bulk.py)
  when they are one run of consecutive offsets, none read before and none after a hole since
  the last read, and nothing on the conductor's path could wait (delivery.py): exactly the
  records the per-record loop below would deliver directly, in order, without a gap to record.
  Bulks are delivered before the per-record loop, with no await in between, so the flow checks
  below cover them as they cover the records.
- A record goes straight into the agent's channel queue when nothing on the conductor's
  path could wait (delivery.py); otherwise the conductor's callback takes it, as below.
- A callback runs eagerly, up to its first suspension, in the loop's own task. Almost always
  it finishes there (the conductor's put into the channel queue does not block), and nothing
  else has run meanwhile, so nothing can have suspended the flow. A callback that does
  suspend is resumed through Faust's own `wait_first(..., suspend_flow.wait())`, and is
  abandoned exactly as Faust abandons it.
- Every suspension of the flow bumps the consumer's flow epoch (internals.py). The epoch is
  read before each fetch and after each await of this loop: if it moved, the rest of the
  batch was fetched before a suspension and is dropped. That also covers a suspension that
  stopped and resumed the flow while the fetch was in flight (faust-streaming/faust #216), which
  Faust's per-record `flow_active` check cannot see; the records are then read again from
  the committed offsets (a redelivered event adds nothing: docs/reliability.md).
- The bookkeeping that only changes across an await is done per batch: read offsets are kept
  in a local map and written back before every await (so a seek during it wins), commit-every
  is checked once per batch, the partitions' end offsets are reported once per batch.
- Each message is stamped with the moment its fetch returned (`Message.time_in`, monotonic
  time: the slot Faust's own Monitor sensor fills the same way when the conductor takes a
  message), so the agent can time a verdict's fetch apart from its wait in the queue
  (`loopguard_verdict_stage_seconds`, docs/performance.md).
- A commit-every commit runs beside the loop, as a future of the consumer service (joined when
  it stops), not awaited in it: the checkpoint before a commit writes run states while the
  agent goes on with its batches (streams/worker/agent.py), and awaited here it would stop
  fetching for as long, holding back every verdict (docs/performance.md). When
  a commit is running already, the next one covers these acks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine, Generator
from time import monotonic
from typing import Any, Protocol

from aiokafka.errors import IllegalStateError
from faust.transport.consumer import CONSUMER_FETCHING
from faust.types import TP

from loopguard_fleet.streams.worker.faust.delivery import Deliveries

__all__ = ["Blocked", "FlowEpoch", "drain_messages", "start_eagerly"]

YIELD_EVERY = 100  # records between two turns of the event loop (as Faust: the agent must run)
FETCH_TIMEOUT_S = 1.0  # as Faust's loop: how long one fetch may wait for records


class FlowEpoch(Protocol):
    """A Faust consumer that counts the suspensions of its flow (internals.py)."""

    flow_epoch: int


class Blocked:
    """The rest of a coroutine whose first step suspended: awaiting it resumes it there."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coro = coro
        self._pending = pending  # what the coroutine yielded to the event loop (its future)

    def __await__(self) -> Generator[Any, Any, Any]:
        """Hand the pending future to the awaiting task, then keep driving the coroutine."""
        coro, pending = self._coro, self._pending
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001  # forwarded, cancellation included
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> Blocked | None:
    """Run `coro` up to its first suspension: None if it finished, else the rest to await."""
    try:
        pending = coro.send(None)
    except StopIteration:
        return None
    return Blocked(coro, pending)


async def drain_messages(consumer: Any, fetcher: Any, *, bulk_max: int = 0) -> None:
    """Fetch records and hand each to the consumer's callback until consumer or fetcher stop.

    `consumer` is a Faust `Consumer` with a `flow_epoch` (internals.py `_TunedConsumer`),
    `fetcher` the Faust `Fetcher` service that runs this loop. Stop and error handling are
    Faust's (the caller wraps this in the same `except` clauses as `_drain_messages`).
    `bulk_max`: deliver qualifying records of a partition as items of up to this many records
    (`_bulk`, bulk.py); 0: record by record.
    """
    callback = consumer.callback
    app = consumer.app
    consumer_stopped = consumer._stopped.is_set
    fetcher_stopped = fetcher._stopped.is_set
    read_offsets: dict[TP, int | None] = consumer._read_offset
    acks_enabled_for = app.topics.acks_enabled_for
    suspend_flow = consumer.suspend_flow
    set_flag, unset_flag = consumer.diag.set_flag, consumer.diag.unset_flag
    commit_every = consumer._commit_every
    sleep = asyncio.sleep
    deliveries = Deliveries(app)
    try:
        while not (consumer_stopped() or fetcher_stopped()):
            set_flag(CONSUMER_FETCHING)
            epoch = consumer.flow_epoch
            generation = app.consumer_generation_id
            records, active = await consumer._wait_next_records(FETCH_TIMEOUT_S)
            if records is None or consumer.should_stop:
                continue
            if consumer.flow_epoch != epoch or not consumer.flow_active:
                # Fetched across a suspension: some of it may precede a seek. Read again
                # from the committed offsets (what Faust's getmany does with the flow off).
                # A rebalance can take a partition during the seek (it crashed a worker in
                # tests/chaos/test_rebalance.py); the new assignment's recovery seeks again.
                with contextlib.suppress(IllegalStateError):
                    await consumer.perform_seek()
                continue
            for tp in records:
                app.monitor.track_tp_end_offset(tp, consumer.highwater(tp))
            buffered = consumer._buffered_partitions
            fetched_at = monotonic()
            to_message = consumer._to_message
            bulk_message = _stamping(to_message, fetched_at)
            batch_read: dict[TP, int] = {}  # read offsets of this batch, not yet written
            deliveries.reset()  # the conductor's index may have changed during the fetch
            deliver_of = deliveries.of
            # Bulks first: one item per partition whose records qualify (`_bulk`); the rest
            # of the fetch goes record by record, as before.
            rest: dict[TP, list[Any]] = {}
            since_yield = 0
            for tp, fetched in records.items():
                if active is not None and tp not in active and tp not in buffered:
                    continue  # paused while the batch was being delivered (as Faust)
                done = 0
                if bulk_max:
                    read = read_offsets.get(tp)
                    done = _bulk(tp, fetched, read, bulk_message, deliver_of(tp), bulk_max)
                if done:
                    batch_read[tp] = fetched[done - 1].offset
                    since_yield += done
                if done < len(fetched):
                    rest[tp] = fetched[done:] if done else fetched
            if since_yield >= YIELD_EVERY:
                since_yield = 0
                await _between(sleep(0), read_offsets, batch_read, deliveries)  # agent's turn
                if _interrupted(consumer, epoch, generation):
                    rest = {}  # fetched before a suspension: read again from the commit
            for tp, record in consumer.scheduler.iterate(rest):
                if active is not None and tp not in active and tp not in buffered:
                    continue  # paused while the batch was being delivered (as Faust)
                offset = record.offset
                read = batch_read[tp] if tp in batch_read else read_offsets.get(tp)
                if read is not None and offset < read:
                    continue  # already read (a redelivery after a seek): Faust drops it too
                message = to_message(tp, record)
                message.time_in = fetched_at
                if read and offset - read > 1 and acks_enabled_for(message.topic):
                    gap = consumer._add_gap(tp, read + 1, offset)
                    await _between(gap, read_offsets, batch_read, deliveries)
                    if _interrupted(consumer, epoch, generation):
                        break
                if not deliver_of(tp)(message):  # would wait: the conductor's own path
                    blocked = start_eagerly(callback(message))
                    if blocked is not None:
                        race = consumer.wait_first(blocked, suspend_flow.wait())
                        result = await _between(race, read_offsets, batch_read, deliveries)
                        if result.stopped or _interrupted(consumer, epoch, generation):
                            break  # abandoned, as Faust abandons it; its offset stays unread
                batch_read[tp] = offset
                since_yield += 1
                if since_yield >= YIELD_EVERY:
                    since_yield = 0
                    await _between(sleep(0), read_offsets, batch_read, deliveries)  # agent's turn
                    if _interrupted(consumer, epoch, generation):
                        break
            read_offsets.update(batch_read)
            if commit_every is not None and consumer._n_acked >= commit_every:
                consumer._n_acked = 0
                if consumer._commit_fut is None:
                    consumer.add_future(consumer.commit())
            unset_flag(CONSUMER_FETCHING)
    finally:
        unset_flag(CONSUMER_FETCHING)


async def _between(
    step: Awaitable[Any],
    read_offsets: dict[TP, int | None],
    batch_read: dict[TP, int],
    deliveries: Deliveries,
) -> Any:
    """Await one step of the loop: the batch's read offsets written back before it (so a seek
    during it wins), the channels looked up again after it (a rebalance may change them)."""
    read_offsets.update(batch_read)
    batch_read.clear()
    result = await step
    deliveries.reset()
    return result


def _stamping(to_message: Any, fetched_at: float) -> Any:
    """Faust's `_to_message`, stamping each message with its fetch's time (`time_in`)."""

    def make(tp: TP, record: Any) -> Any:
        message = to_message(tp, record)
        message.time_in = fetched_at
        return message

    return make


def _bulk(
    tp: TP, fetched: list[Any], read: int | None, to_message: Any, direct: Any, most: int
) -> int:
    """Deliver a partition's fetched records as bulks of up to `most` records (bulk.py) when
    the per-record loop would deliver each of them in order with no hole to record:
    consecutive offsets, none already read, none after a hole since the last read. Returns how
    many it delivered, from the first on; the per-record loop takes the rest."""
    first, last = fetched[0].offset, fetched[-1].offset
    if len(fetched) < 2 or last - first != len(fetched) - 1:
        return 0
    if read is not None and (first < read or (read and first - read > 1)):
        return 0  # some already read (the loop drops them), or a hole before them
    done = 0
    while len(fetched) - done >= 2 and direct.bulk(tp, fetched[done : done + most], to_message):
        done = min(done + most, len(fetched))
    return done


def _interrupted(consumer: Any, epoch: int, generation: int) -> bool:
    """Whether the flow was suspended or the group rebalanced since the batch was fetched."""
    return bool(
        consumer.flow_epoch != epoch
        or consumer.app.consumer_generation_id != generation
        or consumer.should_stop
    )
