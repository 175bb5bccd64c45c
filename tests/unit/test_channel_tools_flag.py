"""`--channel-tools`: replay, explain and compare decide with the channel tools the workers'
`LOOPGUARD_CHANNEL_TOOLS` names, given in the setting's own format, for wire-format and OTLP
input alike (docs/audit.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, encode_decision, replay_lines
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import EXIT_USAGE
from tests.otlp import Call, export_request, otlp_json_line
from tests.wire import RunScript

ON = {"tools": {"loopDetection": {"enabled": True}}}
SEND = {"channel": "#ops", "text": "deploy failed, retrying"}


def _sent(i: int) -> dict[str, Any]:
    """A send's result: only its message id changes, which a channel tool's hash leaves out."""
    return {"content": [{"type": "text", "text": "sent"}], "details": {"ok": True, "messageId": i}}


@pytest.fixture
def sends(tmp_path: Path) -> Path:
    """A run posting the same message to Slack 30 times: no progress only if `slack` is a
    channel tool (docs/semantics.md), so then it is blocked, else only warned."""
    run = RunScript("r1")
    events = [e for i in range(30) for e in run.both("slack", SEND, result=_sent(i))]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(ON))
    return path


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _blocks(decisions: str) -> int:
    return sum(json.loads(line).get("command") == "block_call" for line in decisions.splitlines())


def test_replay_decides_with_the_workers_channel_tools_in_the_settings_format(
    sends: Path, policy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = ["replay", str(sends), "--policy", str(policy), "--quiet"]
    assert _blocks(_out(capsys, *replay)) == 0  # telegram only: each send made progress
    given = _out(capsys, *replay, "--channel-tools", "slack")
    assert _blocks(given) == 10
    assert _out(capsys, *replay, "--channel-tools", '["slack"]') == given
    sharded = _out(capsys, *replay, "--channel-tools", "slack", "--jobs", "2")
    assert sharded == given
    # What a worker with LOOPGUARD_CHANNEL_TOOLS=slack publishes: its policy's channel tools.
    live = Replayer(load_policy(ON), channel_tools=frozenset({"slack"}))
    lines = sends.read_bytes().splitlines()
    decided = [d for d in replay_lines(live, lines) if not isinstance(d, Rejected)]
    assert given.encode() == b"".join(encode_decision(d) + b"\n" for d in decided)


def test_explain_and_compare_decide_with_the_channel_tools(
    sends: Path, policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def explained(*flags: str) -> list[str]:
        doc = json.loads(_out(capsys, "explain", "r1", str(sends), "--format", "json", *flags))
        return [d["action"] for e in doc["events"] for d in e["decisions"] if "action" in d]

    assert explained().count("block") == 0
    assert explained("--channel-tools", "slack").count("block") == 10

    candidate = tmp_path / "candidate.json"
    candidate.write_text(
        json.dumps({"tools": {"loopDetection": {"enabled": True, "criticalThreshold": 25}}})
    )

    def compared(*flags: str) -> dict[str, Any]:
        argv = ["compare", str(sends), "--policy", str(policy), "--candidate", str(candidate)]
        doc: dict[str, Any] = json.loads(_out(capsys, *argv, "--format", "json", *flags))
        return {side: doc["decisions"][side]["generic_repeat"] for side in doc["decisions"]}

    assert compared() == {"current": {"warn": 20}, "candidate": {"warn": 20}}
    assert compared("--channel-tools", "slack") == {
        "current": {"warn": 10, "block": 10},
        "candidate": {"warn": 15, "block": 5},
    }


def test_otlp_input_hashes_sends_at_the_bridge_with_the_channel_tools(
    policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With --otlp-privacy the bridge's core hashes each result before the engine sees it:
    # the channel tools must reach it, not only the policy.
    calls = [
        Call("r1", "main", n, "slack", json.dumps(SEND), json.dumps(_sent(n))) for n in range(1, 31)
    ]
    spans = tmp_path / "spans.jsonl"
    spans.write_bytes(otlp_json_line(export_request(calls)))
    replay = ["replay", str(spans), "--input-format", "otlp", "--otlp-privacy", "--quiet"]
    assert _blocks(_out(capsys, *replay, "--policy", str(policy))) == 0
    given = _out(capsys, *replay, "--policy", str(policy), "--channel-tools", "slack")
    assert _blocks(given) == 10


def test_a_channel_tools_value_the_setting_refuses_is_a_usage_error(
    sends: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(sends), "--channel-tools", "[1]"]) == EXIT_USAGE
    assert "--channel-tools: not a JSON list of strings" in capsys.readouterr().err
