"""Every control message the engine publishes, in both profiles, is one the control schema
(streams/wire/schema.py) describes: no undocumented field, no field of the wrong type."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import RunState, Thresholds, process_event
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines
from loopguard_fleet.streams.wire.schema import AnyControlMessage, control_schema
from tests.differential.streams import generate_run

CONTROL: TypeAdapter[Any] = TypeAdapter(AnyControlMessage)
PROFILES = {
    "configurable": Thresholds(enabled=True),
    "openclaw-2026.9": Thresholds(enabled=True, semantics="openclaw-2026.9"),
}
TRACES = Path(__file__).parents[1] / "data" / "traces"


def _generated(th: Thresholds, seed: int) -> list[dict[str, Any]]:
    """The payloads of 30 generated runs, every call asking for a verdict."""
    rng = random.Random(seed)
    payloads: list[dict[str, Any]] = []
    for n in range(30):
        state = RunState()

        def blocked(event: dict[str, Any], state: RunState = state) -> bool:
            if event["type"] == "tool_call":
                event["want_verdict"] = True
            out = [d.payload for d in process_event(state, event, th)]
            payloads.extend(out)
            return any(p.get("command") == "block_call" for p in out)

        generate_run(rng, f"run-{n}", blocked)
    return payloads


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_generated_message_fits_the_control_schema(profile: str) -> None:
    payloads = _generated(PROFILES[profile], seed=5)
    for payload in payloads:
        CONTROL.validate_python(payload)
    kinds = {
        (p["type"], p.get("command") or p.get("decision") or p.get("action")) for p in payloads
    }
    assert {("verdict", "allow"), ("verdict", "warn"), ("verdict", "block")} <= kinds
    assert {("loop_event", "warn"), ("loop_event", "block"), ("command", "block_call")} <= kinds
    aborted = ("command", "abort_run") in kinds
    assert aborted == (profile == "openclaw-2026.9")  # the recovery allowance
    assert any("note" in p for p in payloads) == (profile == "openclaw-2026.9")


def test_the_guard_abort_fits_the_control_schema() -> None:
    replayer = Replayer(load_policy({"tools": {"loopDetection": {"enabled": True}}}))
    lines = (TRACES / "openclaw-P2-r7.jsonl").read_bytes().splitlines()
    out = [d.to_wire() for d in replay_lines(replayer, lines) if not isinstance(d, Rejected)]
    assert any(p.get("command") == "abort_run" for p in out)
    for payload in out:
        CONTROL.validate_python(payload)


def test_every_decision_names_the_policy_that_made_it() -> None:
    policy = load_policy({"tools": {"loopDetection": {"enabled": True}}})
    lines = (TRACES / "openclaw-P1-r5.jsonl").read_bytes().splitlines()
    out = [
        d.to_wire() for d in replay_lines(Replayer(policy), lines) if not isinstance(d, Rejected)
    ]
    assert {p["type"] for p in out} == {"loop_event", "command"}
    assert {p["policy_version"] for p in out} == {policy.version}
    tuned = load_policy(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "loopguard": {"tools": {"read": {"criticalThreshold": 40}}},
        }
    )
    out = [d.to_wire() for d in replay_lines(Replayer(tuned), lines) if not isinstance(d, Rejected)]
    assert {p["policy_version"] for p in out} == {tuned.version} != {policy.version}


def test_an_undocumented_field_is_refused() -> None:
    verdict = {
        "type": "verdict", "run_id": "r", "tool_call_id": "c", "decision": "allow",
        "trigger_event_id": "e", "seq": 1, "policy_version": "sha256:0123456789abcdef",
        "id": "x",
    }  # fmt: skip
    CONTROL.validate_python(verdict)
    with pytest.raises(ValidationError):
        CONTROL.validate_python({**verdict, "surprise": 1})


def test_the_schema_documents_the_note_and_the_verdicts_loop_event_fields() -> None:
    defs = orjson.loads(orjson.dumps(control_schema()))["$defs"]
    assert {"detector", "level", "count", "message", "note"} <= set(
        defs["VerdictMessage"]["properties"]
    )
    assert "note" in defs["LoopEventMessage"]["properties"]
