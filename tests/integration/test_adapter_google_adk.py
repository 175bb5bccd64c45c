"""Google ADK's real runner (`InMemoryRunner`, `LlmAgent`) with a scripted `BaseLlm`, a real
worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.adapters.google_adk import LoopGuardCallbacks

from .adapter_support import (
    CALLS,
    FAILURE,
    adapter_topics,  # noqa: F401  # fixture
    guard,  # noqa: F401  # fixture
    policy_file,  # noqa: F401  # fixture
    published,
    replay_first_block,
    seq_of_call,
    worker,  # noqa: F401  # fixture
)
from .conftest import KafkaIO, SessionBroker, TopicSet

pytestmark = [pytest.mark.adapters, pytest.mark.timeout(300)]

Script = Callable[[list[types.FunctionResponse]], LlmResponse]


class ScriptedLlm(BaseLlm):
    """A `BaseLlm` answering from a script of the tool responses it has seen."""

    script: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        seen = [
            p.function_response for c in llm_request.contents for p in c.parts or []
            if p.function_response is not None
        ]  # fmt: skip
        yield self.script(seen)


def text(answer: str) -> LlmResponse:
    """A final model answer."""
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=answer)]))


def call(args: dict[str, Any], n: int) -> LlmResponse:
    """A model turn asking for read_file."""
    fc = types.FunctionCall(name="read_file", args=args, id=f"c{n}")
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=fc)]))


def is_refusal(r: types.FunctionResponse) -> bool:
    """A tool response that is LoopGuard's refusal (the detector's CRITICAL message)."""
    return "CRITICAL" in str((r.response or {}).get("error"))


def looping(seen: list[types.FunctionResponse]) -> LlmResponse:
    """Reads the same missing file until a call is refused, then stops."""
    if any(is_refusal(r) for r in seen):
        return text("giving up: the tool keeps failing")
    if len(seen) >= CALLS:
        return text("never blocked")
    return call({"path": "/data/report.csv"}, len(seen) + 1)


def healthy(seen: list[types.FunctionResponse]) -> LlmResponse:
    """Reads five different files once each, then answers."""
    n = len(seen)
    return text("done") if n >= 5 else call({"path": f"/data/part-{n}.csv"}, n + 1)


async def run(lg: LoopGuard, script: Script, ran: list[str], run_id: str) -> list[Event]:
    """One invocation of an LlmAgent with LoopGuard's callbacks; its events."""

    def read_file(path: str) -> dict[str, str]:
        """Read a file."""
        ran.append(path)
        if path == "/data/report.csv":
            return {"error": FAILURE}
        return {"content": f"contents of {path}"}

    cb = LoopGuardCallbacks(lg)
    agent = LlmAgent(
        name="reader", model=ScriptedLlm(model="scripted", script=script), tools=[read_file],
        before_tool_callback=cb.before_tool, after_tool_callback=cb.after_tool,
        before_model_callback=cb.before_model,
    )  # fmt: skip
    runner = InMemoryRunner(agent=agent, app_name="loopguard-test")
    session = await runner.session_service.create_session(app_name="loopguard-test", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    try:
        return [
            ev async for ev in runner.run_async(
                user_id="u", session_id=session.id, invocation_id=run_id, new_message=message
            )
        ]  # fmt: skip
    finally:
        await runner.close()


def responses(events: list[Event]) -> list[types.FunctionResponse]:
    """The tool responses of the invocation, in order."""
    return [r for ev in events for r in ev.get_function_responses()]


def final_text(events: list[Event]) -> str:
    """The invocation's last text."""
    parts = events[-1].content.parts if events[-1].content else None
    return "".join(p.text or "" for p in parts or [])


async def test_a_loop_is_refused_at_the_call_replay_blocks_and_the_agent_goes_on(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    events = await run(guard, looping, ran, "adk-loop")
    assert final_text(events) == "giving up: the tool keeps failing"  # the run went on
    (refusal,) = [r for r in responses(events) if is_refusal(r)]
    assert refusal.id is not None and "read_file" in str(refusal.response)
    published_events = await published(
        kafka, adapter_topics.tool_calls, "adk-loop", 2 * len(ran) + 1
    )
    blocked_seq = seq_of_call(published_events, refusal.id)
    assert blocked_seq == await replay_first_block(broker, adapter_topics, policy_file, "adk-loop")
    calls = [e for e in published_events if e["type"] == "tool_call"]
    assert calls[-1]["seq"] == blocked_seq and len(ran) == len(calls) - 1  # never ran
    assert {e["agent_id"] for e in published_events} == {"reader"}
    errors = [e["error"] for e in published_events if e["type"] == "tool_result"]
    assert errors == [FAILURE] * len(ran)


async def test_a_healthy_run_is_never_touched(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    events = await run(guard, healthy, ran, "adk-healthy")
    assert final_text(events) == "done"
    assert ran == [f"/data/part-{i}.csv" for i in range(5)]
    assert [r.response for r in responses(events)] == [{"content": f"contents of {p}"} for p in ran]
    published_events = await published(kafka, adapter_topics.tool_calls, "adk-healthy", 10)
    assert [e["type"] for e in published_events] == ["tool_call", "tool_result"] * 5
    assert await replay_first_block(broker, adapter_topics, policy_file, "adk-healthy") is None


async def test_abort_run_ends_the_invocation_with_loopguards_reason(
    guard: LoopGuard,  # noqa: F811  # the fixture
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
) -> None:
    ran: list[str] = []
    reason = "LoopGuard stopped this run: compaction did not break the loop."
    abort = {
        "type": "command", "command": "abort_run", "run_id": "adk-abort", "seq": 7,
        "reason": reason, "detector": "compaction_loop_persisted",
    }  # fmt: skip

    def endless(seen: list[types.FunctionResponse]) -> LlmResponse:
        if len(seen) >= CALLS:
            return text("never aborted")
        return call({"path": f"/data/part-{len(seen)}.csv"}, len(seen) + 1)

    async def abort_after_three() -> None:
        while len(ran) < 3:  # noqa: ASYNC110 -- polls the tool's own record, bounded below
            await asyncio.sleep(0.01)
        await kafka.produce_json(adapter_topics.control, [abort])

    invocation = asyncio.ensure_future(run(guard, endless, ran, "adk-abort"))
    await asyncio.wait_for(abort_after_three(), 30)
    events = await asyncio.wait_for(invocation, 60)
    assert final_text(events) == reason
    assert 3 <= len(ran) < CALLS
