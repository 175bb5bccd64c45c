"""Replaying the real OpenClaw traces gives exactly OpenClaw's own verdicts (traces/README)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, encode_decision, replay_lines

TRACES = Path(__file__).parents[1] / "data" / "traces"
EXPECTED = Path(__file__).parent / "expected"
FIRST_CRITICAL_KEY = (
    "generic:read:read:cfd87efe8329bd88730e411a9e583bddca9071099dc9437e374e29aa6f05ef9b:"
    "error:04437246383dc54040c0335c2f011d65acbe1eafca2e809ff60b60f702fb4bd3"
)


def _replay(name: str) -> tuple[list[dict[str, object]], dict[int, int]]:
    """Decisions of a trace and a map from each tool_call's seq to its 1-based call number."""
    lines = (TRACES / name).read_bytes().splitlines()
    call_no: dict[int, int] = {}
    for line in lines:
        ev = orjson.loads(line)
        if ev["type"] == "tool_call":
            call_no[ev["seq"]] = len(call_no) + 1
    replayer = Replayer(load_policy({"tools": {"loopDetection": {"enabled": True}}}))
    out = list(replay_lines(replayer, lines))
    assert not [o for o in out if isinstance(o, Rejected)]
    return [d.to_wire() for d in out if not isinstance(d, Rejected)], call_no


def _verdicts(decisions: list[dict[str, object]], call_no: dict[int, int]) -> list[tuple]:
    return [
        (call_no.get(d["seq"]), d["detector"], d["level"], d["count"])  # type: ignore[call-overload]
        for d in decisions
        if d["type"] == "loop_event"
    ]


def test_p1_trace_gives_openclaws_107_verdicts() -> None:
    decisions, call_no = _replay("openclaw-P1-r5.jsonl")
    verdicts = _verdicts(decisions, call_no)
    assert len(verdicts) == 107
    kinds = Counter((d, lvl) for _, d, lvl, _ in verdicts)
    assert kinds == {
        ("generic_repeat", "warning"): 10,
        ("generic_repeat", "critical"): 43,
        ("global_circuit_breaker", "critical"): 54,
    }
    warnings = [v for v in verdicts if v[2] == "warning"]
    assert warnings[0] == (13, "generic_repeat", "warning", 10)
    criticals = [v for v in verdicts if v[1] == "generic_repeat" and v[2] == "critical"]
    assert criticals[0] == (24, "generic_repeat", "critical", 20)
    breakers = [v for v in verdicts if v[1] == "global_circuit_breaker"]
    assert breakers[0][0] == 76
    first_critical = next(d for d in decisions if d.get("level") == "critical")
    assert first_critical["warning_key"] == FIRST_CRITICAL_KEY


def test_p1_trace_blocks_every_critical_and_publishes_only_bucket_crossings() -> None:
    decisions, _ = _replay("openclaw-P1-r5.jsonl")
    events = [d for d in decisions if d["type"] == "loop_event"]
    blocks = [d for d in decisions if d.get("command") == "block_call"]
    assert len(blocks) == 97
    assert all(d["published"] for d in events if d["level"] == "critical")
    assert [d["count"] for d in events if d["level"] == "warning" and d["published"]] == [10]


def test_p2_trace_aborts_at_call_16_after_compaction_and_nothing_else() -> None:
    decisions, call_no = _replay("openclaw-P2-r7.jsonl")
    events = [d for d in decisions if d["type"] == "loop_event"]
    assert len(events) == 1
    abort = events[0]
    seq_of_call_16 = next(s for s, n in call_no.items() if n == 16)
    assert (abort["detector"], abort["count"], abort["tool"], abort["action"]) == (
        "compaction_loop_persisted",
        3,
        "read",
        "abort",
    )
    assert abort["seq"] > seq_of_call_16  # triggered by call 16's result
    assert seq_of_call_16 + 2 > abort["seq"]  # type: ignore[operator]
    commands = [d for d in decisions if d["type"] == "command"]
    assert [c["command"] for c in commands] == ["abort_run"]


def test_replay_output_is_byte_identical_to_the_recorded_golden_files() -> None:
    for name in ("openclaw-P1-r5", "openclaw-P2-r7"):
        lines = (TRACES / f"{name}.jsonl").read_bytes().splitlines()
        replayer = Replayer(load_policy({"tools": {"loopDetection": {"enabled": True}}}))
        got = b"".join(
            encode_decision(d) + b"\n"
            for d in replay_lines(replayer, lines)
            if not isinstance(d, Rejected)
        )
        assert got == (EXPECTED / f"{name}.decisions.jsonl").read_bytes()
