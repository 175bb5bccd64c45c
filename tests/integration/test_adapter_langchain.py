"""LangChain v1's real agent loop (`create_agent`) with a scripted chat model, a real worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.adapters.langchain import LoopGuardMiddleware

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

Script = Callable[[Sequence[BaseMessage]], AIMessage]


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model, answering from a script of the conversation so far."""

    script: Any = None
    messages: Any = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])


def call(name: str, args: dict[str, Any], n: int) -> AIMessage:
    """An assistant turn asking for one tool call."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{n}"}])


def looping(messages: Sequence[BaseMessage]) -> AIMessage:
    """Reads the same missing file until a tool call is refused, then stops."""
    last = messages[-1]
    if isinstance(last, ToolMessage) and last.status == "error":  # only a refusal is an error
        return AIMessage(content="giving up: the tool keeps failing")
    turns = sum(isinstance(m, AIMessage) for m in messages)
    if turns >= CALLS:
        return AIMessage(content="never blocked")
    return call("read_file", {"path": "/data/report.csv"}, turns + 1)


def healthy(messages: Sequence[BaseMessage]) -> AIMessage:
    """Reads five different files once each, then answers."""
    turns = sum(isinstance(m, AIMessage) for m in messages)
    if turns >= 5:
        return AIMessage(content="done")
    return call("read_file", {"path": f"/data/part-{turns}.csv"}, turns + 1)


def agent(lg: LoopGuard, script: Script, runs: list[str]) -> Any:
    """create_agent with the scripted model, a read_file tool and LoopGuard's middleware."""

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        runs.append(path)
        return FAILURE if path == "/data/report.csv" else f"contents of {path}"

    return create_agent(
        ScriptedChat(script=script), [read_file], middleware=[LoopGuardMiddleware(lg)]
    )


def config(run_id: uuid.UUID) -> dict[str, Any]:
    """The invocation's config: its run id is LoopGuard's run id."""
    return {"run_id": run_id, "configurable": {"thread_id": "t1"}, "recursion_limit": 500}


async def test_a_loop_is_refused_at_the_call_replay_blocks_and_the_agent_goes_on(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    run_id = uuid.uuid4()
    out = await agent(guard, looping, ran).ainvoke(
        {"messages": [("user", "summarise /data/report.csv")]}, config(run_id)
    )
    messages = out["messages"]
    refusals = [m for m in messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(refusals) == 1, [m.content for m in messages]
    refusal = refusals[0]
    assert "read_file" in refusal.content and "CRITICAL" in refusal.content  # the detector's
    assert messages[-1].content == "giving up: the tool keeps failing"  # the run went on
    events = await published(kafka, adapter_topics.tool_calls, str(run_id), 2 * len(ran) + 1)
    blocked_seq = seq_of_call(events, refusal.tool_call_id)
    assert blocked_seq == await replay_first_block(broker, adapter_topics, policy_file, str(run_id))
    calls = [e for e in events if e["type"] == "tool_call"]
    assert calls[-1]["seq"] == blocked_seq  # the refused call was the last one
    assert len(ran) == len(calls) - 1  # ... and it never ran
    assert all(e["type"] != "tool_result" or e["seq"] < blocked_seq for e in events)
    assert {e.get("session_key") for e in events} == {"t1"}


async def test_a_healthy_run_is_never_touched(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    run_id = uuid.uuid4()
    out = await agent(guard, healthy, ran).ainvoke(
        {"messages": [("user", "read the parts")]}, config(run_id)
    )
    assert out["messages"][-1].content == "done"
    assert ran == [f"/data/part-{i}.csv" for i in range(5)]
    results = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert results == [f"contents of {p}" for p in ran]
    events = await published(kafka, adapter_topics.tool_calls, str(run_id), 10)
    assert [e["type"] for e in events] == ["tool_call", "tool_result"] * 5
    assert await replay_first_block(broker, adapter_topics, policy_file, str(run_id)) is None


async def test_abort_run_ends_the_agent_with_loopguards_reason(
    guard: LoopGuard,  # noqa: F811  # the fixture
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
) -> None:
    ran: list[str] = []
    run_id = uuid.uuid4()
    reason = "LoopGuard stopped this run: compaction did not break the loop."
    abort = {
        "type": "command", "command": "abort_run", "run_id": str(run_id), "seq": 7,
        "reason": reason, "detector": "compaction_loop_persisted",
    }  # fmt: skip

    def aborting(messages: Sequence[BaseMessage]) -> AIMessage:
        turns = sum(isinstance(m, AIMessage) for m in messages)
        if turns >= CALLS:
            return AIMessage(content="never aborted")
        return call("read_file", {"path": f"/data/part-{turns}.csv"}, turns + 1)

    async def abort_after_three() -> None:
        while len(ran) < 3:  # noqa: ASYNC110 -- polls the tool's own record, bounded below
            await asyncio.sleep(0.01)
        await kafka.produce_json(adapter_topics.control, [abort])
        while guard.abort_reason(str(run_id)) is None:  # noqa: ASYNC110 -- bounded below
            await asyncio.sleep(0.01)

    graph = agent(guard, aborting, ran)
    invocation = asyncio.ensure_future(
        graph.ainvoke({"messages": [("user", "read everything")]}, config(run_id))
    )
    await asyncio.wait_for(abort_after_three(), 30)
    out = await asyncio.wait_for(invocation, 60)
    assert out["messages"][-1] == AIMessage(content=reason, id=out["messages"][-1].id)
    assert guard.abort_reason(str(run_id)) == reason
    assert 3 <= len(ran) < CALLS
