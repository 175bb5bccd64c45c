"""`loopguard replay --topic T --input-format otlp` reads the `otlp_proto` payloads the
Collector's Kafka exporter writes, spread over the topic's partitions and out of start order,
and decides exactly as a replay of the same calls in LoopGuard's wire format."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer

from loopguard_fleet.streams.cli import main
from tests.otlp import export_request, looping_script, wire_jsonl

REPO = Path(__file__).parents[2]


def _cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", *argv],
        capture_output=True, cwd=REPO, timeout=120,
    )  # fmt: skip


async def _produce(bootstrap: str, topic: str, values: list[bytes], security: dict) -> None:
    """One payload a message, round robin over 4 partitions (the exporter's default spreads
    a run's spans over partitions: the replay must not depend on where they landed)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **security)
    await producer.start()
    try:
        futures = [await producer.send(topic, v, partition=i % 4) for i, v in enumerate(values)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def test_otlp_proto_payloads_on_a_topic_replay_as_the_same_calls_in_the_wire_format(
    topics, kafka, tmp_path
) -> None:
    calls = looping_script()
    order = calls[:]
    random.Random(5).shuffle(order)
    payloads = [
        export_request(order[i : i + 6]).SerializeToString() for i in range(0, len(order), 6)
    ]
    payloads.insert(3, b"\xff\xfe not a protobuf")  # refused and shown, never dropped
    await _produce(kafka.bootstrap, topics.tool_calls, payloads, kafka.security.aiokafka_kwargs())
    policy = tmp_path / "on.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    wire = tmp_path / "events.jsonl"
    wire.write_bytes(wire_jsonl(calls))
    want = tmp_path / "want.jsonl"
    assert (
        main(["replay", str(wire), "--policy", str(policy), "--quiet", "--output", str(want)]) == 0
    )
    got = await asyncio.to_thread(
        _cli, "replay", "--topic", topics.tool_calls, "--broker", kafka.bootstrap,
        "--input-format", "otlp", "--policy", str(policy), "--quiet", "--jobs", "2",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    (refused,) = got.stderr.decode().splitlines()
    assert refused.startswith("item 1: otlp_not_protobuf: message ")
    assert got.stdout == want.read_bytes() and b'"action":"block"' in got.stdout
