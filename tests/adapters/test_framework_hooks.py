"""Each framework's real loop without a broker: a warning's note reaches the model while
LoopGuard records the raw outcome (the note is not progress), and LangChain's summarisation
publishes a compaction. A fake client plays the worker: every verdict is "warn" with
OpenClaw's note."""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.streams.client import VerdictReply

from .fakes import NOTE, FakeClient

pytestmark = pytest.mark.adapters

PATHS = [f"/data/part-{i}.csv" for i in range(5)]


def warning_guard() -> LoopGuard:
    """A gate-mode guard whose every verdict is a warning with OpenClaw's note."""
    reply = VerdictReply.from_payload({"decision": "warn", "note": NOTE, "count": 10})
    return LoopGuard(FakeClient(default=reply))


def raw_results(guard: LoopGuard) -> list[Any]:
    """The outcomes the guard published."""
    sent: list[dict[str, Any]] = guard.client.sent  # type: ignore[attr-defined]
    return [e.get("result", e.get("error")) for e in sent if e["type"] == "tool_result"]


async def test_langchain_appends_the_note_to_the_tool_message() -> None:
    from langchain_core.messages import ToolMessage

    from tests.integration.test_adapter_langchain import agent, healthy

    ran: list[str] = []
    async with warning_guard() as guard:
        out = await agent(guard, healthy, ran).ainvoke({"messages": [("user", "read")]})
    seen = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert seen == [f"contents of {p}\n\n{NOTE}" for p in PATHS]
    assert raw_results(guard) == [f"contents of {p}" for p in PATHS]


async def test_pydantic_ai_appends_the_note_to_the_tool_return() -> None:
    from pydantic_ai.models.function import FunctionModel

    from tests.integration.test_adapter_pydantic_ai import agent, healthy, returns

    ran: list[str] = []
    async with warning_guard() as guard:
        result = await agent(guard, FunctionModel(healthy), ran).run("read")
    seen = [p.content for p in returns(result.all_messages())]
    assert seen == [f"contents of {p}\n\n{NOTE}" for p in PATHS]
    assert raw_results(guard) == [f"contents of {p}" for p in PATHS]


async def test_openai_agents_sends_the_output_with_the_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "true")
    from agents import Runner

    from tests.integration.test_adapter_openai_agents import agent, config, healthy

    ran: list[str] = []
    async with warning_guard() as guard:
        result = await Runner.run(agent(guard, healthy, ran), "read", run_config=config("t-n"))
    seen = [i["output"] for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert len(seen) == 5 and all(str(s).endswith(NOTE) for s in seen), seen
    assert [f"contents of {p}" in str(s) for p, s in zip(PATHS, seen, strict=True)] == [True] * 5
    assert raw_results(guard) == [f"contents of {p}" for p in PATHS]


async def test_google_adk_adds_the_note_to_the_tool_response() -> None:
    from tests.integration.test_adapter_google_adk import healthy, responses, run

    ran: list[str] = []
    async with warning_guard() as guard:
        events = await run(guard, healthy, ran, "adk-note")
    seen = [r.response for r in responses(events)]
    assert seen == [{"content": f"contents of {p}", "loopguard_note": NOTE} for p in PATHS]
    assert raw_results(guard) == [{"content": f"contents of {p}"} for p in PATHS]


async def test_langchain_publishes_a_compaction_when_summarization_runs() -> None:
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages import AIMessage, HumanMessage

    from loopguard_fleet.adapters.langchain import LoopGuardMiddleware
    from tests.integration.test_adapter_langchain import ScriptedChat, call

    turns: list[int] = []  # the history shrinks when summarised: count turns here

    def summarise(messages: Any) -> AIMessage:
        if isinstance(messages[-1], HumanMessage) and "summar" in str(messages[-1].content):
            return AIMessage(content="the parts read so far")
        turns.append(len(turns))
        if len(turns) > 5:
            return AIMessage(content="done")
        return call("read_file", {"path": f"/data/part-{len(turns)}.csv"}, len(turns))

    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    model = ScriptedChat(script=summarise)
    summary = SummarizationMiddleware(model, trigger=("messages", 6), keep=("messages", 2))
    async with warning_guard() as guard:
        agent = create_agent(
            model, [read_file], middleware=[summary, LoopGuardMiddleware(guard, agent_id="a")]
        )
        await agent.ainvoke({"messages": [("user", "read")]}, {"recursion_limit": 100})
    sent: list[dict[str, Any]] = guard.client.sent  # type: ignore[attr-defined]
    kinds = [e["type"] for e in sent]
    assert "compaction" in kinds, kinds
    assert kinds[-1] == "run_end"
