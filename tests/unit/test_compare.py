"""`loopguard compare`: both policies in one pass; a lower threshold's earlier blocks are
reported exactly as replaying the candidate alone gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.compare import compare
from loopguard_fleet.streams.audit.inputs import FileInput
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_items
from loopguard_fleet.streams.cli import main
from tests.wire import RunScript

TRACES = Path(__file__).parents[1] / "data" / "traces"
ON = {"tools": {"loopDetection": {"enabled": True}}}
LOWER = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 12}}
}
P1_RUN = "15fa1919-9e0b-4b9a-83ac-39b1736ab54a"


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"".join(p.read_bytes() for p in sorted(TRACES.glob("*.jsonl"))))
    return path


def _first_stops(policy: dict, path: Path) -> dict[str, int]:
    """Each run's first block/abort as a call number, from a plain replay of one policy."""
    calls: dict[str, int] = {}
    call_of_seq: dict[tuple[str, int], int] = {}
    for line in path.read_bytes().splitlines():
        ev = json.loads(line)
        if ev["type"] == "tool_call":
            calls[ev["run_id"]] = calls.get(ev["run_id"], 0) + 1
        call_of_seq[(ev["run_id"], ev["seq"])] = calls.get(ev["run_id"], 0)
    first: dict[str, int] = {}
    for _, d in replay_items(Replayer(load_policy(policy)), FileInput(str(path))):
        assert not isinstance(d, Rejected)
        p = d.to_wire()
        if p["type"] == "loop_event" and p["action"] in ("block", "abort"):
            first.setdefault(str(p["run_id"]), call_of_seq[(str(p["run_id"]), int(p["seq"]))])
    return first


def test_a_lower_threshold_reports_the_earlier_blocks_exactly(traces) -> None:
    report = compare(load_policy(ON), load_policy(LOWER), FileInput(str(traces))).to_json()
    want_current, want_candidate = _first_stops(ON, traces), _first_stops(LOWER, traces)
    got = {r["run_id"]: r for r in report["stopped_runs"]}
    assert {k: r["current"]["first_stop_call"] for k, r in got.items()} == want_current
    assert {k: r["candidate"]["first_stop_call"] for k, r in got.items()} == want_candidate
    p1 = got[P1_RUN]
    assert (p1["current"]["first_stop_call"], p1["candidate"]["first_stop_call"]) == (24, 15)
    assert p1["delta_calls"] == -9 and p1["candidate"]["detector"] == "generic_repeat"
    assert (report["runs_stopped"]["earlier"], report["runs_stopped"]["later"]) == (1, 0)
    assert report["runs_stopped"]["calls_earlier_total"] == 9
    assert report["saved_calls"]["difference"] == 9  # the block moved 9 calls earlier


def test_gained_and_lost_balance_each_policy_s_own_counts(traces) -> None:
    report = compare(load_policy(ON), load_policy(LOWER), FileInput(str(traces))).to_json()
    for dim in ("by_detector", "by_agent", "by_tool"):
        for key, row in report[dim].items():
            assert row["current"] + row["gained"] - row["lost"] == row["candidate"], (dim, key)
    totals = {
        side: sum(n for det in report["decisions"][side].values() for n in det.values())
        for side in ("current", "candidate")
    }
    assert totals == {side: sum(r[side] for r in report["by_detector"].values()) for side in totals}


def test_the_same_policy_twice_changes_nothing(traces) -> None:
    report = compare(load_policy(ON), load_policy(ON), FileInput(str(traces))).to_json()
    assert all(r["gained"] == r["lost"] == 0 for r in report["by_detector"].values())
    assert report["saved_calls"]["difference"] == 0
    assert report["healthy_runs_newly_hit"] == {"warned": 0, "stopped": 0, "run_ids": []}
    assert all(r["delta_calls"] == 0 for r in report["stopped_runs"])


def test_healthy_runs_newly_hit_are_named(tmp_path) -> None:
    runs = [RunScript("healthy"), RunScript("looping")]
    lines = [json.dumps(e) for e in runs[0].both("read", {"p": 1}, result={"ok": 1})]
    for i in range(9):  # 9 identical calls: below 10, above 8
        lines += [json.dumps(e) for e in runs[1].both("read", {"p": 2}, error="x")]
        lines += [json.dumps(e) for e in runs[0].both("read", {"p": i}, result={"ok": i})]
    path = tmp_path / "fleet.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = compare(load_policy(ON), load_policy(LOWER), FileInput(str(path))).to_json()
    assert report["healthy_runs_newly_hit"] == {"warned": 1, "stopped": 0, "run_ids": ["looping"]}
    assert report["by_detector"]["generic_repeat"] == {
        "current": 0, "candidate": 1, "gained": 1, "lost": 0,
    }  # fmt: skip


def test_cli_prints_a_summary_and_json(traces, tmp_path, capsys) -> None:
    base, cand = tmp_path / "on.json5", tmp_path / "low.json5"
    base.write_text(json.dumps(ON))
    cand.write_text(json.dumps(LOWER))
    argv = ["compare", str(traces), "--policy", str(base), "--candidate", str(cand)]
    assert main(argv) == 0
    summary = capsys.readouterr().out
    assert "runs stopped (block or abort): 2 → 2; earlier 1 (by 9 calls in all)" in summary
    assert main([*argv, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"] == {"current": str(base), "candidate": str(cand)}
    assert doc["thresholds"]["candidate"]["criticalThreshold"] == 12
