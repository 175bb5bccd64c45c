"""Read a whole topic once: every partition, from the start until it has gone quiet.

Used by `loopguard replay --topic` and by tests that compare a topic with an offline replay.
The result is deterministic for a given topic: partitions in order, each in offset order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from loopguard_fleet.streams.kafka.admin import topic_partitions
from loopguard_fleet.streams.kafka.security import PLAINTEXT, ClientSecurity


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def read_topic_records(
    bootstrap: str,
    topic: str,
    timeout_s: float = 60.0,
    idle_s: float = 0.5,
    *,
    isolation_level: str = "read_uncommitted",
    security: ClientSecurity = PLAINTEXT,
) -> list[TopicRecord]:
    """Every record of `topic`, partition by partition, in offset order.

    `read_committed` leaves out records of aborted (and still open) transactions.
    """
    count = (await topic_partitions(bootstrap, [topic], wait=timeout_s, security=security))[topic]
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        isolation_level=isolation_level,
        **security.aiokafka_kwargs(),
    )
    await consumer.start()
    out: dict[int, list[TopicRecord]] = {tp.partition: [] for tp in tps}
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # Tansu reports too low an end offset for partitions written in batches, so the
        # reported end is only a floor: keep reading until the topic has been quiet a while.
        ends = await consumer.end_offsets(tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet_since = loop.time()
        while True:
            now = loop.time()
            # The position, not the last record: a transaction's commit marker takes an offset
            # that no record is returned for.
            reached = all([await consumer.position(tp) >= ends[tp] for tp in tps])
            if reached and now - quiet_since >= idle_s:
                break
            if now > deadline:
                raise TimeoutError(f"reading {topic!r} did not reach its end in {timeout_s}s")
            batch = await consumer.getmany(*tps, timeout_ms=100)
            for tp, records in batch.items():
                for r in records:
                    out[tp.partition].append(TopicRecord(r.partition, r.offset, r.key, r.value))
                if records:
                    quiet_since = loop.time()
    finally:
        await consumer.stop()
    return [r for p in sorted(out) for r in out[p]]


async def read_topic(
    bootstrap: str,
    topic: str,
    timeout_s: float = 60.0,
    idle_s: float = 0.5,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> list[bytes]:
    """Every message value of `topic`, partition by partition, in offset order."""
    records = await read_topic_records(bootstrap, topic, timeout_s, idle_s, security=security)
    return [r.value or b"" for r in records]


def read_topic_lines(
    bootstrap: str, topic: str, *, security: ClientSecurity = PLAINTEXT
) -> list[bytes]:
    """`read_topic` for synchronous callers (the CLI)."""
    return asyncio.run(read_topic(bootstrap, topic, security=security))
