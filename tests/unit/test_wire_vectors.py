"""Shared wire-format vectors: the Python runtime client writes exactly what the file says.

tests/data/wire_vectors.json is read by this test and by the OpenClaw plugin's node tests
(integrations/openclaw/test/wire-vectors.test.js), so both clients agree on every byte of every
event (topic, key, value) and on every privacy-mode hash. Inputs in the file are written by
hand; the expected values come from this module:

    .venv/bin/python -m tests.unit.test_wire_vectors --write
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.detectors.hashing import (
    args_hash,
    normalize_tool,
    outcome_unknown_tool_name,
    result_hash,
)
from loopguard_fleet.detectors.values import JSON, Outcome
from loopguard_fleet.streams.client.run_events import MISSING
from loopguard_fleet.streams.client.runtime import RuntimeClient, Topics

VECTORS_PATH = Path(__file__).parents[1] / "data" / "wire_vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))


def _outcome(case: dict[str, Any]) -> Outcome:
    outcome = case["outcome"]
    if "error" in outcome:
        return Outcome.error(outcome["error"])
    return Outcome.result(outcome["result"]) if "result" in outcome else Outcome.pending()


def hashes_of(case: dict[str, Any]) -> dict[str, Any]:
    """The args_hash, result_hash and unknown_tool_name detectors/hashing.py gives a case."""
    channel_tools = frozenset(case.get("channel_tools", ["telegram"]))
    outcome = _outcome(case)
    return {
        "args_hash": args_hash(case["tool"], case["args"]),
        "result_hash": result_hash(
            normalize_tool(case["tool"]), case["args"], outcome, channel_tools
        ),
        "unknown_tool_name": outcome_unknown_tool_name(outcome),
    }


class RecordingLink:
    """Stands in for the client's broker connection: records (topic, key, value) as queued."""

    is_started = True

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    def send(self, topic: str, key: bytes, value: bytes, run_id: str, *, urgent: bool) -> None:
        """Record one message as the client hands it over for delivery."""
        self.sent.append({"topic": topic, "key": key.decode(), "value": value.decode()})


async def messages_of(scenario: dict[str, Any]) -> list[dict[str, str]]:
    """The messages RuntimeClient publishes for a scenario's steps (no `ts`: clock=None)."""
    spec = scenario["client"]
    client = RuntimeClient("127.0.0.1:9", topics=Topics(), privacy=spec["privacy"], clock=None)
    link = RecordingLink()
    client._link = link  # type: ignore[assignment]  # the routing and bytes are under test
    run = client.run(spec["run_id"], agent_id=spec["agent_id"], session_key=spec["session_key"])
    for step in scenario["steps"]:
        op = step["op"]
        if op == "tool_call":
            await run.tool_call(
                step["tool"], step["args"], step["tool_call_id"], step.get("want_verdict", False)
            )
        elif op == "tool_result":
            error: JSON | BaseException = (
                RuntimeError(step["exception"]) if "exception" in step else step.get("error")
            )
            has_error = "exception" in step or "error" in step
            await run.tool_result(
                step["tool_call_id"],
                step["tool"],
                step["args"],
                result=step.get("result", MISSING),
                error=error if has_error else MISSING,
            )
        elif op == "compaction":
            await run.compaction()
        else:
            await run.end()
    return link.sent


def regenerate() -> None:
    """Write every `expected` of the vector file from this implementation."""
    for case in VECTORS["hashes"]:
        case["expected"] = hashes_of(case)
    for scenario in VECTORS["runs"]:
        scenario["expected"] = asyncio.run(messages_of(scenario))
    text = json.dumps(VECTORS, indent=1, ensure_ascii=False) + "\n"
    VECTORS_PATH.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("case", VECTORS["hashes"], ids=lambda c: c["id"])
def test_privacy_hashes_match_the_shared_vectors(case: dict[str, Any]) -> None:
    assert hashes_of(case) == case["expected"]


@pytest.mark.parametrize("scenario", VECTORS["runs"], ids=lambda s: s["id"])
async def test_the_runtime_client_publishes_the_shared_vectors_byte_for_byte(
    scenario: dict[str, Any],
) -> None:
    assert await messages_of(scenario) == scenario["expected"]


def test_the_trace_anchor_gives_openclaws_own_hashes() -> None:
    # traces/README: the first critical's warning key, computed by OpenClaw's detector.
    anchor = VECTORS["hashes"][0]["expected"]
    assert anchor["args_hash"] == (
        "read:cfd87efe8329bd88730e411a9e583bddca9071099dc9437e374e29aa6f05ef9b"
    )
    assert anchor["result_hash"] == (
        "error:04437246383dc54040c0335c2f011d65acbe1eafca2e809ff60b60f702fb4bd3"
    )


def test_every_vector_event_routes_by_type_and_is_keyed_by_its_run() -> None:
    topics = VECTORS["topics"]
    for scenario in VECTORS["runs"]:
        for message in scenario["expected"]:
            event = json.loads(message["value"])
            lifecycle = event["type"] in ("compaction", "run_end")
            assert message["topic"] == topics["compactions" if lifecycle else "tool_calls"]
            assert message["key"] == event["run_id"] == scenario["client"]["run_id"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.test_wire_vectors --write")
    regenerate()
