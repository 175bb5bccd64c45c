"""BatchOutbox hands aiokafka one closed batch per partition: sent at once, not after a linger.

aiokafka sends a batch when its connection is free and the batch is closed or has lingered
for the producer's `linger_ms` (the worker's producer lingers 5 ms, streams/worker/app.py); a
verdict in an open batch waited that long (docs/performance.md). The batches
are aiokafka's own; the producer under them records what it is handed.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder, MessageBatch
from aiokafka.structs import TopicPartition

from loopguard_fleet.streams.processing.outbox import BatchOutbox

LINGER_S = 0.005


class RecordingProducer:
    """What BatchOutbox uses of AIOKafkaProducer: aiokafka's batches, a recorded hand-over."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.sent: list[tuple[int, MessageBatch]] = []

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_size, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        # As the accumulator wraps it: the batch's linger then says when it may be sent.
        self.sent.append(
            (partition, MessageBatch(TopicPartition(topic, partition), batch, 30, LINGER_S))
        )
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _outbox(producer: RecordingProducer) -> BatchOutbox:
    app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))
    return BatchOutbox(app, "control", 4)


async def test_a_batch_is_sent_closed_one_per_partition_with_no_linger_left() -> None:
    producer = RecordingProducer(batch_size=16_384)
    outbox = _outbox(producer)
    for i in range(40):
        outbox.add(f"run-{i}".encode(), b'{"type":"verdict"}')
    await outbox.send(urgent=True)
    await outbox.wait_delivered()
    partitions = [p for p, _ in producer.sent]
    lingers = {batch.remaining_linger() for _, batch in producer.sent}
    counts = sum(batch.record_count for _, batch in producer.sent)
    assert (sorted(partitions), counts, lingers) == ([0, 1, 2, 3], 40, {None})


async def test_a_full_batch_is_closed_too_and_the_rest_follows_in_another() -> None:
    producer = RecordingProducer(batch_size=200)  # a few records per batch
    outbox = _outbox(producer)
    for i in range(30):
        outbox.add(b"one-run", f'{{"n":{i}}}'.encode())  # one key: one partition
    await outbox.send(urgent=True)
    lingers = {batch.remaining_linger() for _, batch in producer.sent}
    counts = sum(batch.record_count for _, batch in producer.sent)
    assert (len(producer.sent) > 1, len({p for p, _ in producer.sent}), counts, lingers) == (
        True,
        1,
        30,
        {None},
    )
