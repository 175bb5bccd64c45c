"""True end offsets of partitions on brokers that under-report them (Tansu).

Tansu answers ListOffsets(latest) with the base offset of a partition's last record batch
plus one, not the offset after its last record: after one 500-record batch at offsets 0-499
it reports 1. Faust recovers a table by reading its changelog up to that reported end, so it
silently restores only the first record of the last batch and the worker carries on with
stale run states (found by tests/chaos: a restarted worker forgot runs' histories).
`probe_end_offsets` starts from the reported ends and reads forward until nothing more comes.
On a broker that reports correct ends the probe finds nothing and costs one empty fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["probe_end_offsets"]

TP = TypeVar("TP", bound=tuple[str, int])  # faust TP or aiokafka TopicPartition

_QUIET_MS = 200  # a partition is at its end when a fetch this long brings nothing more


async def probe_end_offsets(
    bootstrap_servers: str | Sequence[str],
    reported: Mapping[TP, int | None],
    *,
    timeout_s: float = 30.0,
) -> dict[TP, int | None]:
    """The offset after the last record of each partition, at least the reported end."""
    ends: dict[TP, int | None] = dict(reported)
    tps = [tp for tp, end in reported.items() if end is not None]
    if not tps:
        return ends
    consumer = AIOKafkaConsumer(
        bootstrap_servers=list(bootstrap_servers)
        if not isinstance(bootstrap_servers, str)
        else bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="latest",  # a reported end past the log (data loss): keep it
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        by_key = {TopicPartition(tp[0], tp[1]): tp for tp in tps}  # (topic, partition)
        consumer.assign(list(by_key))
        for key, tp in by_key.items():
            consumer.seek(key, int(ends[tp] or 0))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=_QUIET_MS)
            if not batch:
                break
            for key, records in batch.items():
                if records:
                    tp = by_key[key]
                    ends[tp] = max(int(ends[tp] or 0), records[-1].offset + 1)
    finally:
        await consumer.stop()
    return ends
