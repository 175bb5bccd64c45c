"""The loop signature (docs/fleet.md, "Signature"): what it hashes and what it leaves out."""

from __future__ import annotations

import re
from typing import Any

from loopguard_fleet.detectors import OPENCLAW_2026_9, RunState, Thresholds, process_event
from loopguard_fleet.detectors.fleet import last_outcome, loop_signature, signature_of_call
from loopguard_fleet.detectors.records import Record
from tests.wire import RunScript

ON = Thresholds(enabled=True)
NEW = Thresholds(enabled=True, semantics=OPENCLAW_2026_9)
AHASH = "read:" + "a" * 64


def _loop_events(events: list[dict[str, Any]], th: Thresholds = ON) -> list[dict[str, Any]]:
    state = RunState()
    out = [d.to_wire() for ev in events for d in process_event(state, ev, th)]
    return [d for d in out if d["type"] == "loop_event"]


def _failing(n: int, run: RunScript, error: str = "ENOENT: /etc/app.yaml") -> list[Any]:
    return [e for _ in range(n) for e in run.both("read", {"path": "/etc/app.yaml"}, error=error)]


def test_a_signature_is_32_hex_digits_and_changes_with_each_of_its_parts() -> None:
    done = Record("read", AHASH, result_hash="error:" + "b" * 64, seq=2)
    base = loop_signature("read", AHASH, done)
    assert re.fullmatch(r"[0-9a-f]{32}", base)
    other_result = Record("read", AHASH, result_hash="error:" + "c" * 64, seq=2)
    unknown = Record("read", AHASH, result_hash="error:" + "b" * 64, unknown_tool_name="x")
    assert len({
        base,
        loop_signature("exec", AHASH, done),
        loop_signature("read", "read:" + "d" * 64, done),
        loop_signature("read", AHASH, other_result),
        loop_signature("read", AHASH, unknown),
        loop_signature("read", AHASH, None),
    }) == 6  # fmt: skip


def test_seq_and_event_id_of_the_outcome_take_no_part() -> None:
    a = Record("read", AHASH, result_hash="error:" + "b" * 64, seq=2, event_id="r1:2")
    b = Record("read", AHASH, result_hash="error:" + "b" * 64, seq=90, event_id="r2:90")
    assert loop_signature("read", AHASH, a) == loop_signature("read", AHASH, b)


def test_a_failure_identity_stands_for_the_volatile_result_hash() -> None:
    a = Record("exec", AHASH, result_hash="x:" + "1" * 64, failure_identity="exit:127:cmd")
    b = Record("exec", AHASH, result_hash="x:" + "2" * 64, failure_identity="exit:127:cmd")
    c = Record("exec", AHASH, result_hash="x:" + "2" * 64, failure_identity="exit:1:cmd")
    assert loop_signature("exec", AHASH, a) == loop_signature("exec", AHASH, b)
    assert loop_signature("exec", AHASH, b) != loop_signature("exec", AHASH, c)


def test_last_outcome_skips_pending_records_vetoes_and_other_calls() -> None:
    done = Record("read", AHASH, result_hash="error:" + "b" * 64, seq=1)
    history = [
        done,
        Record("read", "read:" + "e" * 64, result_hash="error:" + "c" * 64, seq=2),
        Record.pending("read", AHASH, "c3", 3),
        Record("read", AHASH, seq=4, outcome_kind="tool-loop-veto"),
    ]
    assert last_outcome(history, "read", AHASH) is done
    assert last_outcome(history, "exec", AHASH) is None
    assert signature_of_call(history, "read", AHASH) == loop_signature("read", AHASH, done)


def test_every_loop_event_carries_the_signature_of_its_call_and_outcome() -> None:
    events = _loop_events(_failing(21, RunScript("r1")))
    assert len(events) == 11  # warnings from the 11th call, the block at the 21st
    assert len({e["signature"] for e in events}) == 1


def test_the_same_loop_in_other_runs_and_agents_has_the_same_signature() -> None:
    one = _loop_events(_failing(11, RunScript("run-a", agent_id="main")))
    two = _loop_events(_failing(11, RunScript("run-b", agent_id="ops")))
    assert one[0]["signature"] == two[0]["signature"]
    assert one[0]["id"] != two[0]["id"]


def test_another_outcome_of_the_same_call_is_another_signature() -> None:
    enoent = _loop_events(_failing(11, RunScript("r1")))
    eacces = _loop_events(_failing(11, RunScript("r1"), error="EACCES: /etc/app.yaml"))
    assert enoent[0]["signature"] != eacces[0]["signature"]


def test_the_2026_9_profile_signs_its_loops_and_blocks_keep_the_tools_outcome() -> None:
    events = _loop_events(_failing(25, RunScript("r1")), NEW)
    assert [e["level"] for e in events][-1] == "critical"
    # The blocked calls' vetoes are recorded as outcomes; the signature stays the tool's.
    assert len({e["signature"] for e in events}) == 1


def test_a_compaction_abort_is_signed_by_the_outcome_that_completed_it() -> None:
    run = RunScript("r1")
    events = [run.compaction()] + _failing(3, run, error="boom")
    aborts = [e for e in _loop_events(events) if e["action"] == "abort"]
    warned = _loop_events(_failing(11, RunScript("r2"), error="boom"))
    assert len(aborts) == 1
    assert aborts[0]["signature"] == warned[0]["signature"]  # the same call, the same outcome
