"""`loopguard replay --topic` reads a real topic and decides exactly as the file replay does."""

from __future__ import annotations

from pathlib import Path

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines
from loopguard_fleet.streams.kafka.topic_reader import read_topic

TRACE = Path(__file__).parents[1] / "data" / "traces" / "openclaw-P1-r5.jsonl"
POLICY = {"tools": {"loopDetection": {"enabled": True}}}


def _decide(lines: list[bytes]) -> list[dict]:
    out = replay_lines(Replayer(load_policy(POLICY)), lines)
    return [d.to_wire() for d in out if not isinstance(d, Rejected)]


async def test_topic_replay_matches_file_replay(topics, kafka) -> None:
    events = [orjson.loads(line) for line in TRACE.read_bytes().splitlines()]
    await kafka.produce_json(topics.tool_calls, events)
    lines = await read_topic(kafka.bootstrap, topics.tool_calls)
    assert len(lines) == len(events)  # one run → one partition, in order
    assert _decide(lines) == _decide(TRACE.read_bytes().splitlines())


async def test_reading_an_empty_topic_returns_nothing(topics, kafka) -> None:
    assert await read_topic(kafka.bootstrap, topics.control) == []
