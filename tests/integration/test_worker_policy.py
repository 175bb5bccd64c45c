"""Per-tool tuning in a live worker on the real broker: the block moves, as replay says, and
/metrics names the policy version.

The worker (a subprocess configured through LOOPGUARD_*) reads a policy whose `loopguard`
section tunes `read`; the real trace's control output must equal `loopguard replay` of the
same trace under the same policy, object for object, and block earlier than without tuning.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.cli import main
from tests.worker_process import WorkerLauncher, WorkerProcess

from .conftest import KafkaIO, SessionBroker, TopicSet, deployment_settings
from .test_worker import of_run, produce

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "openclaw-P1-r5.jsonl"
POLICY = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 16}},
    "loopguard": {
        "tools": {"read": {"criticalThreshold": 14}},
        "agents": {"main": {"tools": {"read": {"criticalThreshold": 12}}}},
    },
}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The tuned policy, written where both the worker and replay read it."""
    path = tmp_path / "openclaw.json"
    path.write_bytes(orjson.dumps(POLICY))
    return path


@pytest.fixture
def start_worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, policy_file: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start this test's worker on the tuned policy; stopped by PID afterwards."""
    launcher = WorkerLauncher(deployment_settings(broker, topics, tmp_path, policy_file), tmp_path)
    yield launcher.start
    launcher.stop_all()


def _replayed(policy: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["replay", str(TRACE), "--policy", str(policy), "--quiet"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


async def test_per_tool_thresholds_move_the_live_block_as_replay_does(
    start_worker: Callable[..., WorkerProcess],
    topics: TopicSet,
    kafka: KafkaIO,
    policy_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = [d for d in _replayed(policy_file, capsys) if d["type"] != "verdict"]
    events = [json.loads(line) for line in TRACE.read_text().splitlines()]
    run_id = events[0]["run_id"]
    worker = start_worker()
    await produce(
        kafka.bootstrap,
        [(topics.tool_calls, run_id.encode(), orjson.dumps(event)) for event in events],
    )
    got = await kafka.consume_until(
        topics.control, lambda ms: len(ms) >= len(expected), deadline=60
    )

    assert of_run(got, run_id) == expected
    blocks = [d for d in expected if d.get("command") == "block_call"]
    assert blocks and blocks[0]["seq"] == 29  # read's 12th repeat: agent main's own setting
    version = load_policy(policy_file).version
    info = f'loopguard_policy_info{{version="{version}"}} 1.0'
    body = await worker.wait_until("/metrics", lambda b: "loopguard_policy_info" in b, 30)
    assert info in body
