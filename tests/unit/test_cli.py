"""The `loopguard` CLI: replay (formats, malformed lines, strict), policy check, schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopguard_fleet.streams.cli import main
from tests.wire import RunScript

ON = "{tools: {loopDetection: {enabled: true}}}"


@pytest.fixture
def looping_file(tmp_path: Path) -> Path:
    run = RunScript()
    lines = [json.dumps(e) for _ in range(21) for e in run.both("read", {"p": 1}, error="x")]
    lines.insert(3, "{not json")
    lines.insert(7, json.dumps({"type": "tool_call", "seq": 1}))
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json5"
    path.write_text(ON)
    return path


def test_replay_reports_malformed_lines_and_goes_on(looping_file, policy_file, capsys) -> None:
    assert main(["replay", str(looping_file), "--policy", str(policy_file)]) == 0
    out, err = capsys.readouterr()
    decisions = [json.loads(line) for line in out.splitlines()]
    assert [d["type"] for d in decisions[-2:]] == ["loop_event", "command"]
    assert decisions[-1]["command"] == "block_call"
    assert "line 4: not_json" in err
    assert "line 8: missing_run_id" in err
    assert "2 rejected" in err


def test_replay_strict_stops_at_the_first_malformed_line(looping_file, policy_file, capsys) -> None:
    assert main(["replay", str(looping_file), "--policy", str(policy_file), "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "line 4: not_json" in err and "line 8" not in err


def test_replay_twice_is_byte_identical(looping_file, policy_file, tmp_path) -> None:
    outs = []
    for i in range(2):
        target = tmp_path / f"out{i}.jsonl"
        main(
            [
                "replay",
                str(looping_file),
                "--policy",
                str(policy_file),
                "--output",
                str(target),
                "--quiet",
            ]
        )
        outs.append(target.read_bytes())
    assert outs[0] == outs[1] and outs[0].count(b"\n") == 12


def test_replay_table_format_is_one_line_per_decision(looping_file, policy_file, capsys) -> None:
    main(["replay", str(looping_file), "--policy", str(policy_file), "--format", "table"])
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 12
    assert (
        "block" in rows[-2]
        and "generic_repeat" in rows[-2]
        and rows[-1].endswith("(generic_repeat)")
    )


def test_policy_check_prints_the_effective_block(tmp_path, capsys) -> None:
    path = tmp_path / "p.json5"
    path.write_text(
        "{tools: {loopDetection: {warningThreshold: 30}}, "
        "agents: {list: [{id: 'a', tools: {loopDetection: {enabled: true}}}]}}"
    )
    assert main(["policy", "check", str(path), "--agent", "a"]) == 0
    eff = json.loads(capsys.readouterr().out)
    assert (
        eff["enabled"],
        eff["warningThreshold"],
        eff["criticalThreshold"],
        eff["globalCircuitBreakerThreshold"],
    ) == (True, 30, 31, 32)


def test_policy_check_lists_every_error_with_its_path(tmp_path, capsys) -> None:
    path = tmp_path / "bad.json5"
    path.write_text(
        "{tools: {loopDetection: {warningThreshold: 20, criticalThreshold: 10, historySize: true}}}"
    )
    assert main(["policy", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert (
        "tools.loopDetection.criticalThreshold: tools.loopDetection.warningThreshold must be "
        "lower than criticalThreshold."
    ) in err
    assert "tools.loopDetection.historySize:" in err


def test_schema_prints_a_union_of_the_four_event_types(capsys) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["discriminator"]["mapping"]) == {
        "tool_call",
        "tool_result",
        "compaction",
        "run_end",
    }
