"""Fleet signals in a live worker on the real broker (docs/fleet.md): an outage across runs
fires a signal, a runtime client repeating the failing call is blocked at its 4th call
naming the fleet evidence, and the signal resolves once the outage's windows are over; the
failing tool's health signal fires and resolves too; the recorded topics, replayed through
the same core, give the live control output byte for byte.

Event time is the client's own clock (the events' `ts`), moved by the test: no waiting for
windows to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.streams.audit.recorded import recompute_fleet_signals, replay_recorded_inputs
from loopguard_fleet.streams.client.runtime import RuntimeClient
from tests.wire import Clock, InputRecord
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    KafkaIO,
    Message,
    SessionBroker,
    TopicSet,
    deployment_settings,
)

WINDOW_S = 5
POLICY = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopguard": {
        "fleet": {
            "enabled": True,
            "windowSeconds": WINDOW_S,
            "minRuns": 3,
            "earlyAction": "block",
            "toolHealth": {"enabled": True, "minRuns": 3, "errorRatio": 0.5},
        }
    },
}
READ = {"path": "/etc/app.yaml"}
ENOENT = "ENOENT: no such file or directory, open '/etc/app.yaml'"


@pytest.fixture
def start_worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start this test's worker with fleet signals on; stopped by PID afterwards."""
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    # Commits every second, not at-least-once's 10 s: the kill tests wait for the worker to
    # commit past the records they are about.
    settings = deployment_settings(broker, topics, tmp_path, policy, commit_interval_seconds=1)
    launcher = WorkerLauncher(settings, tmp_path)
    yield launcher.start
    launcher.stop_all()


async def started(start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    """A worker past its start-up (topics created, so its ACLs held): one refused by the
    broker fails the test here, with its one-line reason, not as a missing signal later."""
    worker = start_worker()
    await worker.wait_until("/healthz", lambda body: True, 60)
    return worker


def signals(
    messages: Sequence[Message], state: str, kind: str | None = None
) -> list[dict[str, object]]:
    """The `fleet_signal` messages in a state: a signature's (kind None) or a tool's."""
    return [
        m.json
        for m in messages
        if m.json
        and m.json.get("type") == "fleet_signal"
        and m.json["state"] == state
        and m.json.get("kind") == kind
    ]


def tool_signals(messages: Sequence[Message]) -> tuple[list[str], dict[str, object]]:
    """The failing tool's health signal: its states in order (one per id), and its firing."""
    seen = {str(s["id"]): s for s in signals(messages, "firing", "tool")}
    seen |= {str(s["id"]): s for s in signals(messages, "resolved", "tool")}
    ordered = sorted(seen.values(), key=lambda s: (s["at_ms"], s["state"] == "firing"))  # type: ignore[arg-type,return-value]
    [firing] = [s for s in ordered if s["state"] == "firing"]
    assert {s["signal_id"] for s in ordered} == {firing["signal_id"]}
    assert firing["tool"] == "read" and firing["runs"] >= 3 and firing["ratio"] >= 0.5  # type: ignore[operator]
    return [str(s["state"]) for s in ordered], firing


def bad_uses_of(first: int, end: int) -> Callable[[Sequence[Message]], bool]:
    """True once the fleet topic holds a bad tool use of each of these broken runs."""
    want = {f"broken-{i}" for i in range(first, end)}

    def seen(messages: Sequence[Message]) -> bool:
        bad = {
            m.json["run_id"]
            for m in messages
            if m.json and m.json.get("type") == "fleet_tool_use" and m.json.get("bad")
        }
        return want <= bad

    return seen


def both_resolved(messages: Sequence[Message]) -> bool:
    """The signature's and the tool's signals both resolved."""
    return bool(signals(messages, "resolved")) and bool(signals(messages, "resolved", "tool"))


async def outage(client: RuntimeClient, clock: Clock) -> None:
    """Four runs on four agents retry the same failing read; then a healthy run's events,
    1.5 s of event time later, carry the watermark past the signal's firing."""
    for i in range(4):
        run = client.run(f"broken-{i}", agent_id=f"agent-{i}")
        for _ in range(2):
            cid = await run.tool_call("read", READ)
            await run.tool_result(cid, "read", READ, error=ENOENT)
            clock.ms += 100
    clock.ms += 1500
    healthy = client.run("healthy", agent_id="agent-0")
    cid = await healthy.tool_call("read", {"path": "README.md"})
    await healthy.tool_result(cid, "read", {"path": "README.md"}, result="# Project")
    await client.flush()


async def signal_everywhere(kafka: KafkaIO, topics: TopicSet) -> list[Message]:
    """The input records once the firing signal is on every tool-calls partition."""
    inputs = await kafka.consume_until(
        topics.tool_calls, lambda ms: len(signals(ms, "firing")) >= topics.partitions, 60
    )
    assert {m.partition for m in inputs if m.json and m.json.get("type") == "fleet_signal"} == set(
        range(topics.partitions)
    )
    return inputs


async def late_run(client: RuntimeClient, clock: Clock) -> tuple[list[str], str | None]:
    """A run that starts after the signal and repeats the failing read 4 times, waiting for
    each verdict: the decisions and the last one's message."""
    late = client.run("late", agent_id="agent-9")
    decisions, message = [], None
    for _ in range(4):
        clock.ms += 100
        cid = await late.tool_call("read", READ, want_verdict=True)
        reply = await late.verdict(cid, timeout=10)
        decisions.append(reply.decision)
        message = reply.message
        await late.tool_result(cid, "read", READ, error=ENOENT)
    return decisions, message


async def test_an_outage_fires_blocks_a_runtime_early_and_resolves(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    worker = await started(start_worker)
    clock = Clock()
    async with RuntimeClient(kafka.bootstrap, topics=topics, clock=clock) as client:
        await outage(client, clock)
        control = await kafka.consume_until(
            topics.control, lambda ms: bool(signals(ms, "firing")), 60
        )
        [firing] = signals(control, "firing")
        assert (firing["tool"], firing["runs"], firing["is_failure"]) == ("read", 3, True)
        # The signal reached every input partition, where workers apply it in offset order.
        await signal_everywhere(kafka, topics)

        decisions, message = await late_run(client, clock)
        assert decisions == ["allow", "allow", "allow", "block"]
        assert "read failing the same way in 3 runs across 3 agents" in (message or "")

        clock.ms += 3 * WINDOW_S * 1000  # the outage's windows are over
        healthy = client.run("healthy", agent_id="agent-0", start_seq=2)
        await healthy.tool_call("read", {"path": "README.md"})
        await client.flush()
        control = await kafka.consume_until(topics.control, both_resolved, 30)
    [resolved] = signals(control, "resolved")
    assert resolved["signal_id"] == firing["signal_id"]
    states, tool = tool_signals(control)
    assert states == ["firing", "resolved"]
    assert set(tool["sample_run_ids"]) <= {f"broken-{i}" for i in range(4)} | {"late"}  # type: ignore[arg-type]
    blocks = [m.json for m in control if m.json and m.json.get("command") == "block_call"]
    assert [b["run_id"] for b in blocks] == ["late"] and blocks[0]["detector"] == "fleet_signal"

    resolved_line = 'loopguard_fleet_signals_total{state="resolved"} 1.0'
    body = await worker.wait_until("/metrics", lambda b: resolved_line in b, 20)
    assert 'loopguard_fleet_signals_total{state="firing"} 1.0' in body
    assert "loopguard_fleet_signatures_firing 0.0" in body
    assert 'loopguard_fleet_tool_signals_total{state="resolved"} 1.0' in body
    assert "loopguard_fleet_tools_firing 0.0" in body
    early = 'loopguard_detections_total{detector="fleet_signal",level="critical",mode="enforce"}'
    assert f"{early} 1.0" in body

    # Audit: the recorded topics through the same core give the live control output, byte
    # for byte (each run's messages, and each signature's signals, in their order).
    sent = 4 * 2 * 2 + 3 + 4 * 2  # the broken runs', the healthy run's and late's events
    expected = sent + 2 * topics.partitions  # and each signal change on every partition
    inputs = await kafka.consume_count(topics.tool_calls, expected)
    assert len(inputs) == expected
    fleet = await kafka.consume_until(fleet_topic_of(topics.group_id), deadline=1)
    policy = load_policy(POLICY)
    replayed = replay_recorded_inputs(policy, [record(m) for m in inputs])
    live_runs = [m.value or b"" for m in control if m.json.get("type") != "fleet_signal"]
    assert by_key(replayed, "run_id") == by_key(live_runs, "run_id")
    recomputed = recompute_fleet_signals(policy.fleet, [record(m) for m in fleet])
    live_signals = [m.value or b"" for m in control if m.json.get("type") == "fleet_signal"]
    assert by_key(recomputed, "signature") == by_key(live_signals, "signature")
    assert len(live_signals) == 4  # the signature's and the tool's, firing and resolved


def record(m: Message) -> InputRecord:
    """A consumed record as the processing core reads one."""
    return InputRecord(m.topic, m.partition, m.offset, None, m.key, m.value)


def by_key(values: list[bytes], field: str) -> dict[object, list[bytes]]:
    """Control messages grouped by run (or signature), each group in its order."""
    out: dict[object, list[bytes]] = {}
    for v in values:
        doc = orjson.loads(v)
        out.setdefault(doc.get(field, ("tool", doc.get("tool"))), []).append(v)
    return out


async def committed(
    kafka: KafkaIO, topics: TopicSet, topic: str | None = None
) -> dict[tuple[str, int], int]:
    """The worker group's committed offsets on a topic (the tool-calls topic by default)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=5000)
    tps = [TopicPartition(topic or topics.tool_calls, p) for p in range(topics.partitions)]
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(topics.group_id, partitions=tps)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}


async def test_a_worker_killed_after_applying_a_signal_still_blocks_early_when_restarted(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    worker = await started(start_worker)
    clock = Clock()
    async with RuntimeClient(kafka.bootstrap, topics=topics, clock=clock) as client:
        await outage(client, clock)
        inputs = await signal_everywhere(kafka, topics)
        # Until the worker committed past every signal record: a restarted worker does not
        # read them again, it loads each partition's firing set from its table.
        past = {
            (m.topic, m.partition): m.offset + 1
            for m in inputs
            if m.json and m.json.get("type") == "fleet_signal"
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while any(
            committed_at < past[tp] for tp, committed_at in (await committed(kafka, topics)).items()
        ):
            assert loop.time() < deadline, "the worker did not commit past the signal records"
            await asyncio.sleep(0.2)
        worker.kill()
        start_worker()
        decisions, message = await late_run(client, clock)
    assert decisions == ["allow", "allow", "allow", "block"]
    assert "read failing the same way" in (message or "")


async def fleet_committed_to_its_end(kafka: KafkaIO, topics: TopicSet) -> None:
    """Until the worker committed every fleet record so far: the fleet state that counts them
    is written (docs/fleet.md), so a restarted worker does not read them again."""
    topic = fleet_topic_of(topics.group_id)
    records = await kafka.consume_until(topic, deadline=1)  # Tansu under-reports end offsets
    want = {(m.topic, m.partition): m.offset + 1 for m in records}  # offset order per partition
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while {
        tp: at for tp, at in (await committed(kafka, topics, topic)).items() if tp in want
    } != want:
        assert loop.time() < deadline, f"fleet records not committed: {want}"
        await asyncio.sleep(0.2)


async def test_a_worker_killed_during_an_outage_fires_once_and_resolves_once_restarted(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    worker = await started(start_worker)
    clock = Clock()
    async with RuntimeClient(kafka.bootstrap, topics=topics, clock=clock) as client:
        await outage(client, clock)
        await kafka.consume_until(topics.control, lambda ms: bool(signals(ms, "firing")), 60)
        await fleet_committed_to_its_end(kafka, topics)
        worker.kill()  # SIGKILL by PID, in the middle of the outage
        start_worker()  # another data dir: its fleet state comes from the changelog
        for i in range(4, 8):  # the outage goes on: more runs fail the same way
            run = client.run(f"broken-{i}", agent_id=f"agent-{i}")
            for _ in range(2):
                cid = await run.tool_call("read", READ)
                await run.tool_result(cid, "read", READ, error=ENOENT)
                clock.ms += 100
        await client.flush()
        # Their tool uses reach the fleet task before the event time that closes the windows:
        # the restarted worker reads its input partitions in its own order, and a use behind
        # a tick more than 1 s later would be late (docs/fleet.md, "Limits").
        await kafka.consume_until(fleet_topic_of(topics.group_id), bad_uses_of(4, 8), 30)
        clock.ms += 3 * WINDOW_S * 1000  # then it is over
        healthy = client.run("healthy", agent_id="agent-0", start_seq=2)
        await healthy.tool_call("read", {"path": "README.md"})
        await client.flush()
        control = await kafka.consume_until(topics.control, both_resolved, 60)
    firing, resolved = signals(control, "firing"), signals(control, "resolved")
    assert [len(firing), len(resolved)] == [1, 1]
    assert resolved[0]["signal_id"] == firing[0]["signal_id"]
    # The tool's counts were restored with the fleet state: one signal, resolved by its id.
    states, _ = tool_signals(control)
    assert states == ["firing", "resolved"]


def contribution(signature: str, run: str, ts: int) -> bytes:
    """A fleet topic record as a worker sends one for a run's retried failure."""
    record = {
        "type": "fleet_observation", "signature": signature, "tool": "read", "run_id": run,
        "agent_id": f"agent-{run}", "ts": ts, "streak": 1, "is_failure": True,
    }  # fmt: skip
    return orjson.dumps(record)


async def test_a_fleet_state_larger_than_one_record_survives_a_restart(
    start_worker: Callable[..., WorkerProcess], topics: TopicSet, kafka: KafkaIO
) -> None:
    """6,000 single-run signatures on one fleet partition (about 1 MB of state, over a table
    record's budget) and two runs of one more: the state is written in chunks, the commit
    passes, and a worker restarted on another data dir counts a third run of that signature
    as the third: it fires with 3 runs."""
    worker = await started(start_worker)
    topic, now = fleet_topic_of(topics.group_id), Clock().ms
    stuck = "5" * 32
    filler = [contribution(f"{i:032x}", f"filler-{i}", now) for i in range(6_000)]
    first_two = [contribution(stuck, f"stuck-{i}", now + i) for i in range(2)]
    await kafka.produce_raw(topic, filler + first_two, key=b"one-partition")
    await fleet_committed_to_its_end(kafka, topics)  # the state that counts them is written
    worker.kill()
    start_worker()  # another data dir: the state comes from the changelog
    tick = orjson.dumps({"type": "fleet_tick", "ts": now + 2_000})
    await kafka.produce_raw(
        topic, [contribution(stuck, "stuck-2", now + 2), tick], key=b"one-partition"
    )
    control = await kafka.consume_until(topics.control, lambda ms: bool(signals(ms, "firing")), 60)
    [firing] = signals(control, "firing")
    assert (firing["signature"], firing["runs"]) == (stuck, 3)
    assert firing["sample_run_ids"] == ["stuck-0", "stuck-1", "stuck-2"]
