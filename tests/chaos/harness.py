"""The chaos harness: one scenario's topics, workers, producer, drain barrier and read-back.

    cluster = Cluster(broker, tmp_path, tag="kill")
    await cluster.create_topics()
    w = cluster.workers.start()
    await cluster.produce(wave)                 # keyed by run_id, acks=all; remembers offsets
    await cluster.wait_drained(deadline=90)     # group's committed offsets reach every end
    control = await cluster.read(cluster.control)

End offsets come from the producer's own acknowledgements, not from the broker: Tansu
under-reports the end offsets of batched partitions (streams/kafka/topic_reader.py). The broker is
the session's (LOOPGUARD_TEST_BROKER); workers get only the settings it needs beyond a user's
defaults (`worker_settings`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.kafka.topic_reader import TopicRecord, read_topic_records
from tests.chaos.fleet import WireEvent, is_tool_event
from tests.integration.conftest import SessionBroker, grant_workers, worker_settings
from tests.worker_process import WorkerLauncher, WorkerProcess

PARTITIONS = 4
HOT_RUNS = 16  # of the fleets' 150 runs: most are packed between their events
# Commits every 2.8 s (Faust's default), not the 10 s a user gets at-least-once: every wave
# drains to a commit, and at 10 s each drain would wait up to 10 s. What a crash loses does
# not depend on the interval; test_crash.py runs one kill at the default.
COMMIT_INTERVAL_S = 2.8
POLICY = {"tools": {"loopDetection": {"enabled": True}}}


Record = TopicRecord  # one record read back from a topic


@dataclass
class Cluster:
    """One scenario's world: its own topics and consumer group on a broker, and its workers."""

    broker: SessionBroker
    tmp: Path
    tag: str = "chaos"
    extra_settings: dict[str, object] = field(default_factory=dict)
    input_topic_configs: dict[str, str] = field(default_factory=dict)  # e.g. max.message.bytes
    follows_policy_topic: bool = False  # the workers follow `<tag>.policy` (docs/policy.md)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, p) -> end offset
    produced: int = 0
    workers: WorkerLauncher = field(init=False)

    def __post_init__(self) -> None:
        tag = f"{self.tag}{uuid.uuid4().hex[:8]}"
        self.tool_calls = f"{tag}.tool-calls"
        self.compactions = f"{tag}.compactions"
        self.control = f"{tag}.control"
        self.dead_letter = f"{tag}.dead-letter"
        self.app_id = f"{tag}-app"
        self.changelog = f"{self.app_id}-loopguard-runs-changelog"
        self.policy_topic = f"{tag}.policy" if self.follows_policy_topic else None
        policy = self.tmp / "policy.json"
        policy.write_bytes(orjson.dumps(POLICY))
        self.policy_file = policy  # the workers' LOOPGUARD_POLICY_FILE
        settings: dict[str, object] = {
            "broker": self.broker.url,
            "partitions": PARTITIONS,
            "topic_tool_calls": self.tool_calls,
            "topic_compactions": self.compactions,
            "topic_control": self.control,
            "topic_dead_letter": self.dead_letter,
            "app_id": self.app_id,
            "data_dir": self.tmp / "data",
            "policy_file": policy,
            **worker_settings(self.broker),
            # Fewer unpacked runs than the fleet has, so that states are packed and unpacked
            # through every fault (streams/processing/hot.py; the default is 1,024).
            "run_cache_hot_runs": HOT_RUNS,
            "commit_interval_seconds": COMMIT_INTERVAL_S,
            **({"policy_topic": self.policy_topic} if self.policy_topic else {}),
            **self.extra_settings,
        }
        self.workers = WorkerLauncher(settings, self.tmp)

    @property
    def inputs(self) -> tuple[str, str]:
        """The two input topics."""
        return (self.tool_calls, self.compactions)

    @property
    def bootstrap(self) -> str:
        """The broker's host:port."""
        return self.broker.bootstrap

    async def create_topics(self) -> None:
        """Create the input and output topics (the worker creates them too; either is fine)."""
        names = [self.tool_calls, self.compactions, self.control, self.dead_letter]
        configs = {name: self.input_topic_configs for name in self.inputs}
        await create_topics(self.bootstrap, names, PARTITIONS, configs=configs)
        await grant_workers(  # kafka-secure: this scenario's ACLs (docs/security.md)
            self.broker,
            tool_calls=self.tool_calls,
            compactions=self.compactions,
            control=self.control,
            dead_letter=self.dead_letter,
            app_id=self.app_id,
            **({"policy": self.policy_topic} if self.policy_topic else {}),
        )

    def topic_of(self, event: WireEvent) -> str:
        """The input topic an event goes to."""
        return self.tool_calls if is_tool_event(event) else self.compactions

    async def produce(self, events: Iterable[WireEvent]) -> None:
        """Send events in order (key run_id, acks=all); remember each partition's end."""
        await self.produce_records(
            (self.topic_of(ev), ev["run_id"].encode(), orjson.dumps(ev)) for ev in events
        )

    async def produce_records(self, records: Iterable[tuple[str, bytes | None, bytes]]) -> None:
        """Send raw (topic, key, value) records in order and wait for every acknowledgement."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            linger_ms=5,
            max_request_size=16 * 1024 * 1024,
            enable_idempotence=False,
        )
        await producer.start()
        try:
            futures = [await producer.send(t, v, key=k) for t, k, v in records]
            for meta in await asyncio.gather(*futures):
                tp = (meta.topic, meta.partition)
                self.ends[tp] = max(self.ends.get(tp, 0), meta.offset + 1)
                self.produced += 1
        finally:
            await producer.stop()

    async def committed(self, deadline: float = 30.0) -> dict[tuple[str, int], int]:
        """The worker group's committed offsets, (topic, partition) -> offset.

        Retriable errors are retried until `deadline`: Kafka answers "coordinator not
        available" while it loads a group's offsets partition (first use, after a restart).
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        # Name the partitions: Tansu's answer for "all partitions" does not decode.
        tps = [TopicPartition(t, p) for t in self.inputs for p in range(PARTITIONS)]
        while True:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
            try:
                await admin.start()
                offsets = await admin.list_consumer_group_offsets(self.app_id, partitions=tps)
                break
            except KafkaError as exc:
                if not exc.retriable or loop.time() >= end:
                    raise
            finally:
                await admin.close()
            await asyncio.sleep(0.2)
        return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items() if om.offset >= 0}

    def behind(self, committed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Input partitions whose committed offset is short of the produced end: how far."""
        out = {}
        for tp, end in self.ends.items():
            if tp[0] in self.inputs and committed.get(tp, -1) < end:
                out[tp] = end - max(committed.get(tp, 0), 0)
        return out

    async def wait_drained(self, deadline: float, alive: Iterable[WorkerProcess] = ()) -> None:
        """Wait until the group's committed offsets reach the end of every input partition."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        last: dict[tuple[str, int], int] = {}
        watch = list(alive)
        while loop.time() < end:
            for w in watch:
                assert w.is_running, f"worker {w.pid} exited:\n{w.log_tail()}"
            try:
                last = self.behind(await self.committed())
            except KafkaError:
                last = {("?", -1): -1}
            if not last:
                return
            await asyncio.sleep(0.25)
        logs = "\n".join(f"--- {w.log.name}\n{w.log_tail(4000)}" for w in self.workers.started)
        pytest.fail(f"committed offsets still behind after {deadline}s: {last}\n{logs}")

    @property
    def is_exactly_once(self) -> bool:
        """True when the workers run Faust's transactions (LOOPGUARD_PROCESSING_GUARANTEE)."""
        return self.workers.settings.get("processing_guarantee") == "exactly_once"

    async def read(self, topic: str, timeout_s: float = 60.0, idle_s: float = 1.0) -> list[Record]:
        """Every record of `topic`, partition by partition, read until it has been quiet.

        With exactly-once, read as a downstream consumer would: `read_committed`.
        """
        isolation = "read_committed" if self.is_exactly_once else "read_uncommitted"
        return await read_topic_records(
            self.bootstrap, topic, timeout_s, idle_s, isolation_level=isolation
        )


def json_values(records: Iterable[Record]) -> list[Any]:
    """Decoded JSON values of records (all must be JSON)."""
    return [orjson.loads(r.value) for r in records if r.value is not None]
