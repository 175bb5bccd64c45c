"""The policy topic on the real broker: `loopguard policy push` and `show`, a live worker that
takes each valid version without a restart, and refuses an invalid record (dead letter,
counter) while it keeps deciding with the last good version."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.policy_record import POLICY_KEY
from loopguard_fleet.streams.cli import main
from tests.wire import RunScript
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    KafkaIO,
    Message,
    SessionBroker,
    TopicSet,
    deployment_settings,
    grant_topic_set,
)
from .test_worker import of_run, produce

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "openclaw-P1-r5.jsonl"
ENFORCE = {"tools": {"loopDetection": {"enabled": True}}}
OBSERVE = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"mode": "observe"}}


@pytest.fixture
async def policy_topic(broker: SessionBroker, topics: TopicSet) -> str:
    """This test's own policy topic (the worker creates it), granted as docs/security.md says."""
    name = f"{topics.group_id}.policy"
    await grant_topic_set(broker, topics, policy=name)
    return name


@pytest.fixture
def start_worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, policy_topic: str
) -> Iterator[Callable[..., WorkerProcess]]:
    """A worker on the enforcing policy file that follows the policy topic."""
    policy_file = tmp_path / "enforce.json"
    policy_file.write_bytes(orjson.dumps(ENFORCE))
    launcher = WorkerLauncher(
        deployment_settings(broker, topics, tmp_path, policy_file, policy_topic=policy_topic),
        tmp_path,
    )
    yield launcher.start
    launcher.stop_all()


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `loopguard …` (it runs its own event loop, so in a thread); exit code and output."""
    code = await asyncio.to_thread(main, list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _version_is(version: str) -> Callable[[str], bool]:
    return lambda body: f'loopguard_policy_info{{version="{version}"}} 1.0' in body


async def test_push_switches_a_live_worker_and_an_invalid_record_changes_nothing(
    start_worker: Callable[..., WorkerProcess],
    topics: TopicSet,
    kafka: KafkaIO,
    policy_topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    enforce, observe = load_policy(ENFORCE), load_policy(OBSERVE)
    worker = start_worker()
    await worker.wait_until("/metrics", _version_is(enforce.version), 30)  # the file's

    # A record no push would write: refused, dead-lettered, counted; the file's version stays.
    await kafka.produce_raw(policy_topic, [b"{not json"], key=POLICY_KEY)
    letters = await kafka.consume_until(topics.dead_letter, lambda ms: len(ms) >= 1, 30)
    assert [m.json["reason"] for m in letters] == ["policy_not_json"]  # type: ignore[index]
    body = await worker.wait_until("/metrics", lambda b: "policy_not_json" in b, 10)
    assert 'loopguard_events_rejected_total{reason="policy_not_json"} 1.0' in body
    assert _version_is(enforce.version)(body)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"loopguard": {"tools": {"read": {"criticalThreshold": 0}}}}))
    broker = kafka.bootstrap
    code, _, err = await _cli(capsys, "policy", "push", str(bad), "--broker", broker,
                              "--topic", policy_topic)  # fmt: skip
    assert code == 1 and "loopguard.tools.read.criticalThreshold" in err

    async def push(policy: dict[str, Any]) -> tuple[int, list[str]]:
        path = tmp_path / "push.json"
        path.write_text(json.dumps(policy))
        code, out, _ = await _cli(capsys, "policy", "push", str(path), "--broker", broker,
                                  "--topic", policy_topic)  # fmt: skip
        return code, out.splitlines()

    code, lines = await push(ENFORCE)  # the first version on the topic: every line is new
    assert code == 0 and lines[0] == f"none → {enforce.version} ({policy_topic} offset 1)"
    assert 'global.mode: (none) → "enforce"' in lines
    assert await push(ENFORCE) == (0, [f"{enforce.version} is already live on {policy_topic}: "
                                       "nothing pushed"])  # fmt: skip
    code, lines = await push(OBSERVE)
    assert (code, lines) == (
        0,
        [
            f"{enforce.version} → {observe.version} ({policy_topic} offset 2)",
            'global.mode: "enforce" → "observe"',
        ],
    )
    await worker.wait_until("/metrics", _version_is(observe.version), 10)

    # Same worker, no restart: the next run is decided by the pushed version, in shadow.
    events = [json.loads(line) for line in TRACE.read_text().splitlines()]
    run_id = events[0]["run_id"]
    await produce(broker, [(topics.tool_calls, run_id.encode(), orjson.dumps(e)) for e in events])
    got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= 100, 60)
    decisions: list[dict[str, Any]] = of_run(got, run_id)
    assert decisions and {d["policy_version"] for d in decisions} == {observe.version}
    assert {d["type"] for d in decisions} == {"loop_event"}

    code, out, _ = await _cli(capsys, "policy", "show", "--broker", broker, "--topic", policy_topic)
    assert code == 0
    shown = json.loads(out)
    assert (shown["version"], shown["offset"], shown["global"]["mode"]) == (
        observe.version,
        2,
        "observe",
    )


SWITCHED = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3,
                                        "criticalThreshold": 5,
                                        "postCompactionGuard": {"windowSize": 2}}}}  # fmt: skip


def _reads(topic: str, runs: list[RunScript]) -> Callable[[int], list[tuple[str, bytes, bytes]]]:
    """`reads(n)`: `n` more identical reads of every run (a generic repeat), as records."""

    def reads(n: int) -> list[tuple[str, bytes, bytes]]:
        events = [(run, e) for run in runs for _ in range(n)
                  for e in run.both("read", {"path": "/x"}, result="same")]  # fmt: skip
        return [(topic, run.run_id.encode(), orjson.dumps(e)) for run, e in events]

    return reads


async def _replayed_topic(
    capsys: pytest.CaptureFixture[str],
    kafka: KafkaIO,
    topic: str,
    policy: Path,
    follows: str,
    *more: str,
) -> list[bytes]:
    """`loopguard replay --topic` of `topic` (names, comma-separated), with the workers'
    policy file and their policy topic's switches: its control messages."""
    code, out, _ = await _cli(capsys, "replay", "--topic", topic, "--broker", kafka.bootstrap,
                              "--policy", str(policy), "--policy-topic", follows,
                              "--quiet", *more)  # fmt: skip
    assert code == 0
    return out.encode().splitlines()


async def test_live_decisions_equal_the_topic_replay_byte_for_byte_across_a_switch(
    start_worker: Callable[..., WorkerProcess],
    topics: TopicSet,
    kafka: KafkaIO,
    policy_topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    enforce, switched = load_policy(ENFORCE), load_policy(SWITCHED)
    worker = start_worker()
    await worker.wait_until("/metrics", _version_is(enforce.version), 30)
    runs = [RunScript(f"switch-run-{i}") for i in range(6)]  # over the 4 partitions
    reads = _reads(topics.tool_calls, runs)

    # The 11th read warns under the start-up policy; after the push, the 12th is critical.
    await produce(kafka.bootstrap, reads(11))
    await kafka.consume_until(topics.control, lambda ms: len(ms) >= len(runs), 30)
    path = tmp_path / "switched.json"
    path.write_text(json.dumps(SWITCHED))
    code, _, _ = await _cli(capsys, "policy", "push", str(path), "--broker", kafka.bootstrap,
                            "--topic", policy_topic)  # fmt: skip
    assert code == 0
    await worker.wait_until("/metrics", _version_is(switched.version), 10)
    await produce(kafka.bootstrap, reads(1))
    # Compacted runs after the switch: the compaction event arms the new version's 2-result
    # guard window (the start-up policy's is 3), so the 2nd identical result aborts the run.
    # The compactions topic-partitions switch at their own switch records: wait for those.
    await kafka.consume_until(topics.compactions, lambda ms: len(ms) >= topics.partitions, 10)
    compacted = [RunScript(f"compacted-run-{i}") for i in range(4)]
    since = datetime.now(UTC).isoformat()  # only the compacted runs' records are after it
    await produce(kafka.bootstrap, [(topics.compactions, r.run_id.encode(),
                                     orjson.dumps(r.compaction())) for r in compacted])  # fmt: skip
    await produce(kafka.bootstrap, _reads(topics.tool_calls, compacted)(2))
    expected = 3 * len(runs) + 2 * len(compacted)  # an abort: its loop event and abort_run
    live = await kafka.consume_until(topics.control, lambda ms: len(ms) >= expected, 30)

    enforcing = tmp_path / "enforce.json"
    # Both input topics merged into each run's seq order, each topic-partition's switches
    # applied at its own offsets, as the worker applies them.
    both = f"{topics.tool_calls},{topics.compactions}"
    replayed = await _replayed_topic(capsys, kafka, both, enforcing, policy_topic)
    for run in runs + compacted:
        key = run.run_id.encode()
        of_this = [m.value for m in sorted(live, key=lambda m: m.offset) if m.key == key]
        assert of_this == [line for line in replayed if orjson.loads(line)["run_id"] == run.run_id]
    assert len(replayed) == len(live) == expected
    levels = {(m.json["policy_version"], m.json.get("level"), m.json.get("detector"))
              for m in live if m.json.get("level")}  # fmt: skip
    assert {(v, level) for v, level, _ in levels} == {
        (enforce.version, "warning"),
        (switched.version, "critical"),
    }
    assert (switched.version, "critical", "compaction_loop_persisted") in levels

    # From a time after the switches: each topic-partition starts with the switch in force
    # there (read before the start), not with --policy.
    replayed = await _replayed_topic(capsys, kafka, both, enforcing, policy_topic, "--from", since)
    assert replayed == [m.value for m in sorted(live, key=lambda m: (m.key or b"", m.offset))
                        if m.key in {r.run_id.encode() for r in compacted}]  # fmt: skip


async def test_a_worker_killed_after_a_switch_decides_again_as_the_replay_does(
    start_worker: Callable[..., WorkerProcess],
    topics: TopicSet,
    kafka: KafkaIO,
    policy_topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    switched = load_policy(SWITCHED)
    worker = start_worker()
    await worker.wait_until("/metrics", _version_is(load_policy(ENFORCE).version), 30)
    runs = [RunScript(f"killed-run-{i}") for i in range(6)]
    reads = _reads(topics.tool_calls, runs)
    # Reads 11-13 warn; the push follows at once and the worker is killed as soon as it
    # switched, mostly before its next checkpoint: its successor reads those events again.
    await produce(kafka.bootstrap, reads(13))
    await kafka.consume_until(topics.control, lambda ms: len(ms) >= 3 * len(runs), 30)
    path = tmp_path / "switched.json"
    path.write_text(json.dumps(SWITCHED))
    code, _, _ = await _cli(capsys, "policy", "push", str(path), "--broker", kafka.bootstrap,
                            "--topic", policy_topic)  # fmt: skip
    assert code == 0
    await worker.wait_until("/metrics", _version_is(switched.version), 10)
    worker.kill()
    successor = start_worker()
    await produce(kafka.bootstrap, reads(1))  # the 14th read: critical under the new version

    def distinct(ms: list[Message]) -> set[bytes | None]:
        return {m.value for m in ms}

    live = await kafka.consume_until(
        topics.control, lambda ms: len(distinct(ms)) >= 5 * len(runs), 60
    )
    enforcing = tmp_path / "enforce.json"
    replayed = await _replayed_topic(capsys, kafka, topics.tool_calls, enforcing, policy_topic)
    # At least once: an event read again may be decided again, with the same bytes.
    assert distinct(live) == set(replayed) and len(replayed) == 5 * len(runs)
    assert successor.is_running
