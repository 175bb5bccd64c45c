"""Records into the agent's channel queue without Faust's per-record coroutines (the fast path).

Faust's conductor hands each record to the channels of its partition through a compiled
coroutine (faust/transport/conductor.py): the lock around its callback index, flow control,
the producer buffer's ebb, a reference per channel, the channel's async decode, and a put
with the queue's pressure callbacks. Run eagerly by the drain loop (drain.py) it never waits,
yet its coroutines, lock and awaits cost 6-8 µs a record, about a tenth of the worker's time
on workload P (docs/performance.md).

`Direct` delivers a record in one call when none of those steps could wait: the index is not
being updated, the flow is on, the producer buffer is within its limit, the partition has one
channel, with the raw schema (streams/worker/faust/raw_schema.py), and a queue that is not
full. It then does what the conductor does for that case: one reference, one event, the put
with the same pressure callbacks (the fetcher stops fetching a partition whose queue is under
pressure). Otherwise it delivers nothing and says so, and the drain loop takes the conductor's
path, which waits as it always did; so what Faust protects (no delivery while the flow is
suspended, a full queue waited for) stays as it is. `Direct.bulk` does the same for a
partition's run of records as one item (bulk.py), with the same checks made once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.types import TP

from loopguard_fleet.streams.worker.faust.bulk import Bulk
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

__all__ = ["BULK_QUEUE_ITEMS", "Deliveries", "Direct", "buffer_over_limit"]

OnPressure = Callable[[], None]
# A bulk is one queue item however many records it holds, so the queue's own bound (in items)
# does not bound records. A bulk is delivered only while the queue holds fewer items than this;
# otherwise the records take the per-record path, which the queue's bound and pressure
# callbacks govern as before. With bulks of at most one agent batch (LOOPGUARD_BATCH_MAX_EVENTS,
# 2,000), at most 16 batches wait in bulks: room for one fetch of 4-8 partitions with a backlog
# (aiokafka fetches up to 1 MiB a partition, ~3,500 events of workload P).
BULK_QUEUE_ITEMS = 16


def buffer_over_limit(app: Any) -> Callable[[], bool]:
    """Whether Faust's producer buffer holds more than its limit: the conductor then waits.

    A threaded producer keeps its buffer in its own thread, so the answer is always yes
    there: the conductor's own path, which knows how to wait for it, is taken.
    """
    if app.conf.producer_threaded:
        return lambda: True
    buffer = app.producer.buffer
    qsize = buffer.pending.qsize
    return lambda: qsize() > buffer.max_messages


class Deliveries:
    """The `Direct` delivery of each partition, for one drain loop's life.

    A partition's pressure callbacks stay the same objects for as long, as the conductor's
    do: the queue keeps the pending drop callbacks in a set and adds one only if it is not
    there yet. The channel of a partition is looked up again after `reset()`, which the drain
    loop calls after each of its awaits (a rebalance may change the conductor's index then).
    """

    def __init__(self, app: Any) -> None:
        self._app = app
        self._buffer_over = buffer_over_limit(app)
        self._pressure: dict[TP, tuple[OnPressure, OnPressure]] = {}
        self._direct: dict[TP, Direct] = {}

    def of(self, tp: TP) -> Direct:
        """The delivery of `tp`'s records (built on first use after a reset)."""
        direct = self._direct.get(tp)
        if direct is None:
            direct = Direct(self._app, tp, self._callbacks(tp), self._buffer_over)
            self._direct[tp] = direct
        return direct

    def reset(self) -> None:
        """Forget the channels looked up so far."""
        self._direct.clear()

    def _callbacks(self, tp: TP) -> tuple[OnPressure, OnPressure]:
        pair = self._pressure.get(tp)
        if pair is None:
            consumer, on_full = self._app.consumer, self._app.sensors.on_topic_buffer_full
            # The drain loop's `tp` is aiokafka's fetch key, a `TopicPartition`: equal to
            # Faust's `TP`, but not one. Faust's consumer keeps its active partitions as `TP`s
            # (it asserts so at every fetch), and `on_buffer_drop` adds back the one it is
            # given, so the callbacks name it as the conductor's do: as a `TP`.
            tp = TP(tp.topic, tp.partition)

            def on_pressure_high() -> None:
                on_full(tp)
                consumer.on_buffer_full(tp)

            def on_pressure_drop() -> None:
                consumer.on_buffer_drop(tp)

            pair = self._pressure[tp] = (on_pressure_high, on_pressure_drop)
        return pair


class Direct:
    """Delivers one partition's records to its only channel when nothing would wait."""

    __slots__ = ("_buffer_over", "_drop", "_flow_on", "_high", "_index_locked", "_make", "_queue")

    def __init__(
        self,
        app: Any,
        tp: TP,
        callbacks: tuple[OnPressure, OnPressure],
        buffer_over: Callable[[], bool],
    ) -> None:
        conductor = app.topics
        self._index_locked = conductor._tp_to_callback_lock.locked
        self._flow_on = app.flow_control.is_active
        self._buffer_over = buffer_over
        self._high, self._drop = callbacks
        self._queue: Any = None
        self._make: Callable[[Any], Any] | None = None
        channels = conductor._tp_index.get(tp)
        if channels is not None and len(channels) == 1:
            (channel,) = channels
            if isinstance(channel.schema, RawSchema):
                self._queue = channel.queue
                self._make = channel.schema.event_maker(app)

    def _would_wait(self) -> bool:
        """Whether a step of the conductor's path could wait now, the queue's room aside (or
        the partition is not this delivery's to take: several channels, another schema)."""
        return (
            self._make is None or self._index_locked() or not self._flow_on() or self._buffer_over()
        )

    def __call__(self, message: Any) -> bool:
        """Deliver `message` and return True, or deliver nothing and return False."""
        if self._would_wait() or self._queue.full():
            return False
        assert self._make is not None  # _would_wait says so
        message.incref(1)
        self._queue.put_nowait_enhanced(
            self._make(message), on_pressure_high=self._high, on_pressure_drop=self._drop
        )
        return True

    def bulk(self, tp: TP, records: list[Any], to_message: Callable[[TP, Any], Any]) -> bool:
        """Deliver `records` (of `tp`) as one `Bulk` (bulk.py) and return True, or deliver
        nothing and return False; `to_message` makes the Faust message of the last one."""
        if self._would_wait() or self._queue.qsize() >= BULK_QUEUE_ITEMS:
            return False
        assert self._make is not None  # _would_wait says so
        message = to_message(tp, records[-1])
        message.incref(1)
        self._queue.put_nowait_enhanced(
            Bulk(self._make(message), records),
            on_pressure_high=self._high,
            on_pressure_drop=self._drop,
        )
        return True
