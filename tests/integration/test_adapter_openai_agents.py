"""The OpenAI Agents SDK's real runner with its `ScriptedModel` (a `Model`) and a real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
)
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as call_item

from loopguard_fleet.adapters.core import LoopGuard
from loopguard_fleet.adapters.openai_agents import protect

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


def outputs(mc: ModelCall) -> list[dict[str, Any]]:
    """The tool outputs the model has been given so far."""
    items = mc.input if isinstance(mc.input, list) else []
    return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def is_refusal(item: dict[str, Any]) -> bool:
    """A tool output that is LoopGuard's refusal (the detector's CRITICAL message)."""
    return "CRITICAL" in str(item.get("output"))


def looping(mc: ModelCall) -> Any:
    """Reads the same missing file until a call is refused, then stops."""
    seen = outputs(mc)
    if any(is_refusal(i) for i in seen):
        return [assistant_message("giving up: the tool keeps failing")]
    if len(seen) >= CALLS:
        return [assistant_message("never blocked")]
    return [call_item("read_file", {"path": "/data/report.csv"}, call_id=f"c{len(seen) + 1}")]


def healthy(mc: ModelCall) -> Any:
    """Reads five different files once each, then answers."""
    n = len(outputs(mc))
    if n >= 5:
        return [assistant_message("done")]
    return [call_item("read_file", {"path": f"/data/part-{n}.csv"}, call_id=f"c{n + 1}")]


def agent(lg: LoopGuard, script: Any, ran: list[str]) -> Agent[Any]:
    """An agent with the scripted model and a read_file tool under LoopGuard's guardrails."""

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        if path == "/data/report.csv":
            raise FileNotFoundError(FAILURE)
        return f"contents of {path}"

    model = ScriptedModel([ModelStep.respond(script) for _ in range(CALLS + 2)])
    return Agent(name="reader", model=model, tools=protect(lg, [read_file]))


def config(run_id: str) -> RunConfig:
    """The run's config: its trace id is LoopGuard's run id; nothing is exported."""
    return RunConfig(trace_id=run_id, group_id="thread-1", tracing_disabled=True)


async def test_a_loop_is_refused_at_the_call_replay_blocks_and_the_agent_goes_on(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    run_id = "trace_00000000000000000000000000000a01"
    result = await Runner.run(
        agent(guard, looping, ran), "summarise", run_config=config(run_id), max_turns=CALLS + 5
    )
    assert result.final_output == "giving up: the tool keeps failing"  # the run went on
    refused = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    (refusal,) = [i for i in refused if is_refusal(i)]
    assert "read_file" in str(refusal["output"])
    events = await published(kafka, adapter_topics.tool_calls, run_id, 2 * len(ran) + 1)
    blocked_seq = seq_of_call(events, str(refusal["call_id"]))
    assert blocked_seq == await replay_first_block(broker, adapter_topics, policy_file, run_id)
    calls = [e for e in events if e["type"] == "tool_call"]
    assert calls[-1]["seq"] == blocked_seq and len(ran) == len(calls) - 1  # never ran
    assert {(e["agent_id"], e["session_key"]) for e in events} == {("reader", "thread-1")}
    # The SDK hands a failure to the model as text: that text is the outcome LoopGuard records.
    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert results == [i["output"] for i in refused if not is_refusal(i)]
    assert len(results) == len(ran) and "error occurred" in results[0]


async def test_a_healthy_run_is_never_touched(
    guard: LoopGuard,  # noqa: F811  # the fixture
    broker: SessionBroker,
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
    policy_file: Path,  # noqa: F811  # the fixture
) -> None:
    ran: list[str] = []
    run_id = "trace_00000000000000000000000000000b02"
    result = await Runner.run(agent(guard, healthy, ran), "read", run_config=config(run_id))
    assert result.final_output == "done"
    assert ran == [f"/data/part-{i}.csv" for i in range(5)]
    outs = [i["output"] for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert outs == [f"contents of {p}" for p in ran]
    events = await published(kafka, adapter_topics.tool_calls, run_id, 10)
    assert [e["type"] for e in events] == ["tool_call", "tool_result"] * 5
    assert await replay_first_block(broker, adapter_topics, policy_file, run_id) is None


async def test_abort_run_ends_the_run_with_the_sdks_tripwire(
    guard: LoopGuard,  # noqa: F811  # the fixture
    adapter_topics: TopicSet,  # noqa: F811  # the fixture
    kafka: KafkaIO,
) -> None:
    ran: list[str] = []
    run_id = "trace_00000000000000000000000000000c03"
    reason = "LoopGuard stopped this run: compaction did not break the loop."
    abort = {
        "type": "command", "command": "abort_run", "run_id": run_id, "seq": 7,
        "reason": reason, "detector": "compaction_loop_persisted",
    }  # fmt: skip

    def endless(mc: ModelCall) -> Any:
        n = len(outputs(mc))
        if n >= CALLS:
            return [assistant_message("never aborted")]
        return [call_item("read_file", {"path": f"/data/part-{n}.csv"}, call_id=f"c{n + 1}")]

    async def abort_after_three() -> None:
        while len(ran) < 3:  # noqa: ASYNC110 -- polls the tool's own record, bounded below
            await asyncio.sleep(0.01)
        await kafka.produce_json(adapter_topics.control, [abort])

    run = asyncio.ensure_future(
        Runner.run(agent(guard, endless, ran), "x", run_config=config(run_id), max_turns=CALLS + 5)
    )
    await asyncio.wait_for(abort_after_three(), 30)
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as tripped:
        await asyncio.wait_for(run, 60)
    assert tripped.value.output.output_info == reason
    assert 3 <= len(ran) < CALLS
