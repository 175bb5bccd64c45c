"""`loopguard replay --topic` streams a real topic between --from and --to (offsets or record
times) and decides exactly as a file replay of the same messages; failures are one line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

REPO = Path(__file__).parents[2]
TRACE = REPO / "tests" / "data" / "traces" / "openclaw-P1-r5.jsonl"
START_MS = 1_796_119_200_000  # 2026-12-01T10:00:00Z
STEP_MS = 1_000


def _cli(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", *argv],
        input=stdin, capture_output=True, cwd=REPO, timeout=120,
    )  # fmt: skip


async def _produce_with_times(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, v, key=b"p1", timestamp_ms=START_MS + i * STEP_MS)
            for i, v in enumerate(values)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


async def test_topic_bounds_select_the_same_messages_as_the_file_slice(
    topics, kafka, tmp_path
) -> None:
    lines = TRACE.read_bytes().splitlines()
    await _produce_with_times(kafka.bootstrap, topics.tool_calls, lines)
    policy = tmp_path / "on.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    base = ["replay", "--policy", str(policy), "--quiet"]
    topic = ["--topic", topics.tool_calls, "--broker", kafka.bootstrap]
    cases = {
        "whole topic": ([], lines),
        "offsets 0..100": (["--from", "0", "--to", "100"], lines[:100]),
        "from offset 40": (["--from", "40"], lines[40:]),
        "times [30 s, 200 s)": (
            ["--from", _iso(START_MS + 30 * STEP_MS), "--to", _iso(START_MS + 200 * STEP_MS)],
            lines[30:200],
        ),
    }
    for name, (bounds, expected) in cases.items():
        got = await asyncio.to_thread(_cli, *base, *topic, *bounds)
        want = await asyncio.to_thread(_cli, *base, "-", stdin=b"\n".join(expected) + b"\n")
        assert (got.returncode, got.stderr) == (0, b""), name
        assert got.stdout == want.stdout and got.stdout, name


async def test_a_topic_that_does_not_exist_is_one_line_and_exit_66(kafka) -> None:
    got = await asyncio.to_thread(
        _cli, "replay", "--topic", "no-such-topic-here", "--broker", kafka.bootstrap
    )
    lines = got.stderr.decode().splitlines()
    assert got.returncode == 66 and len(lines) == 1
    assert lines[0].startswith("loopguard replay: topics do not exist after")
    assert "no-such-topic-here" in lines[0]


async def test_explain_and_compare_read_topics_too(topics, kafka, tmp_path) -> None:
    lines = TRACE.read_bytes().splitlines()
    await _produce_with_times(kafka.bootstrap, topics.tool_calls, lines)
    topic = ["--topic", topics.tool_calls, "--broker", kafka.bootstrap]
    run_id = orjson.loads(lines[0])["run_id"]
    policy = tmp_path / "on.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    got = await asyncio.to_thread(_cli, "explain", run_id, *topic, "--policy", str(policy))
    block = next(line for line in got.stdout.decode().splitlines() if "BLOCK" in line)
    assert block.split()[0] == "24" and block.endswith("BLOCK generic_repeat count 20")
    low = tmp_path / "low.json5"
    low.write_text("{tools: {loopDetection: {enabled: true, criticalThreshold: 12}}}")
    got = await asyncio.to_thread(
        _cli, "compare", *topic, "--policy", str(policy), "--candidate", str(low), "--format",
        "json",
    )  # fmt: skip
    doc = orjson.loads(got.stdout)
    (p1,) = doc["stopped_runs"]
    assert (p1["current"]["first_stop_call"], p1["candidate"]["first_stop_call"]) == (24, 15)
