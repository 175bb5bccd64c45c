"""docs/integrations.md: every example runs as pasted, with a scripted model for `model`.

Two substitutions, asserted to happen once each: the `model = ...` line goes (the test's scripted
model takes its place) and the client is pointed at this test's broker and topics. No worker
answers, so every call fails open after the verdict timeout, as documented.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from tests.worker_process import REPO

from .conftest import KafkaIO, SessionBroker, TopicSet

pytestmark = [pytest.mark.adapters, pytest.mark.timeout(300)]

#: An example that has not finished by then fails its test. It runs in a daemon thread of its
#: own, not the loop's default executor: a stuck example left in the executor would make the
#: session's event loop wait for it forever when it closes, hanging every later test.
EXAMPLE_DEADLINE_S = 120.0


async def _run_bounded(code: Any, namespace: dict[str, Any], deadline: float) -> None:
    """Execute `code` in a daemon thread; fail if it raises or outlives `deadline` seconds."""
    done = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            exec(code, namespace)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=target, daemon=True, name="docs-example")
    thread.start()
    finished = await asyncio.to_thread(done.wait, deadline)  # returns by the deadline
    if not finished:  # where it is stuck: the example's own loop, then this thread's stack
        stack = "".join(traceback.format_stack(sys._current_frames()[thread.ident or 0]))
        pytest.fail(f"the example did not finish within {deadline:.0f}s; it is at:\n{stack}")
    if errors:
        raise errors[0]


DOC = REPO / "docs" / "integrations.md"
ANSWER = "It is sunny in Paris."
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples() -> dict[str, str]:
    """The python example of each section that has one, by section title."""
    found = {}
    for section in re.split(r"^## ", DOC.read_text(), flags=re.MULTILINE)[1:]:
        title, _, body = section.partition("\n")
        blocks = _PYTHON.findall(body)
        if blocks:
            (found[title.strip()],) = blocks
    return found


def langchain_model() -> Any:
    from langchain_core.messages import AIMessage, ToolMessage

    from .test_adapter_langchain import ScriptedChat

    def script(messages: Any) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=ANSWER)
        return AIMessage(
            content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "w1"}]
        )

    return ScriptedChat(script=script)


def pydantic_ai_model() -> Any:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def script(messages: Any, info: Any) -> ModelResponse:
        if any(p.part_kind == "tool-return" for m in messages if isinstance(m, ModelRequest)
               for p in m.parts):  # fmt: skip
            return ModelResponse(parts=[TextPart(ANSWER)])
        return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"}, "w1")])

    return FunctionModel(script)


def openai_agents_model() -> Any:
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    return ScriptedModel(
        [[function_call("get_weather", {"city": "Paris"}, call_id="w1")],
         ModelStep(output=[assistant_message(ANSWER)])]
    )  # fmt: skip


def google_adk_model() -> Any:
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    from .test_adapter_google_adk import ScriptedLlm

    def script(seen: list[Any]) -> LlmResponse:
        if seen:
            return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=ANSWER)]))
        fc = types.FunctionCall(name="get_weather", args={"city": "Paris"}, id="w1")
        return LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=fc)])
        )

    return ScriptedLlm(model="scripted", script=script)


MODELS: dict[str, Callable[[], Any]] = {
    "LangChain v1 / LangGraph": langchain_model,
    "pydantic-ai": pydantic_ai_model,
    "OpenAI Agents SDK": openai_agents_model,
    "Google ADK": google_adk_model,
}


def test_every_framework_section_has_one_example() -> None:
    assert set(examples()) == set(MODELS)


@pytest.mark.parametrize("title", list(MODELS))
async def test_the_example_runs_as_pasted(
    title: str,
    broker: SessionBroker,
    topics: TopicSet,
    kafka: KafkaIO,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "true")  # nothing leaves 127.0.0.1
    code, models = re.subn(r"^model = .*$", "", examples()[title], flags=re.MULTILINE)
    client = 'RuntimeClient("127.0.0.1:9092")'
    code, clients = (
        code.replace(client, "RuntimeClient(BOOTSTRAP, topics=TOPICS)"),
        code.count(client),
    )
    assert (models, clients) == (1, 1)
    namespace = {"__name__": "__main__", "model": MODELS[title](), "BOOTSTRAP": broker.bootstrap,
                 "TOPICS": topics}  # fmt: skip
    await _run_bounded(compile(code, f"{DOC}:{title}", "exec"), namespace, EXAMPLE_DEADLINE_S)
    assert capsys.readouterr().out.strip().endswith(ANSWER)
    got = await kafka.consume_count(topics.tool_calls, 2)
    assert [(m.json["type"], m.json["tool"]) for m in got] == [
        ("tool_call", "get_weather"),
        ("tool_result", "get_weather"),
    ]
