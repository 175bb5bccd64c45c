"""The OpenClaw plugin end to end: the real traces through its hook handlers, a real worker.

integrations/openclaw/scripts/drive-trace.mjs replays a trace through the plugin's OpenClaw
hook handlers (with its real Kafka transport) and prints what before_tool_call returned for
every call. Gate mode must block exactly the calls OpenClaw's own detector blocks (P1), and the
post-compaction abort must block the aborted run's next call (P2). With no worker, every call
fails open within verdictTimeoutMs. Needs `npm ci` in integrations/openclaw (node >= 24 comes
with it, as its `node` devDependency).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.streams.client.runtime import RuntimeClient
from loopguard_fleet.streams.embedded import KafkaBroker
from loopguard_fleet.streams.embedded.kafka_security import RUNTIME
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from tests.worker_process import REPO, WorkerLauncher

from .conftest import SessionBroker, TopicSet, deployment_settings, is_secure

PLUGIN = REPO / "integrations" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"
TRACES = REPO / "tests" / "data" / "traces"
GOLDEN = REPO / "tests" / "golden" / "expected"
POLICY = {"tools": {"loopDetection": {"enabled": True}}}
VERDICT_TIMEOUT_MS = 5000  # generous: the machine is shared; a real gateway would use ~500


@pytest.fixture
def worker(broker: EmbeddedBroker, topics: TopicSet, tmp_path: Path) -> Iterator[None]:
    """A worker on this test's topics with loop detection on; stopped by PID afterwards."""
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    launcher = WorkerLauncher(deployment_settings(broker, topics, tmp_path, policy), tmp_path)
    launcher.start()
    try:
        yield
    finally:
        launcher.stop_all()


async def wait_for_verdicts(bootstrap: str, topics: TopicSet, deadline: float = 60.0) -> None:
    """Return once the worker answers a verdict request (it joined its group: ~3 s on Tansu)."""
    async with RuntimeClient(bootstrap, topics=topics) as client:
        run = client.run("readiness-probe")
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            call_id = await run.tool_call("read", {"path": "/ready"}, want_verdict=True)
            if not (await run.verdict(call_id, timeout=2.0)).is_timeout:
                return
        pytest.fail(f"the worker gave no verdict within {deadline}s")


def plugin_config(broker: EmbeddedBroker, topics: TopicSet, timeout_ms: int) -> dict[str, Any]:
    """The plugin's openclaw.json entry for this test's broker and topics."""
    return {
        "brokers": [broker.bootstrap],
        "topics": {
            "toolCalls": topics.tool_calls,
            "compactions": topics.compactions,
            "control": topics.control,
        },
        "mode": "gate",
        "verdictTimeoutMs": timeout_ms,
        **plugin_security(broker),
    }


PASSWORD_ENV = "LOOPGUARD_TEST_PLUGIN_PASSWORD"


def plugin_security(broker: SessionBroker) -> dict[str, Any]:
    """On kafka-secure the gateway logs in as agent-runtime (docs/security.md), else nothing."""
    if not (isinstance(broker, KafkaBroker) and is_secure(broker)):
        return {}
    runtime = broker.credentials(RUNTIME)
    return {
        "security": {
            "protocol": runtime.protocol,
            "saslMechanism": runtime.mechanism,
            "username": runtime.username,
            "passwordEnv": PASSWORD_ENV,
            "caFile": str(runtime.ca_file),
        }
    }


def plugin_env(broker: SessionBroker) -> dict[str, str]:
    """The gateway's environment: its SASL password on kafka-secure."""
    env = dict(os.environ)
    if isinstance(broker, KafkaBroker) and is_secure(broker):
        password = broker.credentials(RUNTIME).password
        env[PASSWORD_ENV] = password.get_secret_value() if password else ""
    return env


async def drive(
    trace: str, config: dict[str, Any], wait_abort_ms: int = 0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run the node driver over one trace (`env`: the gateway's environment); its report."""
    assert NODE.exists(), f"run `npm ci` in {PLUGIN} first (it installs node >= 24)"
    args = [str(NODE), "scripts/drive-trace.mjs", str(TRACES / trace), json.dumps(config)]
    proc = await asyncio.to_thread(
        subprocess.run,
        [*args, str(wait_abort_ms)],
        cwd=PLUGIN,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def golden(trace: str) -> list[dict[str, Any]]:
    """The engine's expected decisions for a trace (tests/golden/expected)."""
    path = GOLDEN / trace.replace(".jsonl", ".decisions.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def blocked(report: dict[str, Any]) -> dict[str, str]:
    """event_id → blockReason of every call before_tool_call blocked."""
    return {c["event_id"]: c["result"]["blockReason"] for c in report["calls"] if c["result"]}


async def test_p1_blocks_exactly_where_openclaws_detector_blocks(
    broker: EmbeddedBroker, topics: TopicSet, worker: None
) -> None:
    await wait_for_verdicts(broker.bootstrap, topics)
    config = plugin_config(broker, topics, VERDICT_TIMEOUT_MS)
    report = await drive("openclaw-P1-r5.jsonl", config, env=plugin_env(broker))

    expected = {
        d["trigger_event_id"]: d["reason"]
        for d in golden("openclaw-P1-r5.jsonl")
        if d.get("command") == "block_call"
    }
    assert len(expected) == 97
    assert blocked(report) == expected
    assert all(c["result"] in (None, {"block": True, "blockReason": c["result"]["blockReason"]})
               for c in report["calls"] if c["result"])  # fmt: skip
    assert len(report["calls"]) == 129
    stats = report["stats"]
    assert stats["verdictTimeouts"] == 0
    assert stats["verdicts"] == {"allow": 22 + 1, "warn": 10, "block": 97}  # + the probe
    assert [p["result"] for p in report["probes"]] == [None]


async def test_p2_aborts_the_run_at_call_16_and_blocks_its_next_call(
    broker: EmbeddedBroker, topics: TopicSet, worker: None
) -> None:
    await wait_for_verdicts(broker.bootstrap, topics)
    config = plugin_config(broker, topics, VERDICT_TIMEOUT_MS)
    report = await drive(
        "openclaw-P2-r7.jsonl", config, wait_abort_ms=30_000, env=plugin_env(broker)
    )

    abort = next(d for d in golden("openclaw-P2-r7.jsonl") if d.get("command") == "abort_run")
    assert abort["trigger_event_id"] == "P2-r7-16-result"
    assert blocked(report) == {}  # no call of the trace itself is blocked
    assert report["stats"]["abortsReceived"] == 1
    aborted, other = report["probes"]
    assert aborted == {
        "run_id": abort["run_id"],
        "result": {"block": True, "blockReason": abort["reason"]},
    }
    assert other["run_id"] != abort["run_id"] and other["result"] is None


async def test_without_a_worker_every_call_fails_open_within_the_verdict_timeout(
    broker: EmbeddedBroker, topics: TopicSet
) -> None:
    timeout_ms = 300
    config = plugin_config(broker, topics, timeout_ms)
    report = await drive("openclaw-P2-r7.jsonl", config, env=plugin_env(broker))

    calls = report["calls"]
    assert len(calls) == 19
    assert all(c["result"] is None for c in calls)
    assert report["stats"]["verdictTimeouts"] == 19 + 2  # + one probe per run
    # Each call waited its whole budget and not much longer (the first also pins the
    # control-topic positions, inside the same budget).
    assert all(timeout_ms - 5 <= c["ms"] < timeout_ms + 250 for c in calls), [
        c["ms"] for c in calls
    ]
    assert any("failing open (allow)" in line for line in report["logs"])
