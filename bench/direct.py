"""Prototype of a Faust-free worker, measured on workload P beside the Faust worker.

Evidence for the design proposal in docs/performance.md, not the product: a plain aiokafka
consumer group reads large batches (`getmany`), each record goes orjson ▸ `parse_event` ▸
`process_event` against in-memory `RunState`s, then the batch's decisions and one changelog
record per changed run go out as one produce batch per partition; the batch's offsets are
committed only after every one of those is acknowledged (at-least-once, as in the worker).

    python bench/direct.py [--quick]        # standalone: broker, pre-fill, 1 + 3 runs
    (bench/pipeline.py runs it beside the Faust worker and the relay, same broker, same topic)
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopguard.config import load_policy
from loopguard.detectors import InvalidEvent, RunState, is_duplicate, parse_event, process_event

POLICY = {"tools": {"loopDetection": {"enabled": True}}}


class _Batches:
    """One aiokafka batch per (topic, partition), sent together."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._open: dict[tuple[str, int], Any] = {}
        self.futures: list[asyncio.Future[Any]] = []
        self.sent_bytes = 0

    async def add(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        batch = self._open.get((topic, partition))
        if batch is None:
            batch = self._open[(topic, partition)] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            await self._ship(topic, partition, batch)
            batch = self._open[(topic, partition)] = self._producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)

    async def _ship(self, topic: str, partition: int, batch: Any) -> None:
        self.futures.append(await self._producer.send_batch(batch, topic, partition=partition))

    async def send_all(self) -> None:
        open_, self._open = self._open, {}
        for (topic, partition), batch in open_.items():
            await self._ship(topic, partition, batch)

    async def wait_acked(self) -> None:
        futures, self.futures = self.futures, []
        if futures:
            for result in await asyncio.gather(*futures, return_exceptions=True):
                if isinstance(result, BaseException):
                    raise result


async def direct_worker(
    bootstrap: str,
    source: str,
    control: str,
    changelog: str,
    group: str,
    partitions: int,
    total: int,
    options: dict[str, Any] | None = None,
) -> tuple[float, float]:
    """Process `total` events of `source` in a consumer group: (events/s, changelog B/event)."""
    th = load_policy(POLICY).with_channel_tools(["telegram"]).for_agent(None)
    consumer = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100,
        max_partition_fetch_bytes=4 * 1024 * 1024, fetch_max_bytes=16 * 1024 * 1024,
        session_timeout_ms=6000, heartbeat_interval_ms=1000, **(options or {}),
    )  # fmt: skip
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=512 * 1024,
        **(options or {}),
    )  # fmt: skip
    await consumer.start()
    await producer.start()
    states: dict[bytes, RunState] = {}
    control_partition: dict[bytes, int] = {}
    seen = 0
    changelog_bytes = 0
    first = 0.0
    try:
        while seen < total:
            fetched = await consumer.getmany(timeout_ms=100, max_records=8000)
            if not fetched:
                continue
            if not first:
                first = time.perf_counter()
            out = _Batches(producer)
            offsets: dict[TopicPartition, int] = {}
            for tp, records in fetched.items():
                dirty: dict[bytes, RunState] = {}
                for rec in records:
                    seen += 1
                    key = rec.key
                    try:
                        ev = parse_event(orjson.loads(rec.value))
                    except (InvalidEvent, orjson.JSONDecodeError):
                        continue  # the worker dead-letters these; P has none
                    state = states.get(key)
                    if state is None:
                        state = states[key] = RunState()
                    if is_duplicate(state, ev):
                        continue
                    decisions = process_event(state, ev, th)
                    dirty[key] = state
                    if decisions:
                        p = control_partition.get(key)
                        if p is None:
                            p = control_partition[key] = (murmur2(key) & 0x7FFFFFFF) % partitions
                        for d in decisions:
                            await out.add(control, p, key, orjson.dumps(d.to_wire()))
                for key, state in dirty.items():
                    value = state.to_json().encode()
                    changelog_bytes += len(key) + len(value)
                    await out.add(changelog, tp.partition, key, value)
                offsets[tp] = records[-1].offset + 1
            await out.send_all()
            await out.wait_acked()  # outputs and states acknowledged ...
            await consumer.commit(offsets)  # ... before the offsets that produced them
        return total / (time.perf_counter() - first), changelog_bytes / total
    finally:
        await consumer.stop()
        await producer.stop()


async def _standalone(quick: bool) -> None:
    import statistics
    import tempfile

    from pipeline import PARTITIONS, prefill, workload

    from loopguard.streams.embedded.tansu import EmbeddedBroker
    from loopguard.streams.kafka.admin import create_topics

    records = workload(10_000 if quick else 100_000)
    with EmbeddedBroker(log_dir=Path(tempfile.mkdtemp(prefix="loopguard-direct-"))) as broker:
        await create_topics(broker.bootstrap, ["d.in", "d.control", "d.changelog"], PARTITIONS)
        await prefill(broker.bootstrap, "d.in", records)
        rates = []
        for i in range(4 if not quick else 3):
            rate, per_event = await direct_worker(
                broker.bootstrap, "d.in", "d.control", "d.changelog", f"g{i}", PARTITIONS,
                len(records),
            )  # fmt: skip
            print(f"# run {i}: {rate:,.0f} ev/s, changelog {per_event:.0f} B/event")
            if i:
                rates.append(rate)
        print(f"median {statistics.median(rates):,.0f} ev/s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    asyncio.run(_standalone("--quick" in sys.argv))
