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
from loopguard_fleet.streams.kafka.admin import create_topics
from tests.worker_process import WorkerLauncher

from .conftest import (
    PARTITIONS,
    KafkaIO,
    SessionBroker,
    TopicSet,
    grant_topic_set,
    operator_security,
    worker_settings,
)

POLICY = {"tools": {"loopDetection": {"enabled": True}}}
VERDICT_TIMEOUT = 10.0  # generous: the machine is shared; a real runtime would use ~0.5
FAILURE = "Error: file not found: /data/report.csv"
CALLS = 45  # how often the looping scripted model asks for the failing tool at most


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's (and replay's) policy: loop detection on, OpenClaw's defaults."""
    path = tmp_path_factory.mktemp("policy") / "openclaw.json"
    path.write_bytes(orjson.dumps(POLICY))
    return path


@pytest.fixture(scope="module")
async def adapter_topics(broker: SessionBroker) -> TopicSet:
    """One test module's topics: its tests share a worker and tell their runs apart by id."""
    ts = TopicSet.fresh("a")
    await create_topics(broker.bootstrap, ts.names, PARTITIONS, security=operator_security(broker))
    await grant_topic_set(broker, ts)
    return ts


@pytest.fixture(scope="module")
def worker(
    broker: SessionBroker,
    adapter_topics: TopicSet,
    tmp_path_factory: pytest.TempPathFactory,
    policy_file: Path,
) -> Iterator[None]:
    """A worker on the module's topics; stopped by PID afterwards."""
    tmp = tmp_path_factory.mktemp("worker")
    launcher = WorkerLauncher(
        {
            "broker": broker.url,
            "partitions": adapter_topics.partitions,
            "topic_tool_calls": adapter_topics.tool_calls,
            "topic_compactions": adapter_topics.compactions,
            "topic_control": adapter_topics.control,
            "topic_dead_letter": adapter_topics.dead_letter,
            "app_id": adapter_topics.group_id,
            "data_dir": tmp / "data",
            "policy_file": policy_file,
            **worker_settings(broker),
        },
        tmp,
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


@pytest.fixture(scope="module")
async def guard(
    broker: SessionBroker, adapter_topics: TopicSet, worker: None
) -> AsyncIterator[LoopGuard]:
    """A gate-mode guard on the module's topics, once the worker answers."""
    client = RuntimeClient(
        broker.bootstrap, topics=adapter_topics, security=operator_security(broker)
    )
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
