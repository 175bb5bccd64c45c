"""The checkpoint's drain of Faust's producer buffer waits for the last message too.

Faust's `ProducerBuffer` hands messages to the producer from a background task that takes a
message off its queue before it hands it on; its `flush` (and "size is 0") therefore returned
with the last message still in flight. Under exactly-once that message then joined the
transaction opened after the commit, which nothing committed once the input ended: a run's
last state write was missing from the committed changelog (docs/reliability.md). These drive
Faust's real buffer, started, with messages whose hand-over takes a while.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.transport.producer import ProducerBuffer

from loopguard_fleet.streams.worker.faust.internals import (
    drain_producer_buffer,
    size_producer_buffer,
)


class _SlowMessage:
    """A queued message whose hand-over to the producer takes `delay_s` (a lock, a send)."""

    def __init__(self, sent: list[int], n: int, delay_s: float) -> None:
        self.message = self.channel = self
        self._sent, self._n, self._delay_s = sent, n, delay_s

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        await asyncio.sleep(self._delay_s)
        self._sent.append(self._n)


def _buffer() -> ProducerBuffer:
    """Faust's buffer as a producer attaches it (no threaded producer)."""
    buffer = ProducerBuffer()
    buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))  # type: ignore[assignment]
    return buffer


async def test_the_drain_returns_only_once_the_last_message_was_handed_over() -> None:
    buffer = _buffer()
    await buffer.start()
    try:
        sent: list[int] = []
        for n in range(3):
            buffer.put(_SlowMessage(sent, n, 0.05))  # type: ignore[arg-type]  # duck-typed
        await drain_producer_buffer(SimpleNamespace(producer=SimpleNamespace(buffer=buffer)))  # type: ignore[arg-type]
        assert sent == [0, 1, 2]
    finally:
        await buffer.stop()


async def test_an_empty_buffer_drains_at_once() -> None:
    buffer = _buffer()
    await buffer.start()
    try:
        app = SimpleNamespace(producer=SimpleNamespace(buffer=buffer))
        await asyncio.wait_for(drain_producer_buffer(app), timeout=1.0)  # type: ignore[arg-type]
    finally:
        await buffer.stop()


def _app(buffer: ProducerBuffer) -> Any:
    return SimpleNamespace(producer=SimpleNamespace(buffer=buffer), conf=buffer.app.conf)  # type: ignore[union-attr]


async def test_the_per_record_fill_check_waits_only_for_a_buffer_over_its_limit() -> None:
    """`size_producer_buffer`'s check does what Faust's `wait_until_ebb` does, for less."""
    buffer = _buffer()
    size_producer_buffer(_app(buffer), 2)
    assert "wait_until_ebb" in vars(buffer)  # replaced on the instance
    await buffer.start()
    try:
        sent: list[int] = []
        for n in range(2):
            buffer.put(_SlowMessage(sent, n, 0.05))  # type: ignore[arg-type]  # duck-typed
        await asyncio.wait_for(buffer.wait_until_ebb(), timeout=0.02)  # at the limit: no wait
        assert sent == []
        for n in range(2, 5):
            buffer.put(_SlowMessage(sent, n, 0.05))  # type: ignore[arg-type]
        await buffer.wait_until_ebb()  # over it: waits for `max_messages` to be handed over
        assert len(sent) >= 2
        assert buffer.max_messages == 2
        await drain_producer_buffer(_app(buffer))
    finally:
        await buffer.stop()


def test_a_threaded_producer_keeps_fausts_check() -> None:
    buffer = _buffer()
    buffer.app.conf.producer_threaded = True  # type: ignore[union-attr]
    size_producer_buffer(_app(buffer), 7)
    assert buffer.max_messages == 7
    assert "wait_until_ebb" not in vars(buffer)
