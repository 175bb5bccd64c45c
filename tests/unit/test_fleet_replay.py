"""Fleet signals in replay (docs/fleet.md, "Replay and determinism"): an outage across runs
fires a signal, later runs are blocked early, the signal resolves; the same input gives the
same bytes; with fleet signals off, the decisions are the default ones."""

from __future__ import annotations

from typing import Any

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.compare import compare
from loopguard_fleet.streams.audit.explain import explain_run, render_json, render_table
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, encode_decision, replay_lines
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.processing.policy_switch import encode_switch
from tests.wire import RunScript, text_result

ON = {"loopDetection": {"enabled": True}}
FLEET = {"enabled": True, "windowSeconds": 10, "minRuns": 3, "earlyAction": "block"}
T0 = 1_764_000_000_000  # epoch ms


def stamped(run: RunScript, events: list[dict[str, Any]], t_ms: int) -> list[dict[str, Any]]:
    return [{**ev, "ts": t_ms} for ev in events]


def outage_lines() -> list[bytes]:
    """8 runs on 4 agents, one starting each second, each retrying a read of a missing file
    every 200 ms (8 times); healthy runs read a shared README 3 times; then, 30 s later,
    healthy traffic only."""
    events: list[dict[str, Any]] = []
    for i in range(8):
        run = RunScript(f"broken-{i}", agent_id=f"agent-{i % 4}")
        for n in range(8):
            both = run.both("read", {"path": "/etc/app.yaml"}, error="ENOENT: /etc/app.yaml")
            events += stamped(run, both, T0 + 1000 * i + 200 * n)
    for i in range(6):
        run = RunScript(f"healthy-{i}", agent_id=f"agent-{i % 4}")
        for n in range(3):
            both = run.both("read", {"path": "README.md"}, result=text_result("# Project"))
            events += stamped(run, both, T0 + 500 * i + 300 * n)
    late = RunScript("later", agent_id="agent-0")
    for n in range(3):
        both = late.both("read", {"path": f"/src/{n}.py"}, result=text_result("ok"))
        events += stamped(late, both, T0 + 40_000 + 1000 * n)
    events.sort(key=lambda e: e["ts"])  # runs interleaved in time, each in seq order
    return [orjson.dumps(e) for e in events]


def replay(fleet: dict[str, Any] | None, lines: list[bytes]) -> list[dict[str, Any]]:
    doc: dict[str, Any] = {"tools": ON}
    if fleet is not None:
        doc["loopguard"] = {"fleet": fleet}
    out = list(replay_lines(Replayer(load_policy(doc)), lines))
    assert not [o for o in out if isinstance(o, Rejected)]
    return [d.to_wire() for d in out if not isinstance(d, Rejected)]


def replay_bytes(fleet: dict[str, Any] | None, lines: list[bytes]) -> bytes:
    doc: dict[str, Any] = {"tools": ON, "loopguard": {"fleet": fleet or {}}}
    replayer = Replayer(load_policy(doc))
    return b"".join(encode_decision(d) + b"\n" for d in replay_lines(replayer, lines))  # type: ignore[arg-type]


def test_an_outage_fires_blocks_later_runs_early_and_resolves() -> None:
    out = replay(FLEET, outage_lines())
    signals = [d for d in out if d["type"] == "fleet_signal"]
    assert [s["state"] for s in signals] == ["firing", "resolved"]
    firing, resolved = signals
    assert firing["signal_id"] == resolved["signal_id"]
    assert (firing["tool"], firing["runs"], firing["agents"], firing["is_failure"]) == (
        "read",
        3,
        3,
        True,
    )
    # The third run's first retry (its second call, at 2.2 s) made it fire.
    assert firing["at_ms"] == T0 + 2200
    assert firing["sample_run_ids"] == ["broken-0", "broken-1", "broken-2"]
    assert (resolved["runs"], resolved["calls"]) == (0, 0)
    early = [d for d in out if d.get("detector") == "fleet_signal" and d["type"] == "loop_event"]
    assert {e["fleet_signal_id"] for e in early} == {firing["signal_id"]}
    assert {e["signature"] for e in early} == {firing["signature"]}
    first_block = {e["run_id"]: e["count"] for e in reversed(early)}
    # The signal applies once the watermark (1 s behind the latest event) passes 2.2 s: from
    # the first event at 3.4 s. Runs that reach 3 repeats after that are blocked at their 4th
    # call, not at their 21st; broken-2 is at its 8th call then; broken-0 and -1 are done.
    assert first_block == {"broken-2": 7, **{f"broken-{i}": 3 for i in range(3, 8)}}
    assert out.index(firing) < out.index(early[0])
    blocked = [d for d in out if d.get("command") == "block_call"]
    assert not [b for b in blocked if not str(b["run_id"]).startswith("broken-")]
    assert not [d for d in out if str(d.get("run_id", "")).startswith(("healthy", "later"))]


def test_the_same_input_gives_the_same_bytes() -> None:
    lines = outage_lines()
    assert replay_bytes(FLEET, lines) == replay_bytes(FLEET, lines)
    assert b'"type":"fleet_signal"' in replay_bytes(FLEET, lines)


def test_with_fleet_signals_off_the_decisions_are_the_defaults_whatever_the_time() -> None:
    lines = outage_lines()
    off = replay({**FLEET, "enabled": False}, lines)
    assert off == replay(None, lines)
    assert not [
        d for d in off if d["type"] == "fleet_signal" or d.get("detector") == "fleet_signal"
    ]
    unstamped = [
        orjson.dumps({k: v for k, v in orjson.loads(x).items() if k != "ts"}) for x in lines
    ]
    assert replay(None, unstamped) == off


def test_loopguard_replay_computes_fleet_signals_in_one_process_whatever_jobs(
    tmp_path, capsys
) -> None:
    trace = tmp_path / "outage.jsonl"
    trace.write_bytes(b"\n".join(outage_lines()) + b"\n")
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps({"tools": ON, "loopguard": {"fleet": FLEET}}))
    for jobs in ("1", "2"):
        assert main(["replay", str(trace), "--policy", str(policy), "--quiet", "--jobs", jobs]) == 0
        assert capsys.readouterr().out.encode() == replay_bytes(FLEET, outage_lines())
    assert (
        main(["replay", str(trace), "--policy", str(policy), "--quiet", "--format", "table"]) == 0
    )
    table = capsys.readouterr().out
    assert "firing" in table and "resolved" in table and "read in 3 runs, 3 agents" in table


def test_compare_shows_which_runs_fleet_signals_stop_earlier_and_no_healthy_one() -> None:
    items = list(enumerate(outage_lines(), 1))
    off = load_policy({"tools": ON})
    on = load_policy({"tools": ON, "loopguard": {"fleet": FLEET}})
    report = compare(off, on, items)
    stopped = {run: o.first for run, o in report.runs.items() if o.first != [None, None]}
    assert stopped == {
        "broken-2": [None, (8, "fleet_signal", "block")],
        **{f"broken-{i}": [None, (4, "fleet_signal", "block")] for i in range(3, 8)},
    }
    assert compare(on, off, items).runs["broken-3"].first == [(4, "fleet_signal", "block"), None]


def test_explain_shows_the_fleet_evidence_behind_an_early_block() -> None:
    items = list(enumerate(outage_lines(), 1))
    policy = load_policy({"tools": ON, "loopguard": {"fleet": FLEET}})
    timeline = explain_run(policy, items, "broken-5")
    explained = [d for r in timeline.rows for d in r.decisions]
    replayed = [d for d in replay(FLEET, outage_lines()) if d.get("run_id") == "broken-5"]
    assert explained == replayed  # the same decisions as the replay of every run
    [signal] = timeline.fleet_signals
    assert signal["state"] == "firing" and {
        d["fleet_signal_id"] for d in explained if "fleet_signal_id" in d
    } == {signal["signal_id"]}
    table = render_table(timeline)
    assert f"fleet: signal {signal['signal_id']} fired at {T0 + 2200} ms: read in 3 runs" in table
    assert '"fleet_signals"' in render_json(timeline)


HEALTH = {**FLEET, "toolHealth": {"enabled": True, "minRuns": 4, "errorRatio": 0.5}}


def test_tool_health_fires_for_the_failing_tool_and_resolves_in_replay() -> None:
    lines = outage_lines()
    out = replay(HEALTH, lines)
    tools = [d for d in out if d["type"] == "fleet_signal" and d.get("kind") == "tool"]
    assert [(t["state"], t["tool"]) for t in tools] == [("firing", "read"), ("resolved", "read")]
    firing, resolved = tools
    assert firing["signal_id"] == resolved["signal_id"]
    # The window closing at 5 s held 5 broken runs of 11 (below 0.5); the one closing at
    # 10 s, all 8 broken runs (each retried its failure) and the 6 healthy README readers.
    assert (firing["at_ms"], firing["runs"], firing["bad_runs"], firing["error_runs"]) == (
        T0 + 10_000,
        14,
        8,
        8,
    )
    assert (firing["ratio"], firing["no_progress_runs"], firing["agents"]) == (0.5714, 0, 4)
    assert firing["sample_run_ids"] == ["broken-0", "broken-1", "broken-2"]
    assert resolved["bad_runs"] == 0 and resolved["at_ms"] > firing["at_ms"]
    # Tool health changes no run's decision and no signature's signal.
    unversioned = [{**d, "policy_version": None} for d in out if d.get("kind") != "tool"]
    assert unversioned == [{**d, "policy_version": None} for d in replay(FLEET, lines)]
    assert replay_bytes(HEALTH, lines) == replay_bytes(HEALTH, lines)


def test_healthy_shared_reads_never_make_a_tool_fire() -> None:
    healthy = [line for line in outage_lines() if b"broken-" not in line]
    out = replay({**HEALTH, "toolHealth": {"enabled": True, "minRuns": 2}}, healthy)
    assert [d for d in out if d["type"] == "fleet_signal"] == []


def test_compare_and_explain_read_a_replay_with_tool_signals() -> None:
    items = list(enumerate(outage_lines(), 1))
    off = load_policy({"tools": ON})
    on = load_policy({"tools": ON, "loopguard": {"fleet": HEALTH}})
    assert compare(off, on, items).runs["broken-3"].first == [None, (4, "fleet_signal", "block")]
    timeline = explain_run(on, items, "broken-5")
    assert [s.get("kind") for s in timeline.fleet_signals] == [None]  # the signature's only


def _early(out: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """The early rule's loop events: (run, level, count)."""
    return [
        (e["run_id"], e["action"], e["count"])
        for e in out
        if e["type"] == "loop_event" and e.get("detector") == "fleet_signal"
    ]


def test_a_pushed_policy_switches_the_early_rule_and_the_contributions() -> None:
    # A worker started with early warnings; a policy switch read before the outage makes them
    # blocks, as a worker started with blocks decides.
    warn = {"tools": ON, "loopguard": {"fleet": {**FLEET, "earlyAction": "warn"}}}
    block = {"tools": ON, "loopguard": {"fleet": FLEET}}
    off = {"tools": ON, "loopguard": {"fleet": {**FLEET, "enabled": False}}}

    def run(start: dict[str, Any], pushed: dict[str, Any] | None) -> list[dict[str, Any]]:
        lines = outage_lines()
        if pushed is not None:
            lines = [encode_switch(load_policy(pushed).version, pushed, "p", 0), *lines]
        out = list(replay_lines(Replayer(load_policy(start)), lines))
        return [d.to_wire() for d in out if not isinstance(d, Rejected)]

    warned, blocked = run(warn, None), run(block, None)
    assert {level for _, level, _ in _early(warned)} == {"warn"}
    assert _early(run(warn, block)) == _early(blocked)
    # Fleet signals switched off: no run contributes, nothing fires, nothing is early.
    quiet = run(block, off)
    assert not [d for d in quiet if d["type"] == "fleet_signal"] and not _early(quiet)
