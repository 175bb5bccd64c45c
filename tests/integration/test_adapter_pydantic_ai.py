"""pydantic-ai's real agent loop with its `FunctionModel` and a real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.adapters.pydantic_ai import LoopGuardCapability, RunAborted

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


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """Every tool return the model has seen."""
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]  # fmt: skip


def refusals(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool returns that are LoopGuard's refusal (the detector's CRITICAL message)."""
    return [p for p in returns(messages) if "CRITICAL" in str(p.content)]


def looping(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Reads the same missing file until a call is refused, then stops."""
    if refusals(messages):
        return ModelResponse(parts=[TextPart("giving up: the tool keeps failing")])
    n = len(returns(messages))
    if n >= CALLS:
        return ModelResponse(parts=[TextPart("never blocked")])
    return ModelResponse(
        parts=[ToolCallPart("read_file", {"path": "/data/report.csv"}, tool_call_id=f"c{n + 1}")]
    )


def healthy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Reads five different files once each, then answers."""
    n = len(returns(messages))
    if n >= 5:
        return ModelResponse(parts=[TextPart("done")])
    args = {"path": f"/data/part-{n}.csv"}
    return ModelResponse(parts=[ToolCallPart("read_file", args, tool_call_id=f"c{n + 1}")])


def agent(lg: LoopGuard, model: FunctionModel, ran: list[str]) -> Agent[None, str]:
    """An agent with the scripted model, a read_file tool and LoopGuard's capability."""
    a: Agent[None, str] = Agent(model, name="reader", capabilities=[LoopGuardCapability(lg)])

    @a.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        if path == "/data/report.csv":
            raise ToolFailed(FAILURE)
        return f"contents of {path}"

    return a


async def test_a_loop_is_refused_at_the_call_replay_blocks_and_the_agent_goes_on(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    result = await agent(guard, FunctionModel(looping), ran).run("summarise", run_id="pa-loop")
    assert result.output == "giving up: the tool keeps failing"  # the run went on
    (refusal,) = refusals(result.all_messages())
    assert refusal.outcome == "failed" and "read_file" in str(refusal.content)
    events = await published(kafka, adapter_topics.tool_calls, "pa-loop", 2 * len(ran) + 1)
    blocked_seq = seq_of_call(events, refusal.tool_call_id)
    assert blocked_seq == await replay_first_block(broker, adapter_topics, policy_file, "pa-loop")
    calls = [e for e in events if e["type"] == "tool_call"]
    assert calls[-1]["seq"] == blocked_seq and len(ran) == len(calls) - 1  # never ran
    assert {e["agent_id"] for e in events} == {"reader"}
    assert [e["error"] for e in events if e["type"] == "tool_result"] == [FAILURE] * len(ran)


async def test_a_healthy_run_is_never_touched(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    result = await agent(guard, FunctionModel(healthy), ran).run("read", run_id="pa-healthy")
    assert result.output == "done"
    assert ran == [f"/data/part-{i}.csv" for i in range(5)]
    assert [p.content for p in returns(result.all_messages())] == [f"contents of {p}" for p in ran]
    events = await published(kafka, adapter_topics.tool_calls, "pa-healthy", 10)
    assert [e["type"] for e in events] == ["tool_call", "tool_result"] * 5
    assert await replay_first_block(broker, adapter_topics, policy_file, "pa-healthy") is None
    ends = await published(kafka, adapter_topics.compactions, "pa-healthy", 1)
    assert [e["type"] for e in ends] == ["run_end"]


async def test_abort_run_ends_the_run_with_run_aborted(
    guard: LoopGuard,  # noqa: F811  # the fixture
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
) -> None:
    ran: list[str] = []
    reason = "LoopGuard stopped this run: compaction did not break the loop."
    abort = {
        "type": "command", "command": "abort_run", "run_id": "pa-abort", "seq": 7,
        "reason": reason, "detector": "compaction_loop_persisted",
    }  # fmt: skip

    def endless(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        if n >= CALLS:
            return ModelResponse(parts=[TextPart("never aborted")])
        args = {"path": f"/data/part-{n}.csv"}
        return ModelResponse(parts=[ToolCallPart("read_file", args, tool_call_id=f"c{n + 1}")])

    async def abort_after_three() -> None:
        while len(ran) < 3:  # noqa: ASYNC110 -- polls the tool's own record, bounded below
            await asyncio.sleep(0.01)
        await kafka.produce_json(adapter_topics.control, [abort])

    run = asyncio.ensure_future(
        agent(guard, FunctionModel(endless), ran).run("x", run_id="pa-abort")
    )
    await asyncio.wait_for(abort_after_three(), 30)
    with pytest.raises(RunAborted, match="compaction did not break the loop"):
        await asyncio.wait_for(run, 60)
    assert 3 <= len(ran) < CALLS
