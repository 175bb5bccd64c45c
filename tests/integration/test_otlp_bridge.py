"""The live OTLP bridge on the real broker: a worker with `LOOPGUARD_TOPIC_OTLP_SPANS` set
reads the Collector's `otlp_proto` payloads, and its control output for each run equals
`loopguard replay --topic <the OTLP topic> --input-format otlp`, object for object: with the
default mapping, with `LOOPGUARD_OTLP_*` settings and the matching flags, and across a worker
SIGKILLed mid-stream and restarted. A payload that is not OTLP goes to the dead-letter topic
with its reason. An agent loop traced with the OpenTelemetry SDK is decided as the same loop
sent through `RuntimeClient`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors.jsjson import loads
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines
from loopguard_fleet.streams.client.runtime import RunHandle, RuntimeClient
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.otlp.core import WATERMARK_PREFIX, SpanBridge
from loopguard_fleet.streams.otlp.options import OtlpOptions
from tests.chaos.invariants import decision_id
from tests.otlp import (
    Call,
    ToolFailed,
    export_request,
    failing_script,
    looping_script,
    run_tool,
    sdk_traced,
)
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    KafkaIO,
    Message,
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
    # Commits every second, not at-least-once's 10 s: tests wait for the worker's commits, and
    # the kill test must strike at one within its 6 s stream.
    settings = deployment_settings(
        broker, topics, tmp_path, policy, topic_otlp_spans=otlp_topic, commit_interval_seconds=1
    )
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


def _replay(bootstrap: str, topic: str, policy: Path, *flags: str) -> list[dict[str, Any]]:
    got = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "--topic", topic,
         "--broker", bootstrap, "--input-format", "otlp", "--policy", str(policy), "--quiet",
         *flags],
        capture_output=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    return [json.loads(line) for line in got.stdout.decode().splitlines()]


async def _decisions(kafka: KafkaIO, topic: str, policy: Path, *flags: str) -> list[dict[str, Any]]:
    """What `replay --topic <the OTLP topic> --input-format otlp FLAGS` decides, verdicts aside
    (the worker publishes a verdict only to a runtime that asks for one)."""
    decided = await asyncio.to_thread(_replay, kafka.bootstrap, topic, policy, *flags)
    return [d for d in decided if d["type"] != "verdict"]


def _payloads(
    size: int, run_key: str = "gen_ai.conversation.id", calls: list[Call] | None = None
) -> list[bytes]:
    """The calls (the looping script's by default), in start order, `size` a Collector batch
    (`otlp_proto`)."""
    calls = sorted(calls or looping_script(), key=lambda c: c.start_ns)
    return [
        export_request(calls[i : i + size], run_key=run_key).SerializeToString()
        for i in range(0, len(calls), size)
    ]


def _deduplicated(messages: list[Message]) -> list[Message]:
    """The first control message of each decision id, in topic order (at-least-once: a worker
    restarted mid-stream publishes again what it decided after its last commit)."""
    seen: set[str] = set()
    out = []
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        assert m.json is not None
        if (key := decision_id(m.json)) not in seen:
            seen.add(key)
            out.append(m)
    return out


async def _wait_committed(kafka: KafkaIO, group: str, topic: str, records: int) -> None:
    """Wait until the group's commit passes the `records` produced on the OTLP topic (20 s at
    most): beyond them, only the watermark records the worker wrote onto it."""
    deadline = asyncio.get_running_loop().time() + 20
    while (done := await _committed(kafka, group, topic)) < records:
        assert asyncio.get_running_loop().time() < deadline, f"{done} committed"
        await asyncio.sleep(0.2)
    written = await kafka.consume_until(topic, lambda ms: len(ms) >= done, deadline=5)
    assert sum(not m.value.startswith(WATERMARK_PREFIX) for m in written if m.value) == records


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
    # A request holding one call twice (a retry inside a batch) and a model call: the
    # bridge decides the call once and counts the other two (a run of its own, so the
    # count cannot depend on when a watermark record forgets the other runs).
    dup = Call("run-dup", "main", 900, "read", '{"path": "/d"}', "ok")
    model_call = Span(
        trace_id=dup.span().trace_id, span_id=b"model-01", name="chat",
        start_time_unix_nano=dup.start_ns, end_time_unix_nano=dup.end_ns,
        attributes=[KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat"))],
    )  # fmt: skip
    payloads.append(export_request([dup], extra=[dup.span(), model_call]).SerializeToString())
    await kafka.produce_raw(otlp_topic, payloads, key=b"collector-1")
    expected = await _decisions(kafka, otlp_topic, tmp_path / "openclaw.json")
    assert any(d.get("command") == "block_call" for d in expected)

    worker = start_worker()
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
    await _wait_committed(kafka, topics.group_id, otlp_topic, len(payloads))
    ignored = 'loopguard_otlp_spans_ignored_total{reason="%s"} 1.0'
    await worker.wait_until(
        "/metrics", lambda b: ignored % "duplicate" in b and ignored % "other_kind" in b, 20
    )


async def test_the_otlp_settings_decide_live_as_the_matching_replay_flags_do(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    otlp_topic: str,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    # The run id under an attribute of the operator's: with the default mapping every run
    # would be its trace id, so only the setting makes these runs "run-loop" and "run-pp".
    await create_topics(kafka.bootstrap, [otlp_topic], 1, security=operator_security(broker))
    await kafka.produce_raw(otlp_topic, _payloads(6, run_key="app.run"), key=b"collector-1")
    flags = ["--otlp-run-id-keys", "app.run", "--otlp-privacy", "--otlp-openinference",
             "--otlp-reorder-window", "5", "--otlp-dedupe-memory", "60"]  # fmt: skip
    expected = await _decisions(kafka, otlp_topic, tmp_path / "openclaw.json", *flags)
    assert any(d.get("command") == "block_call" for d in expected)

    start_worker(
        otlp_run_id_keys="app.run", otlp_privacy="true", otlp_openinference="true",
        otlp_reorder_window_seconds=5, otlp_dedupe_memory_seconds=60,
    )  # fmt: skip
    got = await kafka.consume_until(
        topics.control, lambda ms: len(ms) >= len(expected), deadline=60
    )
    assert {m.key for m in got} == {b"run-loop", b"run-pp"}
    for run_id in ("run-loop", "run-pp"):
        want = [d for d in expected if d.get("run_id") == run_id]
        assert want and of_run(got, run_id) == want


async def test_a_bridge_killed_mid_stream_and_restarted_loses_nothing(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    otlp_topic: str,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    await create_topics(kafka.bootstrap, [otlp_topic], 2, security=operator_security(broker))
    # A record that is not OTLP: its dead letter says the bridge is up.
    await kafka.produce_raw(otlp_topic, [b"not OTLP"], key=b"collector-1")
    first = start_worker()
    await kafka.consume_count(topics.dead_letter, 1, deadline=60)
    # Spans of the last second, a call every 0.1 s, sent two calls every 0.2 s, as they end:
    # the 2 s reorder window holds the last ten records' spans at any time, so a kill loses
    # them unless their records are read again.
    calls = looping_script(time.time_ns() - 1_000_000_000, step_ns=100_000_000)
    payloads = [b"not OTLP", *_payloads(2, calls=calls)]

    async def collector() -> None:
        """The spans as a Collector sends them: a batch at a time, while the worker runs."""
        for payload in payloads[1:]:
            await kafka.produce_raw(otlp_topic, [payload], key=b"collector-1")
            await asyncio.sleep(0.2)

    streaming = asyncio.create_task(collector())
    # Kill at the first commit past the first record: the restarted bridge resumes mid-topic,
    # from the first record whose spans were still held, while records are still arriving.
    deadline = asyncio.get_running_loop().time() + 20
    while (committed := await _committed(kafka, topics.group_id, otlp_topic)) <= 1:
        assert asyncio.get_running_loop().time() < deadline, f"{committed} committed"
        await asyncio.sleep(0.05)
    first.kill()  # SIGKILL, by PID: no commit, no flush
    await streaming
    assert committed < len(payloads), "killed after the stream: nothing was mid-stream"
    start_worker(web_port=first.port)  # the same data dir: its table's local state

    expected = await _decisions(kafka, otlp_topic, tmp_path / "openclaw.json")
    assert any(d.get("command") == "block_call" for d in expected)
    ids = {decision_id(d) for d in expected}
    got = await kafka.consume_until(
        topics.control,
        lambda ms: ids <= {decision_id(m.json) for m in ms if m.json is not None},
        deadline=60,
    )
    print(f"otlp kill: {committed} of {len(payloads)} records committed at the kill, "
          f"{len(got) - len(_deduplicated(got))} control messages published twice")  # fmt: skip
    unique = _deduplicated(got)
    for run_id in ("run-loop", "run-pp"):
        want = [d for d in expected if d.get("run_id") == run_id]
        assert want and of_run(unique, run_id) == want
    await _wait_committed(kafka, topics.group_id, otlp_topic, len(payloads))


async def test_live_and_a_replay_of_the_span_topic_send_the_same_bytes_with_late_spans(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    otlp_topic: str,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # Spans of a few seconds ago: the worker's watermark record releases 1 and 3 once the
    # partition is quiet; 2 (started between them) then arrives late and a retry of 1 and 3
    # is a duplicate. A replay of the span topic reads that watermark record too, so its
    # core sends the live bridge's bytes and refuses the same span.
    await create_topics(kafka.bootstrap, [otlp_topic], 1, security=operator_security(broker))
    t0 = time.time_ns() - 5_000_000_000
    calls = {n: Call("run-late", "main", n, "read", '{"path": "/a"}', "ok", t0, 100_000_000)
             for n in (1, 2, 3)}  # fmt: skip
    first = export_request([calls[1], calls[3]]).SerializeToString()
    start_worker(otlp_reorder_window_seconds=1, otlp_dedupe_memory_seconds=60)
    await kafka.produce_raw(otlp_topic, [first], key=b"collector-1")
    await kafka.consume_count(topics.tool_calls, 4, deadline=30)  # released: 2 calls, 2 results
    late = export_request([calls[2]]).SerializeToString()
    await kafka.produce_raw(otlp_topic, [first, late], key=b"collector-1")
    (dead,) = await kafka.consume_count(topics.dead_letter, 1, deadline=30)
    assert dead.json is not None and dead.json["reason"] == "otlp_late_span"

    records = await kafka.consume_until(otlp_topic, lambda ms: any(m.value == late for m in ms))
    replay = SpanBridge.of_options(OtlpOptions(reorder_window_s=1, dedupe_memory_s=60), 1_048_576)
    steps = [replay.feed(m.value) for m in sorted(records, key=lambda m: m.offset)]
    want = [event for step in steps for event in step.events]
    assert [r.reason for step in steps for r in step.refused] == ["otlp_late_span"]
    assert replay.order.held == 0
    live = await kafka.consume_count(topics.tool_calls, len(want) + 1, deadline=2)
    assert [(m.key, m.value) for m in sorted(live, key=lambda m: m.offset)] == want


async def _through_runtime_client(client: RuntimeClient, calls: list[Call]) -> None:
    """The scripted loop run by an agent runtime that reports its calls with `client`."""
    runs: dict[str, RunHandle] = {}
    for c in sorted(calls, key=lambda c: c.n):
        if c.run_id not in runs:
            runs[c.run_id] = client.run(c.run_id, agent_id=c.agent_id)
        args = loads(c.args)
        call_id = await runs[c.run_id].tool_call(c.tool, args, f"call-{c.n}")
        try:
            outcome: dict[str, Any] = {"result": run_tool(c)}
        except ToolFailed as exc:
            outcome = {"error": exc}
        await runs[c.run_id].tool_result(call_id, c.tool, args, **outcome)
    await client.flush(10)


#: What a control message's run id makes: its own ids, and the seqs, which the bridge takes
#: from span start times and a runtime client counts.
_OF_THE_RUN = ("run_id", "trigger_event_id", "seq", "id", "command_id")


def _decisions_by_call(
    messages: list[dict[str, Any]], calls: Mapping[tuple[str, int], tuple[str, str]]
) -> list[dict[str, Any]]:
    """A run's control messages without what its run id makes, each naming the event that
    triggered it by its tool call id and type (`calls`: by run id and seq)."""
    return [
        {**{k: v for k, v in m.items() if k not in _OF_THE_RUN},
         "trigger": calls[m["run_id"], m["seq"]]}
        for m in messages
    ]  # fmt: skip


async def test_an_agent_traced_with_the_sdk_is_decided_as_through_the_runtime_client(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    otlp_topic: str,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # The same loop twice: traced with the real SDK and written as the Collector's Kafka
    # exporter writes spans (runs "otel-…"), and through RuntimeClient (runs "client-…").
    # Spans arrive after the tools ran, so the bridge's runs are never gated: the test
    # compares what the worker decided, not what it stopped.
    await create_topics(kafka.bootstrap, [otlp_topic], 1, security=operator_security(broker))
    script = looping_script() + failing_script()
    start_worker()
    otel = [replace(c, run_id=f"otel-{c.run_id}") for c in script]
    await kafka.produce_raw(otlp_topic, sdk_traced(otel, 6), key=b"collector-1")
    client = RuntimeClient(kafka.bootstrap, topics=topics, security=operator_security(broker))
    async with client:
        await _through_runtime_client(
            client, [replace(c, run_id=f"client-{c.run_id}") for c in script]
        )

    def tool_events(ms: list[Message]) -> list[dict[str, Any]]:
        return [m.json for m in ms if m.json and m.json.get("type") in ("tool_call", "tool_result")]

    # Every call's two events, from both: the bridge released its last spans.
    published = await kafka.consume_until(
        topics.tool_calls, lambda ms: len(tool_events(ms)) >= 4 * len(script), deadline=60
    )
    # How many control messages to wait for: what replay decides of them (replay equals live).
    lines = [m.value for m in sorted(published, key=lambda m: (m.partition, m.offset))]
    decided = replay_lines(Replayer(load_policy(POLICY)), [v for v in lines if v])
    count = sum(not isinstance(d, Rejected) for d in decided)
    got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= count, deadline=30)
    calls = {
        (e["run_id"], e["seq"]): (e["tool_call_id"], e["type"]) for e in tool_events(published)
    }
    for run_id in ("run-loop", "run-pp", "run-fail"):
        traced = _decisions_by_call(of_run(got, f"otel-{run_id}"), calls)
        assert traced and traced == _decisions_by_call(of_run(got, f"client-{run_id}"), calls)
        assert traced[-1].get("command") == "block_call", run_id
