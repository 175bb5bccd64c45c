"""`probe_end_offsets` finds the true end of partitions the broker under-reports (Tansu)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.kafka.end_offsets import probe_end_offsets

from .conftest import TopicSet


async def test_the_probe_finds_the_end_of_a_batched_partition(
    broker: EmbeddedBroker, topics: TopicSet
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50)
    await producer.start()
    try:
        sent = [await producer.send(topics.control, b"v", partition=0) for _ in range(300)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    tp = TopicPartition(topics.control, 0)
    empty = TopicPartition(topics.control, 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        reported = await consumer.end_offsets([tp, empty])
    finally:
        await consumer.stop()

    probed = await probe_end_offsets(broker.bootstrap, reported)

    assert probed == {tp: 300, empty: 0}
    assert reported[tp] <= 300  # Tansu reports the last batch's base offset + 1
