"""The live OTLP bridge on the real broker: a worker with `LOOPGUARD_TOPIC_OTLP_SPANS` set
reads the Collector's `otlp_proto` payloads, and its control output for each run equals
`loopguard replay --topic <the OTLP topic> --input-format otlp`, object for object; a payload
that is not OTLP goes to the dead-letter topic with its reason."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from loopguard_fleet.streams.kafka.admin import create_topics
from tests.otlp import export_request, looping_script
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    KafkaIO,
    SessionBroker,
    TopicSet,
    deployment_settings,
    grant_topic_set,
    operator_security,
)
from .test_worker import of_run

REPO = Path(__file__).parents[2]
POLICY = {"tools": {"loopDetection": {"enabled": True}}}


@pytest.fixture
async def otlp_topic(broker: SessionBroker, topics: TopicSet) -> str:
    """This test's OTLP topic, granted to the workers as docs/security.md says."""
    name = f"{topics.tool_calls}.otlp"
    await grant_topic_set(broker, topics, otlp_spans=name)
    return name


@pytest.fixture
def start_worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, otlp_topic: str
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start this test's worker with the bridge on; stopped by PID afterwards."""
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    settings = deployment_settings(broker, topics, tmp_path, policy, topic_otlp_spans=otlp_topic)
    launcher = WorkerLauncher(settings, tmp_path)
    yield launcher.start
    launcher.stop_all()


async def _committed(kafka: KafkaIO, group: str, topic: str) -> int:
    """How many of the OTLP topic's records the worker's group committed (2 partitions)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=kafka.bootstrap, request_timeout_ms=5000,
        **kafka.security.aiokafka_kwargs(),
    )  # fmt: skip
    await admin.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    return sum(max(om.offset, 0) for om in offsets.values())


def _replay(bootstrap: str, topic: str, policy: Path) -> list[dict[str, Any]]:
    got = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "--topic", topic,
         "--broker", bootstrap, "--input-format", "otlp", "--policy", str(policy), "--quiet"],
        capture_output=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    return [json.loads(line) for line in got.stdout.decode().splitlines()]


async def test_a_worker_decides_otlp_tool_spans_as_replay_of_the_otlp_topic_does(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    otlp_topic: str,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    await create_topics(kafka.bootstrap, [otlp_topic], 2, security=operator_security(broker))
    calls = sorted(looping_script(), key=lambda c: c.start_ns)
    payloads = [
        export_request(calls[i : i + 6]).SerializeToString() for i in range(0, len(calls), 6)
    ]
    payloads.insert(3, b"\xff\xfe not a protobuf")  # dead-lettered, never dropped
    await kafka.produce_raw(otlp_topic, payloads, key=b"collector-1")
    expected = [
        d
        for d in await asyncio.to_thread(
            _replay, kafka.bootstrap, otlp_topic, tmp_path / "openclaw.json"
        )
        if d["type"] != "verdict"
    ]
    assert any(d.get("command") == "block_call" for d in expected)

    start_worker()
    got = await kafka.consume_until(
        topics.control, lambda ms: len(ms) >= len(expected), deadline=60
    )
    for run_id in ("run-loop", "run-pp"):
        want = [d for d in expected if d.get("run_id") == run_id]
        assert want and of_run(got, run_id) == want
    (dead,) = await kafka.consume_count(topics.dead_letter, 1)
    assert dead.json is not None and dead.json["reason"] == "otlp_not_protobuf"
    assert dead.json["topic"] == otlp_topic
    # Every record's spans were released: the commit reaches the end of the OTLP topic.
    deadline = asyncio.get_running_loop().time() + 20
    while (done := await _committed(kafka, topics.group_id, otlp_topic)) < len(payloads):
        assert asyncio.get_running_loop().time() < deadline, f"{done} committed"
        await asyncio.sleep(0.2)
    assert done == len(payloads)
