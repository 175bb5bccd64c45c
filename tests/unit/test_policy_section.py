"""The `loopguard` section of a policy (docs/policy.md): strict schema and per-tool tuning."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from loopguard_fleet.config import PolicyError, load_policy
from loopguard_fleet.config.policy_json_schema import policy_schema
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.processing.metrics import Metrics
from tests.wire import RunScript

ON = {"loopDetection": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 16}}
TOOL_KEYS = "warningThreshold, criticalThreshold, exempt, knownPoll"


def with_section(section: object, **extra: object) -> dict[str, object]:
    """A policy document with detection on and this `loopguard` section."""
    return {"tools": ON, "loopguard": section, **extra}


def issues(document: dict[str, object]) -> list[tuple[str, str]]:
    """Every (path, message) the loader reports for a document."""
    with pytest.raises(PolicyError) as caught:
        load_policy(document)
    return [(issue.path, issue.message) for issue in caught.value.issues]


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        ([], "loopguard", "must be an object (keys: mode, tools, agents, fleet), got []"),
        ({"tool": {}}, "loopguard", "unknown key 'tool' (did you mean 'tools'?)"),
        ({"tools": []}, "loopguard.tools", "must be an object keyed by tool name, got []"),
        ({"tools": {"read": 3}}, "loopguard.tools.read", "must be an object (keys: " + TOOL_KEYS),
        ({"tools": {"read": None}}, "loopguard.tools.read", "must be an object (keys: "),
        (
            {"tools": {"read": {"warningTreshold": 3}}},
            "loopguard.tools.read",
            "unknown key 'warningTreshold' (did you mean 'warningThreshold'?); valid keys: "
            + TOOL_KEYS,
        ),
        (
            {"tools": {"read": {"warningThreshold": 0}}},
            "loopguard.tools.read.warningThreshold",
            "must be a whole number > 0, got 0",
        ),
        (
            {"tools": {"read": {"criticalThreshold": "12"}}},
            "loopguard.tools.read.criticalThreshold",
            'must be a whole number > 0, got "12" (a string; write 12 without quotes)',
        ),
        (
            {"tools": {"read": {"exempt": None}}},
            "loopguard.tools.read.exempt",
            "must be a boolean (true/false), got null",
        ),
        (
            {"tools": {"read": {"warningThreshold": 12, "criticalThreshold": 12}}},
            "loopguard.tools.read.criticalThreshold",
            "loopguard.tools.read.warningThreshold must be lower than criticalThreshold.",
        ),
        (
            {"tools": {"Read": {}, "read ": {}}},
            "loopguard.tools.read ",
            "names the tool 'read' like loopguard.tools.Read; only one may be set",
        ),
        ({"agents": []}, "loopguard.agents", "must be an object keyed by agent id, got []"),
        (
            {"agents": {"main": {"tools": {"exec": {"knownPoll": "true"}}}}},
            "loopguard.agents.main.tools.exec.knownPoll",
            'must be a boolean (true/false), got "true" (a string; write true without quotes)',
        ),
        (
            {"agents": {"main": {"mdoe": "observe"}}},
            "loopguard.agents.main",
            "unknown key 'mdoe' (did you mean 'mode'?); valid keys: mode, tools",
        ),
        (
            {"mode": "shadow"},
            "loopguard.mode",
            "must be 'enforce' or 'observe', got \"shadow\"",
        ),
        (
            {"agents": {"main": {"mode": "Observe"}}},
            "loopguard.agents.main.mode",
            "must be 'enforce' or 'observe', got \"Observe\" (did you mean 'observe'?)",
        ),
        (
            {"mode": None},
            "loopguard.mode",
            "must be 'enforce' or 'observe', got null (leave the key out to inherit)",
        ),
        (
            {"mode": False},
            "loopguard.mode",
            "must be 'enforce' or 'observe', got false",
        ),
        (
            {"agents": {"tools": {"tools": {"tools": {"exempt": 1}}}}},
            "loopguard.agents.tools.tools.tools.exempt",
            "must be a boolean (true/false), got 1",
        ),
    ],
)
def test_a_bad_section_is_an_error_at_its_path(section: object, path: str, message: str) -> None:
    found = issues(with_section(section))
    assert [p for p, _ in found] == [path]
    assert found[0][1].startswith(message)


def test_every_problem_of_a_section_is_listed_beside_the_blocks_problems() -> None:
    document = with_section(
        {"tools": {"read": {"warningThreshold": 5, "criticalThreshold": 4, "exempt": 2}}},
        agents={"list": [{"id": "a", "tools": {"loopDetection": {"historySize": 0}}}]},
    )
    assert [path for path, _ in issues(document)] == [
        "agents.list[0].tools.loopDetection.historySize",
        "loopguard.tools.read.criticalThreshold",
        "loopguard.tools.read.exempt",
    ]


def test_a_file_without_the_section_resolves_exactly_as_before() -> None:
    document = {"tools": ON, "agents": {"list": [{"id": "a", "tools": {"loopDetection": {}}}]}}
    policy = load_policy(document)
    assert policy == load_policy({**document, "loopguard": {}})
    assert not policy.has_tool_tuning
    assert "tools" not in policy.effective_all()
    assert "tools" not in policy.effective("a")
    for agent in ("a", "b", None):
        assert policy.for_call(agent, "read") is policy.for_agent(agent)


def test_the_most_specific_setting_wins_key_by_key() -> None:
    policy = load_policy(
        with_section(
            {
                "tools": {"read": {"warningThreshold": 3, "criticalThreshold": 5}, "exec": {}},
                "agents": {"a": {"tools": {"READ": {"criticalThreshold": 7}}}},
            }
        )
    )
    base = policy.for_agent(None)
    assert policy.for_call("a", "read") == dataclasses.replace(
        base, warning_threshold=3, critical_threshold=7
    )
    assert policy.for_call("b", "read") == dataclasses.replace(
        base, warning_threshold=3, critical_threshold=5
    )
    assert policy.for_call("a", "exec") == base  # named, nothing set: the agent's block
    assert policy.for_call("a", "write") is policy.for_agent("a")  # not named


def test_a_tool_overlays_its_agents_own_block_and_is_clamped_like_one() -> None:
    roster = {"list": [{"id": "a", "tools": {"loopDetection": {"criticalThreshold": 25}}}]}
    policy = load_policy(
        with_section(
            {"tools": {"read": {"warningThreshold": 30}, "exec": {"criticalThreshold": 40}}},
            agents=roster,
        )
    )
    assert policy.for_agent("a").critical_threshold == 25
    read = policy.for_call("a", "read")
    assert (read.warning_threshold, read.critical_threshold) == (30, 31)
    assert read.global_circuit_breaker_threshold == 32
    exec_ = policy.for_call("b", "exec")
    assert (exec_.warning_threshold, exec_.critical_threshold) == (8, 40)


def test_exempt_and_known_poll() -> None:
    policy = load_policy(
        with_section(
            {
                "tools": {"watch_build": {"knownPoll": True}, "read": {"exempt": True}},
                "agents": {"a": {"tools": {"read": {"exempt": False}}}},
            }
        )
    )
    assert policy.for_call("b", "read").enabled is False
    assert policy.for_call("b", "read").post_compaction_guard is True  # not a rolling detector
    assert policy.for_call("a", "read").enabled is True
    assert policy.for_call("b", "watch_build").known_poll is True
    assert policy.for_call("b", "read").known_poll is False


def test_agent_ids_of_a_keyed_roster_match_after_normalisation() -> None:
    document = with_section(
        {"agents": {"safe-runner": {"tools": {"read": {"warningThreshold": 2}}}}},
        agents={"entries": {"Safe Runner": {"default": True, "tools": {"loopDetection": {}}}}},
    )
    policy = load_policy(document)
    assert policy.for_call("Safe Runner", "read").warning_threshold == 2
    assert policy.for_call(None, "read").warning_threshold == 2  # the default agent
    assert policy.for_call("other", "read").warning_threshold == 8


def _detectors(tmp_path: Path, capsys, section: object) -> list[tuple[str, int]]:
    """(detector, count) of each loop_event of `loopguard replay` over a polling loop."""
    script, lines = RunScript(), []
    for _ in range(20):
        lines.append(script.call("watch_build", {"id": 1}))
        lines.append(script.result("watch_build", {"id": 1}, result="still building"))
    trace = tmp_path / "poll.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(with_section(section)))
    assert main(["replay", str(trace), "--policy", str(policy), "--quiet"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [(d["detector"], d["count"]) for d in out if d["type"] == "loop_event"]


def test_known_poll_makes_an_operators_tool_a_known_poll(tmp_path: Path, capsys) -> None:
    plain = _detectors(tmp_path, capsys, {})
    polled = _detectors(tmp_path, capsys, {"tools": {"watch_build": {"knownPoll": True}}})
    assert {detector for detector, _ in plain} == {"generic_repeat"}
    assert polled and {detector for detector, _ in polled} == {"known_poll_no_progress"}
    assert polled[0][1] == 8  # the global warningThreshold, as for the built-in polls


def test_exempt_silences_the_rolling_detectors_for_a_tool(tmp_path: Path, capsys) -> None:
    assert _detectors(tmp_path, capsys, {"tools": {"watch_build": {"exempt": True}}}) == []
    assert _detectors(tmp_path, capsys, {"tools": {"other": {"exempt": True}}}) != []


def test_policy_check_prints_the_per_tool_table(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.json"
    section = {"tools": {"Bash": {"exempt": True}}, "agents": {"a": {"tools": {"read": {}}}}}
    path.write_text(json.dumps(with_section(section)))
    assert main(["policy", "check", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["version"] == load_policy(path).version
    table = printed["tools"]
    assert set(table) == {"*", "a"}
    assert table["*"]["exec"] == {
        "warningThreshold": 8,
        "criticalThreshold": 16,
        "globalCircuitBreakerThreshold": 30,
        "exempt": True,
        "knownPoll": False,
    }
    assert set(table["a"]) == {"read", "exec"}
    assert table["a"]["exec"]["exempt"] is True
    assert main(["policy", "check", str(path), "--agent", "a"]) == 0
    assert set(json.loads(capsys.readouterr().out)["tools"]) == {"read", "exec"}


def test_the_tool_table_shows_an_exemption_even_where_detection_is_off() -> None:
    document = with_section(
        {
            "tools": {"read": {"exempt": True}},
            "agents": {"b": {"tools": {"read": {"exempt": False}}}},
        },
        agents={"list": [{"id": "off", "tools": {"loopDetection": {"enabled": False}}}]},
    )
    table = load_policy(document).tool_table()
    assert {agent: tools["read"]["exempt"] for agent, tools in table.items()} == {
        "*": True,
        "off": True,
        "b": False,
    }


def test_policy_check_lists_section_errors_with_their_paths(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(with_section({"tools": {"read": {"exempt": "no"}}})))
    assert main(["policy", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "  loopguard.tools.read.exempt: must be a boolean (true/false)" in err


def test_schema_policy_prints_the_models_schema(capsys) -> None:
    assert main(["schema", "--policy"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(policy_schema()))
    defs = printed["$defs"]
    assert printed["properties"]["loopguard"] == {"$ref": "#/$defs/LoopGuardSection"}
    tool = defs["ToolTuning"]
    assert tool["additionalProperties"] is False
    assert tool["properties"]["warningThreshold"] == {"type": "integer", "minimum": 1}
    assert tool["properties"]["exempt"] == {"type": "boolean"}
    assert defs["LoopGuardSection"]["properties"]["agents"]["additionalProperties"] == {
        "$ref": "#/$defs/AgentSection"
    }
    assert defs["LoopDetectionBlock"]["additionalProperties"] is False
    assert "null" not in json.dumps(defs)  # null is refused everywhere, never "unset"


TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"


def _first_block(tmp_path: Path, capsys, section: object) -> tuple[int, int] | None:
    """(seq, count) of the first critical loop_event replaying the real P1 trace."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(with_section(section)))
    trace = TRACES / "openclaw-P1-r5.jsonl"
    assert main(["replay", str(trace), "--policy", str(policy), "--quiet"]) == 0
    for line in capsys.readouterr().out.splitlines():
        event = json.loads(line)
        if event["type"] == "loop_event" and event["level"] == "critical":
            return event["seq"], event["count"]
    return None


def test_per_tool_thresholds_move_the_block_on_a_real_trace(tmp_path: Path, capsys) -> None:
    assert _first_block(tmp_path, capsys, {}) == (37, 16)  # the global criticalThreshold
    tuned = {"tools": {"read": {"criticalThreshold": 12}}}
    assert _first_block(tmp_path, capsys, tuned) == (29, 12)
    by_agent = {**tuned, "agents": {"main": {"tools": {"read": {"criticalThreshold": 10}}}}}
    assert _first_block(tmp_path, capsys, by_agent) == (25, 10)
    assert (
        _first_block(tmp_path, capsys, {"agents": {"main": {"tools": {"read": {"exempt": True}}}}})
        is None
    )


def test_the_version_names_the_effective_policy_not_its_spelling() -> None:
    plain = load_policy({"tools": ON})
    respelled = load_policy(
        {
            "gateway": {"port": 1},  # OpenClaw's, ignored
            "tools": {"loopDetection": {**ON["loopDetection"], "criticalThreshold": 16.0}},
            "loopguard": {"tools": {}},
        }
    )
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", plain.version)
    assert respelled.version == plain.version
    tuned = load_policy(with_section({"tools": {"read": {"criticalThreshold": 12}}}))
    assert tuned.version != plain.version
    exact = load_policy(
        {"tools": ON, "agents": {"list": [{"id": "A", "tools": {"loopDetection": {}}}]}}
    )
    keyed = load_policy(
        {"tools": ON, "agents": {"entries": {"a": {"tools": {"loopDetection": {}}}}}}
    )
    assert exact.version != keyed.version  # a different agent applies to the run `A`
    assert plain.with_semantics("openclaw-2026.9").version != plain.version
    assert plain.with_channel_tools(["slack"]).version == plain.version  # a service setting


def test_metrics_export_one_policy_version() -> None:
    metrics = Metrics()
    metrics.set_policy("sha256:aaaa")
    metrics.set_policy("sha256:bbbb")
    body = generate_latest(metrics.registry).decode()
    assert 'loopguard_policy_info{version="sha256:bbbb"} 1.0' in body
    assert "sha256:aaaa" not in body
