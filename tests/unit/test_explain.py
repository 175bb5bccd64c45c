"""`loopguard explain RUN_ID`: the real traces' P1 block at call 24 (count 20) and P2's
compaction abort with its window, as a table and as JSON (tests/data/traces/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.explain import explain_run, render_table
from loopguard_fleet.streams.audit.inputs import FileInput
from loopguard_fleet.streams.cli import main
from tests.wire import RunScript

TRACES = Path(__file__).parents[1] / "data" / "traces"
P1, P1_RUN = TRACES / "openclaw-P1-r5.jsonl", "15fa1919-9e0b-4b9a-83ac-39b1736ab54a"
P2, P2_RUN = TRACES / "openclaw-P2-r7.jsonl", "2a38f136-0c56-4be6-9608-50a9184690b3"
ON = {"tools": {"loopDetection": {"enabled": True}}}
FIRST_CRITICAL_KEY = (
    "generic:read:read:cfd87efe8329bd88730e411a9e583bddca9071099dc9437e374e29aa6f05ef9b:"
    "error:04437246383dc54040c0335c2f011d65acbe1eafca2e809ff60b60f702fb4bd3"
)


def _policy_file(tmp_path: Path) -> str:
    path = tmp_path / "on.json5"
    path.write_text(json.dumps(ON))
    return str(path)


def test_p1_first_block_is_call_24_with_count_20_and_its_evidence() -> None:
    timeline = explain_run(load_policy(ON), FileInput(str(P1)), P1_RUN)
    blocks = [
        (r.call, d["detector"], d["count"], d["warning_key"], r.counts)
        for r in timeline.rows
        for d in r.decisions
        if d.get("action") == "block"
    ]
    call, detector, count, key, counts = blocks[0]
    assert (call, detector, count, key) == (24, "generic_repeat", 20, FIRST_CRITICAL_KEY)
    assert counts == {"no_progress": 20, "recent_count": 20, "unknown_streak": 0, "ping_pong": 0}
    assert timeline.agent_id == "main" and timeline.thresholds["criticalThreshold"] == 20
    assert len([r for r in timeline.rows if r.type == "tool_call"]) == 129


def test_p1_table_shows_the_block_row_and_why(tmp_path, capsys) -> None:
    assert main(["explain", P1_RUN, str(P1), "--policy", _policy_file(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(lines) if "BLOCK" in line)
    assert lines[i].split()[:3] == ["24", "47", "tool_call"]
    assert "np=20 rc=20" in lines[i] and lines[i].endswith("BLOCK generic_repeat count 20")
    assert lines[i + 1].strip().startswith("why: CRITICAL: Called read with identical arguments")
    assert lines[i + 2].strip() == f"key: {FIRST_CRITICAL_KEY}"
    assert lines[i + 3].strip() == "→ block_call (generic_repeat)"


def test_p2_abort_shows_the_guard_window_after_the_compaction(tmp_path, capsys) -> None:
    argv = ["explain", P2_RUN, str(P2), "--policy", _policy_file(tmp_path), "--format", "json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["events"]
    compaction = next(r for r in rows if r["type"] == "compaction")
    assert compaction["guard"] == {"window": 3, "remaining": 3}
    watched = [(r["call"], r["guard"]) for r in rows if r["type"] == "tool_result" and r["guard"]]
    assert watched == [
        (14, {"window": 3, "position": 1}),
        (15, {"window": 3, "position": 2}),
        (16, {"window": 3, "position": 3}),
    ]
    abort = [d for r in rows for d in r["decisions"] if d.get("action") == "abort"]
    assert [(d["detector"], d["count"], d["tool"], d["seq"]) for d in abort] == [
        ("compaction_loop_persisted", 3, "read", 33)
    ]
    assert all(r["outcome_hash"].startswith("error:") for r in rows if r["call"] in (14, 15, 16)
               and r["type"] == "tool_result")  # fmt: skip


def test_explain_keeps_only_the_named_run(tmp_path, capsys) -> None:
    other = "46b92355-5747-4173-b17f-852d812e0e96"
    assert main(["explain", other, str(P2), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["call"] for r in doc["events"] if r["type"] == "tool_call"] == [1, 2, 3]
    assert {r["seq"] for r in doc["events"]} == set(range(34, 40))


def test_a_2026_9_run_shows_its_recovery_allowance_the_note_and_the_abort() -> None:
    run = RunScript("r26")
    events: list[dict[str, object]] = []
    for tool in ("read", "list"):  # critical 1 blocks, critical 2 ends the run
        for _ in range(20):
            events += run.both(tool, {"p": 1}, error="x")
        events.append(run.call(tool, {"p": 1}))
    items = [(i, json.dumps(ev).encode()) for i, ev in enumerate(events)]
    policy = load_policy(ON).with_semantics("openclaw-2026.9")
    timeline = explain_run(policy, items, "r26")
    calls = [r for r in timeline.rows if r.type == "tool_call"]
    assert [c.critical_loops for c in calls if c.decisions and c.call in (21, 42)] == [0, 1]
    last = calls[-1]
    assert [(d["type"], d.get("detector")) for d in last.decisions] == [
        ("loop_event", "generic_repeat"),
        ("command", "generic_repeat"),
        ("loop_event", "tool_loop_recovery_exhausted"),
        ("command", "tool_loop_recovery_exhausted"),
    ]
    table = render_table(timeline)
    row = next(line for line in table.splitlines() if "ABORT" in line)
    assert "crit=1" in row and row.endswith(
        "BLOCK generic_repeat count 20 ABORT tool_loop_recovery_exhausted count 2"
    )
    assert "→ abort_run (tool_loop_recovery_exhausted)" in table
    assert "note: [System note: Tool-loop warning after 10 repeated calls." in table
    # The configurable profile shows no allowance.
    plain = explain_run(load_policy(ON), items, "r26")
    assert {r.critical_loops for r in plain.rows} == {None}
