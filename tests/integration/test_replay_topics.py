"""Audits read what the worker read: `replay --topic` over both input topics decides exactly
what the live worker published, compaction aborts included."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from loopguard_fleet.streams.demo.simulate import simulate
from tests.worker_process import WorkerLauncher

from .conftest import KafkaIO, SessionBroker, TopicSet, deployment_settings

REPO = Path(__file__).parents[2]
POLICY = "{tools: {loopDetection: {enabled: true}}}"


def _events_seen(metrics: str) -> int:
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("loopguard_events_total{")
    )


def _replay(broker: SessionBroker, *args: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "LOOPGUARD_BROKER"}
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "--quiet",
         "--broker", broker.url, *args],
        capture_output=True, cwd=REPO, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    return [orjson.loads(line) for line in proc.stdout.splitlines()]


def _key(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)


async def test_replay_over_both_topics_equals_the_live_decisions(
    broker: SessionBroker, topics: TopicSet, kafka: KafkaIO, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json5"
    policy.write_text(POLICY)
    launcher = WorkerLauncher(deployment_settings(broker, topics, tmp_path, policy), tmp_path)
    worker = launcher.start()
    try:
        await worker.wait_until("/healthz", lambda b: True, 60)
        sent = await simulate(kafka.bootstrap, topics, runs=30, seed=7, rate=None, prefix="rt")
        await worker.wait_until("/metrics", lambda b: _events_seen(b) >= sent, 90)
        both = f"{topics.tool_calls},{topics.compactions}"
        replayed = await asyncio.to_thread(
            _replay, broker, "--topic", both, "--policy", str(policy)
        )
        live = await kafka.consume_until(
            topics.control, lambda ms: len(ms) >= len(replayed), deadline=30
        )
    finally:
        launcher.stop_all()
    aborts = [m for m in replayed if m.get("command") == "abort_run"]
    assert aborts, "the demo fleet has a compaction loop: its abort must be replayed"
    assert sorted(_key(m.json) for m in live) == sorted(_key(m) for m in replayed)
    # One topic alone misses the compactions, and with them the abort.
    alone = await asyncio.to_thread(
        _replay, broker, "--topic", topics.tool_calls, "--policy", str(policy)
    )
    assert not [m for m in alone if m.get("command") == "abort_run"]
