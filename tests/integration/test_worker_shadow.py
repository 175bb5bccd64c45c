"""Shadow mode in a live worker on the real broker: a run that enforce would block is only
observed. The control topic gets the loop events (`enforced: false`), no command, exactly as
`loopguard replay` decides under the same policy; `loopguard compare --candidate-topic` reads
them back beside an enforcing group."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.inputs import FileInput
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_items
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import EXIT_NO_EVENTS
from loopguard_fleet.streams.kafka.admin import create_topics
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import (
    PARTITIONS,
    KafkaIO,
    SessionBroker,
    TopicSet,
    deployment_settings,
    grant_topic_set,
    operator_security,
)
from .test_worker import of_run, produce
from .test_worker_policy import TRACE, _replayed, start_worker  # noqa: F401  # the fixture

POLICY = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"mode": "observe"}}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The observing policy, written where both the worker and replay read it."""
    path = tmp_path / "openclaw.json"
    path.write_bytes(orjson.dumps(POLICY))
    return path


async def test_a_run_that_would_be_blocked_is_only_observed(
    start_worker: Callable[..., WorkerProcess],  # noqa: F811  # the imported fixture
    topics: TopicSet,
    kafka: KafkaIO,
    policy_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = _replayed(policy_file, capsys)
    assert expected and {d["type"] for d in expected} == {"loop_event"}
    assert any(d["action"] == "block" for d in expected)  # enforce would block this run
    events = [json.loads(line) for line in TRACE.read_text().splitlines()]
    run_id = events[0]["run_id"]
    start_worker()
    await produce(
        kafka.bootstrap,
        [(topics.tool_calls, run_id.encode(), orjson.dumps(event)) for event in events],
    )
    got = await kafka.consume_until(
        topics.control, lambda ms: len(ms) >= len(expected), deadline=60
    )
    assert of_run(got, run_id) == expected
    assert {d["enforced"] for d in of_run(got, run_id)} == {False}


CURRENT = {"tools": {"loopDetection": {"enabled": True}}}
CANDIDATE = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 12}},
    "loopguard": {"mode": "observe"},
}
TRACES = sorted(TRACE.parent.glob("*.jsonl"))


def _replayed_file(policy: Path, paths: list[Path]) -> list[dict[str, Any]]:
    """What a worker on `policy` publishes for the events of `paths`, in order."""
    out = []
    replayer = Replayer(load_policy(policy))
    for path in paths:
        for _, d in replay_items(replayer, FileInput(str(path))):
            assert not isinstance(d, Rejected)
            out.append(d.to_wire())
    return out


def _key(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)


async def _compare(
    broker: SessionBroker, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """`loopguard compare --format json` (it runs its own event loop, so in a thread)."""
    argv = ["compare", "--format", "json", "--broker", broker.url, *args]
    code = await asyncio.to_thread(main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _report(result: tuple[int, str, str]) -> dict[str, Any]:
    code, out, err = result
    assert code == 0, err
    doc: dict[str, Any] = orjson.loads(out)
    return doc


async def test_compare_reads_the_shadow_group_s_decisions_back_from_its_topic(
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An enforcing group and a shadow group on the same input topics: `compare
    --candidate-topic` over the shadow group's control topic reports what replaying its
    policy as `--candidate` reports."""
    current, candidate = tmp_path / "current.json", tmp_path / "candidate.json"
    current.write_bytes(orjson.dumps(CURRENT))
    candidate.write_bytes(orjson.dumps(CANDIDATE))
    shadow = replace(
        topics,
        control=f"{topics.control}-shadow",
        dead_letter=f"{topics.dead_letter}-shadow",
        group_id=f"{topics.group_id}s",
    )
    await create_topics(
        broker.bootstrap, [shadow.control, shadow.dead_letter], PARTITIONS,
        security=operator_security(broker),
    )  # fmt: skip
    await grant_topic_set(broker, shadow)
    events = [orjson.loads(line) for path in TRACES for line in path.read_bytes().splitlines()]
    expected = [
        d for d in _replayed_file(candidate, TRACES) if d["type"] == "loop_event"
    ]  # what the shadow group must publish
    launchers = []
    for name, ts, policy in (("enforce", topics, current), ("shadow", shadow, candidate)):
        (tmp_path / name).mkdir()
        settings = deployment_settings(broker, ts, tmp_path / name, policy)
        launchers.append(WorkerLauncher(settings, tmp_path / name))
    try:
        for launcher in launchers:
            launcher.start()
        await produce(
            kafka.bootstrap,
            [(topics.tool_calls, e["run_id"].encode(), orjson.dumps(e)) for e in events],
        )
        got = await kafka.consume_until(
            shadow.control, lambda ms: len(ms) >= len(expected), deadline=60
        )
        enforced = await kafka.consume_until(
            topics.control, lambda ms: any(m.json["type"] == "command" for m in ms), deadline=60
        )
        # Everything is published: the workers stop while the topics are read back. The
        # inputs went to the tool-calls topic only: one topic to read is enough.
        stopped = asyncio.gather(*(asyncio.to_thread(w.stop_all) for w in launchers))
        inputs = ["--topic", topics.tool_calls, "--policy", str(current)]
        replayed = await _compare(broker, capsys, *inputs, "--candidate", str(candidate))
        read_back = await _compare(broker, capsys, *inputs, "--candidate-topic", shadow.control)
        refused = await _compare(broker, capsys, *inputs, "--candidate-topic", topics.control)
        await stopped
    finally:
        for launcher in launchers:
            launcher.stop_all()
    assert sorted(map(_key, (m.json for m in got))) == sorted(map(_key, expected))
    want, have = _report(replayed), _report(read_back)
    version = load_policy(candidate).version
    assert have.pop("candidate_topic")["policy_versions"] == {version: len(expected)}
    assert have["policies"]["candidate"] == f"{shadow.control} (shadow, {version})"
    for key in ("policies", "thresholds"):
        want.pop(key), have.pop(key)
    assert have == want
    assert want["runs_stopped"]["earlier"] == 1  # the candidate's lower threshold shows
    # The enforcing group's control topic is no shadow topic: refused in one line.
    assert any(m.json["type"] == "command" for m in enforced)
    code, _, err = refused
    assert code == EXIT_NO_EVENTS
    assert "were enforced" in err and len(err.splitlines()) == 1
