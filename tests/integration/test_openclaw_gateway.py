"""The OpenClaw plugin inside a real `openclaw gateway run`, against a real worker and broker.

integrations/openclaw/test/gateway/run-gateway.mjs starts OpenClaw 2026.9.6 (the plugin's
devDependency) on loopback in a throwaway home, with the plugin loaded as a release holds it
and a scripted OpenAI-compatible model on 127.0.0.1 that calls `read` on a missing file every
turn until a tool result tells it LoopGuard blocked it. One Gateway-backed `openclaw agent`
turn runs; then the gateway gets SIGTERM. Every process is stopped by its PID.

The gateway is what costs (45 to 90 s on two shared cores, most of it OpenClaw starting), and
nothing in it depends on the broker, so it runs in the Tansu pass only.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from .conftest import KafkaIO, SessionBroker, TopicSet
from .test_openclaw_plugin import (
    NODE,
    PLUGIN,
    POLICY,
    plugin_config,
    plugin_env,
    wait_for_verdicts,
    worker,
)

__all__ = ["worker"]  # the fixture, shared with test_openclaw_plugin

NOTE_10 = (
    "[System note: Tool-loop warning after 10 repeated calls. "
    "Change your approach or stop if you are not making progress.]"
)


async def run_gateway(options: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """One gateway, one agent turn, shutdown: the driver's report."""
    assert NODE.exists(), f"run `npm ci` in {PLUGIN} first (it installs node >= 24)"
    proc = await asyncio.to_thread(
        subprocess.run,
        [str(NODE), "test/gateway/run-gateway.mjs", json.dumps(options)],
        cwd=PLUGIN,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def tool_messages(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results of the model's last request: what the model was shown, in order."""
    last = report["requests"][-1]["messages"]
    return [m for m in last if m.get("role") == "tool"]


def same_call(shown_id: str, published_id: str) -> bool:
    """OpenClaw sends the model's tool call ids back sanitized (`call_21` → `call21`)."""
    return re.sub(r"[^A-Za-z0-9]", "", shown_id) == re.sub(r"[^A-Za-z0-9]", "", published_id)


def text_of(message: dict[str, Any]) -> str:
    """A chat message's text, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def diagnosis(report: dict[str, Any]) -> str:
    """What a failed assertion needs to say why the turn went as it did: the model's calls and
    requests, what each tool result showed it (shortened), the turns' ends and the plugin's log."""
    shown = [f"{m.get('tool_call_id')}: {text_of(m)[:160]!r}" for m in tool_messages(report)]
    return "\n".join(
        [
            f"model calls {report['calls']}, requests {len(report['requests'])}, "
            f"stages {report.get('stages')}",
            f"agent {json.dumps(report['agent'])[:1500]}",
            f"second turn {json.dumps(report.get('secondAgent'))[:800]}",
            "tool results shown last:",
            *shown,
            "gateway log (loopguard lines):",
            *report["gatewayLog"][-40:],
            "gateway tail:",
            *report.get("gatewayTail", [])[-20:],
        ]
    )


def replay(events: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """`loopguard replay` of these events under the worker's policy: its decisions."""
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    policy = tmp_path / "replay-policy.json"
    policy.write_bytes(orjson.dumps(POLICY))
    out = subprocess.run(
        [str(Path(sys.executable).parent / "loopguard"), "replay", str(source),
         "--policy", str(policy), "--quiet"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines() if line]


async def test_a_real_gateway_blocks_where_replay_does_and_flushes_at_shutdown(
    broker: SessionBroker, topics: TopicSet, kafka: KafkaIO, worker: None, tmp_path: Path
) -> None:
    await wait_for_verdicts(broker.bootstrap, topics)
    options = {
        "plugin": plugin_config(broker, topics, 5000),
        "shadowingAgent": True,  # a second agent with OpenClaw's detection on: warned about
        "maxCalls": 40,
        "secondTurn": True,
    }
    report = await run_gateway(options, plugin_env(broker))
    (tmp_path / "gateway-report.json").write_text(json.dumps(report))  # kept for a post-mortem

    agent = json.loads(report["agent"]["stdout"])
    run_id = agent["runId"]
    assert report["agent"]["code"] == 0, report["agent"]
    assert report["exit"] == {"code": 0, "signal": None}
    log = "\n".join(report["gatewayLog"])

    # The start-up warning names the setting (the turn's own agent keeps detection off).
    assert "loopguard: the gateway's own loop detection is on" in log
    assert "tools.loopDetection.enabled: false" in log

    # What reached Kafka for the run: every published result pairs with an earlier call.
    def run_events(messages: list[Any]) -> list[dict[str, Any]]:
        return [m.json for m in messages if isinstance(m.json, dict) and m.json["run_id"] == run_id]

    calls_topic = await kafka.consume_until(
        topics.tool_calls,
        lambda ms: any(e["type"] == "tool_call" for e in run_events(list(ms))),
        deadline=20,
    )
    lifecycle = await kafka.consume_until(
        topics.compactions, lambda ms: any(e["type"] == "run_end" for e in run_events(list(ms)))
    )
    events = sorted(run_events(calls_topic) + run_events(lifecycle), key=lambda e: e["seq"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "nothing lost"
    assert events[-1]["type"] == "run_end", "the run's end reached Kafka before shutdown"
    called: set[str] = set()
    for e in events:
        if e["type"] == "tool_call":
            called.add(e["tool_call_id"])
        elif e["type"] == "tool_result":
            assert e["tool_call_id"] in called, e
    assert "lost at shutdown" not in log and "unsent event" not in log

    # LoopGuard blocks at the call replay gives for the same events, with its message.
    decisions = replay(events, tmp_path)
    blocks = [d for d in decisions if d.get("command") == "block_call"]
    assert blocks, f"no block in {len(decisions)} decisions\n{diagnosis(report)}"
    first = blocks[0]
    by_id = {e["event_id"]: e for e in events}
    blocked_call = by_id[first["trigger_event_id"]]["tool_call_id"]
    shown = tool_messages(report)
    blocked_shown = [m for m in shown if first["reason"] in text_of(m)]
    assert blocked_shown, [text_of(m)[:200] for m in shown]
    assert same_call(blocked_shown[0]["tool_call_id"], blocked_call)
    assert report["calls"] == len(shown) and report["calls"] < options["maxCalls"]
    # The blocked call did not run: its synthetic result is no outcome on Kafka.
    results = [e for e in events if e["type"] == "tool_result"]
    assert blocked_call not in {e["tool_call_id"] for e in results}

    # The published warning (count 10) gets OpenClaw's note on its tool result, through
    # tool_result_persist: OpenClaw stores it with the session, so the model is shown it from
    # then on (the next turn here). The outcome LoopGuard recorded for that call has no note.
    warnings = [d for d in decisions if d.get("action") == "warn" and d.get("published")]
    assert warnings and warnings[0]["count"] == 10, warnings
    warned_call = by_id[warnings[0]["trigger_event_id"]]["tool_call_id"]
    assert f"tool-loop warning note added to the result of call {warned_call}" in log
    later = report["requests"][report["secondTurnFrom"]]["messages"]
    noted = [m for m in later if m.get("role") == "tool" and NOTE_10 in text_of(m)]
    assert len(noted) == 1 and same_call(noted[0]["tool_call_id"], warned_call), noted
    assert all(NOTE_10 not in json.dumps(e) for e in results)
