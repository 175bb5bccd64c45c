"""What the framework adapters' integration tests share: a worker, a guard, replay by the CLI.

Each adapter test runs its framework's real agent loop against a real worker; the call LoopGuard
blocked is compared with the one `loopguard replay` blocks over the events the adapter published
(read back from the topics).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.streams.client import RuntimeClient
from tests.worker_process import WorkerLauncher

from .conftest import KafkaIO, SessionBroker, TopicSet, operator_security, worker_settings

POLICY = {"tools": {"loopDetection": {"enabled": True}}}
VERDICT_TIMEOUT = 10.0  # generous: the machine is shared; a real runtime would use ~0.5
FAILURE = "Error: file not found: /data/report.csv"
CALLS = 45  # how often the looping scripted model asks for the failing tool at most


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The worker's (and replay's) policy: loop detection on, OpenClaw's defaults."""
    path = tmp_path / "openclaw.json"
    path.write_bytes(orjson.dumps(POLICY))
    return path


@pytest.fixture
def worker(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, policy_file: Path
) -> Iterator[None]:
    """A worker on this test's topics; stopped by PID afterwards."""
    launcher = WorkerLauncher(
        {
            "broker": broker.url,
            "partitions": topics.partitions,
            "topic_tool_calls": topics.tool_calls,
            "topic_compactions": topics.compactions,
            "topic_control": topics.control,
            "topic_dead_letter": topics.dead_letter,
            "app_id": topics.group_id,
            "data_dir": tmp_path / "data",
            "policy_file": policy_file,
            **worker_settings(broker),
        },
        tmp_path,
    )
    launcher.start()
    try:
        yield
    finally:
        launcher.stop_all()


async def wait_for_verdicts(guard: LoopGuard, deadline: float = 60.0) -> None:
    """Return once the worker answers a verdict request (it joined its group: ~3 s on Tansu)."""
    run = guard.client.run("readiness-probe")
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        call_id = await run.tool_call("read", {"path": "/ready"}, want_verdict=True)
        if not (await run.verdict(call_id, timeout=2.0)).is_timeout:
            return
    pytest.fail(f"the worker gave no verdict within {deadline}s")


@pytest.fixture
async def guard(broker: SessionBroker, topics: TopicSet, worker: None) -> AsyncIterator[LoopGuard]:
    """A gate-mode guard on this test's topics, once the worker answers."""
    client = RuntimeClient(broker.bootstrap, topics=topics, security=operator_security(broker))
    async with LoopGuard(client, verdict_timeout=VERDICT_TIMEOUT) as started:
        await wait_for_verdicts(started)
        yield started


async def published(kafka: KafkaIO, topic: str, run_id: str, count: int) -> list[dict[str, Any]]:
    """The run's events on `topic` in seq order, once `count` of them arrived."""

    def of_run(ms: Any) -> list[dict[str, Any]]:
        return [m.json for m in ms if m.key == run_id.encode()]

    got = await kafka.consume_until(topic, lambda ms: len(of_run(ms)) >= count)
    return sorted(of_run(got), key=lambda e: e["seq"])


async def replay_first_block(
    broker: SessionBroker, topics: TopicSet, policy: Path, run_id: str
) -> int | None:
    """The seq of the first call `loopguard replay --topic` blocks in the run, or None."""
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable, "-m", "loopguard_fleet.streams.cli", "replay",
            "--topic", topics.tool_calls, "--broker", broker.bootstrap,
            "--policy", str(policy), "--quiet",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stdout.splitlines():
        d = json.loads(line)
        if d.get("run_id") != run_id:
            continue
        if d.get("type") == "verdict" and d.get("decision") == "block":
            return int(d["seq"])
        if d.get("type") == "command" and d.get("command") == "block_call":
            return int(d["seq"])
    return None


def seq_of_call(events: list[dict[str, Any]], tool_call_id: str) -> int:
    """The seq of the tool_call event with this id."""
    (seq,) = [
        e["seq"] for e in events if e["type"] == "tool_call" and e["tool_call_id"] == tool_call_id
    ]
    return int(seq)
