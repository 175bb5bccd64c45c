"""Where the agent's control-topic decisions go: one produce batch per partition per batch.

Faust's `send_soon` costs a queue hop, a task wake-up and an aiokafka `send` per message
(about a third of the worker's time on workload P). `BatchOutbox` appends a batch's decisions
to one aiokafka batch per partition and hands each to the producer at once: no linger to wait
for, one produce request per agent batch. The producer is the worker's decisions producer
(streams/worker/faust/internals.py): aiokafka keeps one request in flight per connection, and
on Faust's producer a verdict waited behind the changelog records of a checkpoint.
`delivery()` is the at-least-once barrier: the checkpoint takes it together with the run
states it is about to write, and awaits it before writing them, so no state is written ahead
of the decisions it produced (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka.partitioner import murmur2

from loopguard_fleet.streams.errors import StreamError
from loopguard_fleet.streams.worker.faust.internals import decisions_producer

__all__ = ["BatchOutbox", "Delivery", "FaustOutbox", "Outbox", "OutputLost", "Sent", "wait_all"]


class OutputLost(StreamError, RuntimeError):
    """A control message was not delivered; the worker must not commit past it."""


class Delivery(Protocol):
    """The messages sent up to the moment it was taken; `wait` until they are acknowledged."""

    async def wait(self) -> None: ...


class Outbox(Protocol):
    """The agent's view of its control-topic producer."""

    def add(self, key: bytes, value: bytes) -> None: ...
    async def send(self, *, urgent: bool) -> None: ...
    def sent_last(self) -> Sequence[asyncio.Future[Any]]:
        """The delivery futures of the last `send` (none where it does not send)."""
        ...

    def delivery(self) -> Delivery: ...
    async def wait_delivered(self) -> None: ...


async def wait_all(futures: list[asyncio.Future[Any]], failure: str) -> None:
    """Wait for every delivery future; OutputLost (`failure: the error`) if one failed."""
    if futures:
        await asyncio.wait(futures)
    for fut in futures:
        exc = fut.exception()
        if exc is not None:
            raise OutputLost(f"{failure}: {exc!r}") from exc


class Sent:
    """Produce batches handed to aiokafka up to a point, as their delivery futures."""

    def __init__(self, topic: str, futures: list[asyncio.Future[Any]]) -> None:
        self._topic = topic
        self._futures = futures

    async def wait(self) -> None:
        """Wait until every batch is acknowledged; raise OutputLost if one is not."""
        await wait_all(self._futures, f"control batch to {self._topic!r} failed")


class _Flush:
    """Faust's producer flushed (what `send_soon` queued up to then, and anything after)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def wait(self) -> None:
        await self._app.producer.flush()


class FaustOutbox:
    """Faust's own producer path (`send_soon`, flush on a verdict): tests and fallbacks."""

    def __init__(self, wiring: Any) -> None:
        self._w = wiring

    def add(self, key: bytes, value: bytes) -> None:
        self._w.control.send_soon(key=key, value=value)

    async def send(self, *, urgent: bool) -> None:
        if urgent:
            await self._w.app.producer.flush()

    def sent_last(self) -> Sequence[asyncio.Future[Any]]:
        """Faust's buffer gives no future per batch: nothing to time."""
        return ()

    def delivery(self) -> Delivery:
        return _Flush(self._w.app)

    async def wait_delivered(self) -> None:
        await self._w.app.producer.flush()


class BatchOutbox:
    """Collects a batch's control messages and sends one aiokafka batch per partition."""

    def __init__(self, app: Any, topic: str, partitions: int) -> None:
        self._app = app
        self._topic = topic
        self._partitions = partitions
        self._pending: dict[int, list[tuple[bytes, bytes]]] = {}
        self._partition_of: dict[bytes, int] = {}
        self._inflight: list[asyncio.Future[Any]] = []
        self._sent_last: list[asyncio.Future[Any]] = []

    def add(self, key: bytes, value: bytes) -> None:
        """Queue one message for the next `send()` (keyed like Kafka's default partitioner)."""
        p = self._partition_of.get(key)
        if p is None:
            if len(self._partition_of) > 100_000:  # bounded: run ids come and go
                self._partition_of.clear()
            p = self._partition_of[key] = (murmur2(key) & 0x7FFFFFFF) % self._partitions
        self._pending.setdefault(p, []).append((key, value))

    def add_to(self, partition: int, key: bytes, value: bytes) -> None:
        """Queue one message for the next `send()` to the given partition."""
        self._pending.setdefault(partition, []).append((key, value))

    async def send(self, *, urgent: bool) -> None:
        """Hand every queued message to the producer (delivery is awaited at commit time).

        Each batch is closed before it is handed over: aiokafka sends a closed batch as soon
        as its connection is free, while an open one waits out the producer's linger (5 ms,
        app.py) like any record, so `urgent` (a verdict inside) needs nothing more.
        """
        del urgent
        self._sent_last = []
        if not self._pending:
            return
        producer = decisions_producer(self._app)
        pending, self._pending = self._pending, {}
        topic = self._topic
        for partition, messages in pending.items():
            batch = producer.create_batch()
            for key, value in messages:
                if batch.append(key=key, value=value, timestamp=None) is None:
                    batch.close()
                    self._track(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None)
            batch.close()
            self._track(await producer.send_batch(batch, topic, partition=partition))

    def sent_last(self) -> Sequence[asyncio.Future[Any]]:
        """The delivery futures of the batches the last `send` handed over."""
        return self._sent_last

    def _track(self, fut: asyncio.Future[Any]) -> None:
        self._sent_last.append(fut)
        inflight = self._inflight
        inflight.append(fut)
        if len(inflight) > 256:  # drop the delivered ones; failures stay until checked
            self._inflight = [f for f in inflight if not f.done() or f.exception() is not None]

    def delivery(self) -> Sent:
        """The batches sent so far (awaited later: batches sent after are not waited for)."""
        return Sent(self._topic, self.take_sent())

    def take_sent(self) -> list[asyncio.Future[Any]]:
        """The delivery futures of the batches sent since the last take (for a commit gate)."""
        inflight, self._inflight = self._inflight, []
        return inflight

    async def wait_delivered(self) -> None:
        """Wait until everything sent so far is acknowledged; raise OutputLost if not."""
        await self.delivery().wait()
