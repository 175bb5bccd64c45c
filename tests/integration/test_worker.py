"""The worker end to end on the real broker: loops, verdicts, dead letters, metrics.

Each test runs its own worker as a subprocess (`python -m loopguard_fleet.streams.main worker`,
configured only through LOOPGUARD_* variables) on its own topics, consumer group, data dir and
web port, and compares the control topic with what the engine itself decides for the same events.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import RunState, parse_event, process_event
from loopguard_fleet.streams.cli import main
from tests.passes import COMPILED
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    KafkaIO,
    Message,
    SessionBroker,
    TopicSet,
    deployment_settings,
)

POLICY = {"tools": {"loopDetection": {"enabled": True}}}


@pytest.fixture
def start_worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start this test's worker with extra LOOPGUARD_* settings; stopped by PID afterwards."""
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    launcher = WorkerLauncher(deployment_settings(broker, topics, tmp_path, policy), tmp_path)
    yield launcher.start
    launcher.stop_all()


# ---- events ----------------------------------------------------------------------------------


class Run:
    """Builds one run's wire events with increasing seq."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seq = 0
        self.events: list[dict[str, Any]] = []

    def _add(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        ev = {"type": kind, "event_id": f"{self.run_id}-e{self.seq}", "run_id": self.run_id}
        ev.update(seq=self.seq, **fields)
        self.events.append(ev)
        return ev

    def call(self, tool: str, args: Any, outcome: dict[str, Any], want: bool = False) -> None:
        """One tool_call and its tool_result (`outcome` holds result or error)."""
        tcid = f"{self.run_id}-c{self.seq + 1}"
        self._add("tool_call", tool_call_id=tcid, tool=tool, args=args, want_verdict=want)
        self._add("tool_result", tool_call_id=tcid, tool=tool, args=args, **outcome)

    def compaction(self) -> None:
        """A successful compaction retry (goes to the compactions topic)."""
        self._add("compaction")


def _text(text: str) -> dict[str, Any]:
    return {"result": {"content": [{"type": "text", "text": text}], "details": {}}}


def expected_decisions(run: Run) -> list[dict[str, Any]]:
    """What the engine alone decides for the run's events, in order."""
    th = load_policy(POLICY).with_channel_tools(["telegram"]).for_agent(None)
    state = RunState()
    return [d.to_wire() for ev in run.events for d in process_event(state, parse_event(ev), th)]


def of_run(messages: list[Message], run_id: str) -> list[dict[str, Any]]:
    """A run's control messages in topic order (one run lives on one partition)."""
    return [m.json for m in sorted(messages, key=lambda m: m.offset) if m.key == run_id.encode()]


async def produce(bootstrap: str, records: list[tuple[str, bytes | None, bytes]]) -> None:
    """Send (topic, key, value) records in order and wait for every acknowledgement."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(t, v, key=k) for t, k, v in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


# ---- tests -----------------------------------------------------------------------------------


def _loops() -> dict[str, Run]:
    generic = Run("generic")
    for _ in range(21):
        generic.call("read", {"path": "/a"}, {"error": "File not found: /a"})
    poll = Run("poll")
    for _ in range(21):
        poll.call("process", {"action": "poll", "sessionId": "s1"}, _text("(no new output)"))
    ping = Run("pingpong")
    for i in range(20):
        ping.call(*(("read", {"path": "/a"}) if i % 2 else ("list", {"dir": "/w"})), _text("same"))
    unknown = Run("unknown")
    for i in range(11):
        unknown.call("exec", {"command": f"ls {i}"}, {"error": "Tool exec not found"})
    return {"generic_repeat": generic, "known_poll": poll, "ping_pong": ping, "unknown": unknown}


async def test_looping_runs_get_the_engines_loop_events_and_block_calls(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    runs = _loops()
    start_worker()
    records = [
        (topics.tool_calls, r.run_id.encode(), orjson.dumps(e))
        for r in runs.values()
        for e in r.events
    ]
    await produce(kafka.bootstrap, records)
    expected = {r.run_id: expected_decisions(r) for r in runs.values()}
    total = sum(len(v) for v in expected.values())
    got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= total, deadline=60)

    assert {run_id: of_run(got, run_id) for run_id in expected} == expected
    blocks = {m.json["run_id"] for m in got if m.json.get("command") == "block_call"}
    assert blocks == {"generic", "poll", "pingpong", "unknown"}


async def test_a_compaction_loop_aborts_the_run(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    run = Run("compacted")
    run.call("read", {"path": "/a"}, _text("same"))
    run.compaction()
    for _ in range(3):
        run.call("read", {"path": "/a"}, _text("same"))
    start_worker()
    records = [
        (topics.compactions if e["type"] == "compaction" else topics.tool_calls, b"compacted", v)
        for e in run.events
        for v in [orjson.dumps(e)]
    ]
    await produce(kafka.bootstrap, records)
    expected = expected_decisions(run)
    got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= len(expected), 60)

    assert sorted(of_run(got, "compacted"), key=orjson.dumps) == sorted(expected, key=orjson.dumps)
    assert [m.json["command"] for m in got if m.json["type"] == "command"] == ["abort_run"]


async def test_a_want_verdict_call_gets_its_verdict(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    run = Run("asks")
    run.call("read", {"path": "/a"}, _text("a"), want=True)
    worker = start_worker()
    await produce(kafka.bootstrap, [(topics.tool_calls, b"asks", orjson.dumps(run.events[0]))])
    got = await kafka.consume_count(topics.control, 1, deadline=60)

    assert [(m.key, m.json["type"], m.json["decision"], m.json["tool_call_id"]) for m in got] == [
        (b"asks", "verdict", "allow", "asks-c1")
    ]
    # Its batch's way through the worker, stage by stage (docs/performance.md).
    count = 'loopguard_verdict_stage_seconds_count{stage="%s"} 1.0'
    body = await worker.wait_until("/metrics", lambda b: count % "ack" in b, 20)
    assert all(count % stage in body for stage in ("fetch", "queue", "engine", "send"))


def _malformed(i: int) -> tuple[str, bytes | None, bytes]:
    """Malformed message number i: ten kinds, each with the reason it must be refused for."""
    good = {"type": "tool_call", "event_id": f"bad{i}", "run_id": f"bad{i}", "seq": 1}
    call = {**good, "tool": "read", "args": {"p": i}}
    kinds: list[tuple[str, bytes | None, bytes]] = [
        ("empty", None, b""),
        ("too_large", None, orjson.dumps({**call, "pad": "x" * 3000})),
        ("not_json", None, b"{not json " + str(i).encode()),
        ("not_object", None, b"[1, 2, 3]"),
        ("unknown_type", None, orjson.dumps({**call, "type": "tool_cal"})),
        ("missing_run_id", None, orjson.dumps({k: v for k, v in call.items() if k != "run_id"})),
        ("missing_event_id", None, orjson.dumps({**call, "event_id": ""})),
        ("invalid_seq", None, orjson.dumps({**call, "seq": "1"})),
        ("missing_args", None, orjson.dumps(good | {"tool": "read"})),
        ("key_mismatch", b"someone-else", orjson.dumps(call)),
    ]
    reason, key, value = kinds[i % 10]
    return reason, key if key is not None else f"bad{i}".encode(), value


async def test_malformed_messages_are_dead_lettered_while_good_ones_are_processed(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    worker = start_worker(max_message_bytes=2048, dead_letter_prefix_bytes=16)
    good = Run("good")
    records: list[tuple[str, bytes | None, bytes]] = []
    reasons: Counter[str] = Counter()
    for i in range(100):
        reason, key, value = _malformed(i)
        reasons[reason] += 1
        records.append((topics.tool_calls, key, value))
        if i % 4 == 0:
            good.call("read", {"path": f"/{i}"}, _text(str(i)), want=True)
            records += [(topics.tool_calls, b"good", orjson.dumps(e)) for e in good.events[-2:]]
    await produce(kafka.bootstrap, records)

    dead = await kafka.consume_count(topics.dead_letter, 100, deadline=60)
    assert Counter(m.json["reason"] for m in dead) == reasons
    assert all(m.json["topic"] == topics.tool_calls for m in dead)
    assert all(len(m.json["prefix"] or "") <= 16 for m in dead)
    assert len({(m.json["partition"], m.json["offset"]) for m in dead}) == 100

    verdicts = await kafka.consume_count(topics.control, 25, deadline=30)
    assert [m.json["tool_call_id"] for m in verdicts if m.json["type"] == "verdict"] == [
        e["tool_call_id"] for e in good.events if e["type"] == "tool_call"
    ]

    body = await worker.wait_until(
        "/metrics", lambda b: 'loopguard_events_total{type="tool_result"} 25.0' in b, 30
    )
    for reason, n in reasons.items():
        assert f'loopguard_events_rejected_total{{reason="{reason}"}} {float(n)}' in body
    assert 'loopguard_events_total{type="tool_call"} 25.0' in body
    assert "loopguard_processing_seconds_count 150.0" in body
    assert "good" not in body and "bad1" not in body  # no run id ever becomes a label


async def test_metrics_and_healthz_are_served_on_the_web_port(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    worker = start_worker()
    run = Run("looping")
    for _ in range(21):
        run.call("read", {"path": "/a"}, {"error": "nope"})
    await produce(
        kafka.bootstrap, [(topics.tool_calls, b"looping", orjson.dumps(e)) for e in run.events]
    )

    assert await worker.wait_until("/healthz", lambda b: True, 30) == "ok\n"
    body = await worker.wait_until(
        "/metrics", lambda b: 'loopguard_commands_total{command="block_call"} 1.0' in b, 60
    )
    assert (
        'loopguard_detections_total{detector="generic_repeat",level="critical",mode="enforce"} 1.0'
        in body
    )
    assert (
        'loopguard_detections_total{detector="generic_repeat",level="warning",mode="enforce"} 10.0'
        in body
    )
    assert "loopguard_runs_active 1.0" in body
    assert "loopguard_duplicates_total 0.0" in body
    # The compiled pass (make test-compiled) runs this worker on the compiled engine.
    engine = "compiled" if COMPILED else "python"
    assert f'loopguard_engine_info{{engine="{engine}"}} 1.0' in body


async def test_a_worker_with_other_channel_tools_replays_equal_with_the_channel_tools_flag(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO, tmp_path: Path
) -> None:
    # The same Slack message sent again and again, each result with a new message id: no
    # progress, so blocked, only where `slack` is a channel tool (docs/semantics.md).
    run = Run("sends")
    for i in range(25):
        sent = {"content": [{"type": "text", "text": "sent"}], "details": {"messageId": i}}
        run.call("slack", {"channel": "#ops", "text": "deploy failed"}, {"result": sent})
    start_worker(channel_tools="slack")
    records = [(topics.tool_calls, b"sends", orjson.dumps(e)) for e in run.events]
    await produce(kafka.bootstrap, records)

    async def replay(*flags: str) -> list[dict[str, Any]]:
        out = tmp_path / f"replay{len(flags)}.jsonl"
        argv = ["replay", "--topic", topics.tool_calls, "--broker", kafka.bootstrap,
                "--policy", str(tmp_path / "openclaw.json"), "--quiet", "--output", str(out),
                *flags]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        return [orjson.loads(line) for line in out.read_bytes().splitlines()]

    given = await replay("--channel-tools", "slack")
    assert sum(d.get("command") == "block_call" for d in given) == 5  # calls 21 to 25
    got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= len(given), deadline=60)
    assert of_run(got, "sends") == given
    assert not any(d.get("command") == "block_call" for d in await replay())
