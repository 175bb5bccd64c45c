"""The CLI's profile switches: `policy check` per agent, `--semantics` on replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopguard_fleet.streams.cli import main

CURRENT_STYLE = """{
  // An openclaw.json as OpenClaw 2026.9 writes it: loop detection per agent under entries.
  tools: { loopDetection: { enabled: false } },
  agents: {
    entries: {
      "safe-runner": { default: true, model: "x/y", tools: { loopDetection: { enabled: true } } },
      "Night Shift": { tools: { profile: "coding", loopDetection: {} } },
      quiet: { name: "Quiet" },
    },
  },
}
"""


def test_policy_check_prints_every_agents_effective_policy(tmp_path: Path, capsys) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(CURRENT_STYLE)
    assert main(["policy", "check", str(path), "--semantics", "openclaw-2026.9"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert (every["semantics"], every["defaultAgent"]) == ("openclaw-2026.9", "safe-runner")
    assert every["global"]["enabled"] is False
    # What OpenClaw 2026.9 runs: the agent's `enabled` over the global one, guard unless false.
    assert {
        agent: (block["enabled"], block["postCompactionGuard"]["enabled"])
        for agent, block in every["agents"].items()
    } == {"safe-runner": (True, True), "night-shift": (False, False)}
    assert every["agents"]["safe-runner"]["warningThreshold"] == 10


def test_policy_check_with_an_agent_prints_that_agents_block(tmp_path: Path, capsys) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(CURRENT_STYLE)
    assert main(["policy", "check", str(path), "--agent", "Night Shift"]) == 0
    assert json.loads(capsys.readouterr().out)["enabled"] is False


@pytest.mark.parametrize("command", ["replay", "explain", "compare"])
def test_an_unknown_semantics_profile_is_a_usage_error(command: str, capsys) -> None:
    argv = [command, "-", "--semantics", "openclaw-2027"]
    if command == "explain":
        argv.insert(1, "run")
    if command == "compare":
        argv += ["--candidate", "x.json"]
    assert main(argv) == 2
    assert "openclaw-2026.9" in capsys.readouterr().err


def _replay(tmp_path: Path, capsys, *flags: str) -> list[dict[str, object]]:
    trace = Path(__file__).parents[1] / "data" / "traces" / "openclaw-P1-r5.jsonl"
    policy = tmp_path / "policy.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    assert main(["replay", str(trace), "--policy", str(policy), "--quiet", *flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [json.loads(line) for line in lines]


def test_replay_semantics_picks_the_profile_and_each_loop_event_names_it(
    tmp_path: Path, capsys
) -> None:
    default = [d for d in _replay(tmp_path, capsys) if d["type"] == "loop_event"]
    current = [
        d for d in _replay(tmp_path, capsys, "--semantics", "openclaw-2026.9")
        if d["type"] == "loop_event"
    ]  # fmt: skip
    assert all("semantics" not in d for d in default)
    assert {d["semantics"] for d in current} == {"openclaw-2026.9"}
    first = next(d for d in current if d["level"] == "critical")
    assert first["message"] == (
        "CRITICAL: Called read with identical outcomes 20 times. "
        "Session execution blocked to prevent runaway loops."
    )
    # Veto records take window slots beside the trace's exec calls: no breaker in 2026.9.
    verdicts = [d for d in current if d["action"] != "abort"]
    assert {d["detector"] for d in default} > {d["detector"] for d in verdicts}
    # The runner's allowance: the trace's second critical verdict ends the run.
    criticals = [d for d in verdicts if d["level"] == "critical"]
    aborts = [d for d in current if d["action"] == "abort"]
    assert aborts[0]["detector"] == "tool_loop_recovery_exhausted"
    assert aborts[0]["trigger_event_id"] == criticals[1]["trigger_event_id"]
    assert not [d for d in default if d["action"] == "abort"]
