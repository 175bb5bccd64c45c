"""The adapters' shared core without a broker: a fake RuntimeClient records and answers."""

from __future__ import annotations

import asyncio
import importlib
import sys
from importlib import metadata
from typing import Any

import pytest
from pydantic import BaseModel

from loopguard_fleet.adapters.core import LoopGuard, jsonable
from loopguard_fleet.adapters.gate import (
    FALLBACK_BLOCK_MESSAGE,
    TIMEOUT_BLOCK_MESSAGE,
    with_note,
)
from loopguard_fleet.adapters.versions import require_version
from loopguard_fleet.streams.client import VerdictReply

from .fakes import NOTE, FakeClient

pytestmark = pytest.mark.adapters


def verdict(decision: str, **fields: Any) -> VerdictReply:
    """A worker's verdict for call c1 of run r1 (trigger event r1:1) with extra payload fields."""
    msg = {"type": "verdict", "run_id": "r1", "tool_call_id": "c1", "decision": decision,
           "trigger_event_id": "r1:1", "seq": 1, **fields}  # fmt: skip
    return VerdictReply.from_payload(msg)


async def test_a_block_refuses_with_the_verdicts_message_and_records_no_outcome() -> None:
    client = FakeClient({"c1": verdict("block", message="CRITICAL: read repeats", detector="d")})
    async with LoopGuard(client) as guard:
        gate = await guard.before_call("r1", "main", "read", {"path": "/a"}, "c1")
        await guard.after_call(gate, result="never ran")
    assert (gate.action, gate.message, gate.detector) == ("block", "CRITICAL: read repeats", "d")
    assert [e["type"] for e in client.sent] == ["tool_call"]  # the veto is no outcome
    assert client.sent[0]["want_verdict"] is True and client.sent[0]["agent_id"] == "main"


async def test_a_block_without_a_message_takes_the_loop_events_then_the_fallback() -> None:
    client = FakeClient({"c1": verdict("block")})
    async with LoopGuard(client) as guard:
        guard.observe({"type": "loop_event", "run_id": "r1", "trigger_event_id": "r1:1",
                       "message": "CRITICAL: from the loop event"})  # fmt: skip
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert gate.message == "CRITICAL: from the loop event"
    async with LoopGuard(FakeClient({"c1": verdict("block")})) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert gate.message == FALLBACK_BLOCK_MESSAGE


async def test_a_warning_note_is_handed_on_unless_warnings_are_hidden() -> None:
    reply = {"c1": verdict("warn", note=NOTE, detector="generic_repeat", count=10)}
    async with LoopGuard(FakeClient(reply)) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert gate.is_allowed and gate.note == NOTE
    assert with_note("File not found", gate.note) == f"File not found\n\n{NOTE}"
    async with LoopGuard(FakeClient(reply), show_warnings=False) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert gate.is_allowed and gate.note is None


async def test_no_answer_fails_open_or_closed_as_configured() -> None:
    async with LoopGuard(FakeClient()) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert gate.is_allowed and gate.is_timeout
    async with LoopGuard(FakeClient(), fail_closed=True) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
    assert (gate.action, gate.message, gate.is_timeout) == ("block", TIMEOUT_BLOCK_MESSAGE, True)


async def test_an_aborted_run_is_refused_without_publishing_and_others_go_on() -> None:
    client = FakeClient()
    async with LoopGuard(client, gate=False) as guard:
        client.control.put_nowait({"type": "command", "command": "abort_run", "run_id": "r1",
                                   "reason": "stopped: loop after compaction"})  # fmt: skip
        for _ in range(100):  # the reader task takes the command on its next turn
            if guard.abort_reason("r1") is not None:
                break
            await asyncio.sleep(0)
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
        other = await guard.before_call("r2", None, "read", {"path": "/a"}, "c1")
    assert (gate.action, gate.message) == ("abort", "stopped: loop after compaction")
    assert other.is_allowed and [e["run_id"] for e in client.sent] == ["r2"]


async def test_observe_mode_publishes_without_asking() -> None:
    client = FakeClient({"c1": verdict("block")})
    async with LoopGuard(client, gate=False) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/a"}, "c1")
        await guard.after_call(gate, error=FileNotFoundError("/a"))
    assert gate.is_allowed and "want_verdict" not in client.sent[0]
    assert client.sent[1]["error"] == "/a"


async def test_privacy_mode_hashes_at_the_edge() -> None:
    client = FakeClient(privacy=True)
    async with LoopGuard(client, gate=False) as guard:
        gate = await guard.before_call("r1", None, "read", {"path": "/secret"}, "c1")
        await guard.after_call(gate, result={"text": "secret contents"})
    assert "secret" not in repr(client.sent)
    assert {"args_hash", "result_hash"} <= set(client.sent[0]) | set(client.sent[1])


def test_jsonable_turns_framework_values_into_json() -> None:
    class Args(BaseModel):
        path: str

    assert jsonable({"a": (1, Args(path="/x")), 2: None}) == {"a": [1, {"path": "/x"}], "2": None}
    assert jsonable(FileNotFoundError("gone")) == "gone"


def test_a_version_outside_the_range_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: "2.0.1")
    with pytest.raises(ImportError) as err:
        require_version("langchain", "1.5", "2")
    assert str(err.value) == (
        "loopguard_fleet.adapters supports langchain>=1.5,<2; 2.0.1 is installed"
    )
    monkeypatch.setattr(metadata, "version", lambda name: "1.5.2")
    assert require_version("langchain", "1.5", "2") == "1.5.2"
    monkeypatch.undo()
    with pytest.raises(ImportError, match=r"needs no-such-framework>=1,<2"):
        require_version("no-such-framework", "1", "2")


@pytest.mark.parametrize(
    ("module", "distribution"),
    [
        ("langchain", "langchain"),
        ("pydantic_ai", "pydantic-ai-slim"),
        ("openai_agents", "openai-agents"),
        ("google_adk", "google-adk"),
    ],
)
def test_each_adapter_refuses_a_framework_past_its_range(
    monkeypatch: pytest.MonkeyPatch, module: str, distribution: str
) -> None:
    name = f"loopguard_fleet.adapters.{module}"
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "99.0.0" if d == distribution else real(d))
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError) as err:
        importlib.import_module(name)
    message = str(err.value)
    assert "\n" not in message and f"{distribution}>=" in message and "99.0.0" in message
