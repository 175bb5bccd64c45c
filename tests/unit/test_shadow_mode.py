"""Shadow mode (`loopguard.mode: observe`, docs/policy.md): resolution, and decisions that are
published as loop events but never enforced, over a history that is what the runtime ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.policy_json_schema import policy_schema
from loopguard_fleet.detectors import RunState
from loopguard_fleet.streams.audit.replay import (
    MemoryOutputs,
    MemoryStore,
    Rejected,
    Replayer,
    replay_lines,
)
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from tests.wire import InputRecord, RunScript

TRACES = Path(__file__).parents[1] / "data" / "traces"
ON = {"loopDetection": {"enabled": True}}


def policy(section: dict[str, Any] | None = None, **extra: Any):  # type: ignore[no-untyped-def]
    """Detection on, with this `loopguard` section."""
    document: dict[str, Any] = {"tools": ON, **extra}
    if section is not None:
        document["loopguard"] = section
    return load_policy(document)


def decide(section: dict[str, Any] | None, trace: str, **kw: Any) -> list[dict[str, Any]]:
    """The control messages of replaying a recorded trace under a policy."""
    lines = (TRACES / trace).read_bytes().splitlines()
    replayer = Replayer(policy(section, **kw))
    return [d.to_wire() for d in replay_lines(replayer, lines) if not isinstance(d, Rejected)]


def test_the_mode_resolves_agent_first_then_the_section_then_enforce() -> None:
    p = policy(
        {"mode": "observe", "agents": {"ci": {"mode": "enforce"}, "lab": {"tools": {}}}},
        agents={"list": [{"id": "dev", "tools": {"loopDetection": {"warningThreshold": 5}}}]},
    )
    assert policy().for_agent(None).enforce is True  # no section: enforce
    assert p.for_agent(None).enforce is False
    assert p.for_agent("dev").enforce is False  # its own block, the section's mode
    assert p.for_agent("dev").warning_threshold == 5
    assert p.for_agent("ci").enforce is True  # a mode and no block of its own
    assert p.for_agent("ci").warning_threshold == 10
    assert p.for_agent("lab").enforce is False


def test_tuned_tools_follow_their_agents_mode() -> None:
    p = policy(
        {
            "mode": "observe",
            "tools": {"read": {"criticalThreshold": 30}},
            "agents": {"ci": {"mode": "enforce", "tools": {"exec": {"exempt": True}}}},
        }
    )
    assert p.for_call("ci", "read").enforce is True
    assert p.for_call("ci", "exec").enforce is True
    assert p.for_call("other", "read").enforce is False
    assert p.for_call("other", "read").critical_threshold == 30


def test_the_mode_is_part_of_the_effective_policy_and_its_version() -> None:
    observe = policy({"mode": "observe"})
    assert observe.effective_all()["global"]["mode"] == "observe"  # type: ignore[index]
    assert policy().effective_all()["global"]["mode"] == "enforce"  # type: ignore[index]
    assert observe.version != policy().version
    assert policy({"mode": "enforce"}).version == policy({}).version == policy().version


def test_policy_check_and_the_schema_show_the_mode(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"tools": ON, "loopguard": {"agents": {"ci": {"mode": "observe"}}}}))
    assert main(["policy", "check", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["global"]["mode"] == "enforce"
    assert out["agents"]["ci"]["mode"] == "observe"
    assert '"enum": ["enforce", "observe"]' in json.dumps(policy_schema())


def test_observe_publishes_the_block_unenforced_and_sends_no_command() -> None:
    enforced = decide(None, "openclaw-P1-r5.jsonl")
    observed = decide({"mode": "observe"}, "openclaw-P1-r5.jsonl")
    assert any(d["type"] == "command" for d in enforced)
    assert [d for d in observed if d["type"] != "loop_event"] == []
    assert {d["enforced"] for d in observed} == {False}
    assert {d["enforced"] for d in enforced if d["type"] == "loop_event"} == {True}
    first_block = next(d for d in enforced if d.get("action") == "block")
    shadow_block = next(d for d in observed if d.get("action") == "block")
    # The same call would have been blocked first, with the same decision id.
    assert (shadow_block["seq"], shadow_block["id"]) == (first_block["seq"], first_block["id"])


def test_observe_records_the_calls_the_runtime_ran() -> None:
    """Enforced, a blocked call never runs (no result comes), so the count stays at the
    critical threshold; observed, every call ran and the count grows with each repeat."""

    def block_counts(section: dict[str, Any] | None) -> list[int]:
        replayer, script, counts = Replayer(policy(section)), RunScript(), []
        for _ in range(24):
            call = orjson.dumps(script.call("read", {"path": "/a"}))
            out = [d.to_wire() for d in replay_lines(replayer, [call])]
            counts += [d["count"] for d in out if d.get("action") == "block"]
            if not any(d.get("command") == "block_call" for d in out):
                result = script.result("read", {"path": "/a"}, result="same")
                assert list(replay_lines(replayer, [orjson.dumps(result)])) == []
        return counts

    assert block_counts(None) == [20, 20, 20, 20]
    assert block_counts({"mode": "observe"}) == [20, 21, 22, 23]


def test_a_verdict_in_observe_says_allow() -> None:
    script = RunScript()
    lines = []
    for _ in range(21):
        lines.append(script.call("read", {"path": "/a"}, want_verdict=True))
        lines.append(script.result("read", {"path": "/a"}, result="same"))
    replayer = Replayer(policy({"mode": "observe"}))
    out = [d.to_wire() for d in replay_lines(replayer, [orjson.dumps(x) for x in lines])]
    verdicts = [d for d in out if d["type"] == "verdict"]
    assert len(verdicts) == 21 and {v["decision"] for v in verdicts} == {"allow"}
    assert all("detector" not in v for v in verdicts)
    assert any(d.get("action") == "block" for d in out)


def test_the_guard_abort_is_observed_without_abort_run() -> None:
    observed = decide({"mode": "observe"}, "openclaw-P2-r7.jsonl")
    assert [(d["action"], d["enforced"]) for d in observed] == [("abort", False)]


def test_openclaw_2026_9_observed_writes_no_veto_and_never_exhausts_recovery() -> None:
    script = RunScript()
    lines = []
    for _ in range(40):
        lines += script.both("read", {"path": "/a"}, result="same")
    p = policy({"mode": "observe"}).with_semantics("openclaw-2026.9")
    replayer = Replayer(p)
    out = [d.to_wire() for d in replay_lines(replayer, [orjson.dumps(x) for x in lines])]
    assert out and {d["type"] for d in out} == {"loop_event"}
    assert "tool_loop_recovery_exhausted" not in {d["detector"] for d in out}
    state = replayer.state_of("r1")
    assert isinstance(state, RunState)
    assert state.critical_loops == 0
    assert all(r.outcome_kind != "tool-loop-veto" for r in state.history)


def test_detections_are_counted_by_mode() -> None:
    metrics = Metrics()
    driver = RunDriver(
        policy({"mode": "observe", "agents": {"ci": {"mode": "enforce"}}}),
        DriverLimits(1_048_576, 0, run_idle_ttl_ms=0, run_cache_idle_ms=0),
        MemoryStore(),
        MemoryOutputs(),
        metrics,
    )
    records = []
    for run, agent in (("r-main", "main"), ("r-ci", "ci")):
        script = RunScript(run, agent)
        for _ in range(21):  # the 21st repeat is critical
            for ev in script.both("read", {"path": "/a"}, result="same"):
                records.append(
                    InputRecord("t", 0, len(records), None, run.encode(), orjson.dumps(ev))
                )
    driver.apply(records)
    value = metrics.registry.get_sample_value
    labels = {"detector": "generic_repeat", "level": "critical"}
    assert value("loopguard_detections_total", {**labels, "mode": "observe"}) == 1
    assert value("loopguard_detections_total", {**labels, "mode": "enforce"}) == 1
    assert value("loopguard_commands_total", {"command": "block_call"}) == 1
