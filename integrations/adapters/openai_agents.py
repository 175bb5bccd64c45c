"""OpenAI Agents SDK: LoopGuard as tool guardrails on an agent's function tools.

    agent = Agent(name="reader", tools=protect(guard, [read_file]))
    result = await Runner.run(agent, "...", run_config=RunConfig(trace_id=gen_trace_id()))

- The tool input guardrail publishes the call; in gate mode a blocked call is rejected with
  `reject_content` carrying LoopGuard's message (the SDK's own refusal: the model sees it, the
  tool never runs) and the run continues.
- An aborted run ends with the SDK's `ToolInputGuardrailTripwireTriggered` (`raise_exception`),
  whose `output.output_info` is LoopGuard's reason.
- The tool output guardrail publishes the outcome (the SDK hands failures to the model as text,
  so an error arrives as the tool's output) and, on a warning, sends the output with its note
  appended (`reject_content` with the annotated output).
- Ids: run_id = the run's trace id (`RunConfig.trace_id`, else the id the SDK generated for the
  run's trace); with tracing disabled and no `trace_id`, one id per `RunConfig` object, so give
  each run its own `RunConfig` or a `trace_id`. session_key = `RunConfig.group_id`; agent_id =
  the agent's `name`.
- The SDK has no built-in history compaction; run_end is published by `guard.end(run_id)`.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from loopguard_fleet.adapters.core import LoopGuard, jsonable
from loopguard_fleet.adapters.gate import Gate, with_note
from loopguard_fleet.adapters.versions import require_version

require_version("openai-agents", "0.24", "0.25")

from agents import (  # noqa: E402 -- after the version guard
    FunctionTool,
    RunConfig,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tool_context import ToolContext  # noqa: E402
from agents.tracing import get_current_trace  # noqa: E402

__all__ = ["LoopGuardGuardrails", "protect"]

_MAX_OPEN_CALLS: Final = 10_000
_NO_TRACE: Final = "no-op"  # the trace id of a disabled trace (agents.tracing.NoOpTrace)


class LoopGuardGuardrails:
    """The input and output tool guardrails that connect function tools to LoopGuard."""

    def __init__(self, guard: LoopGuard) -> None:
        self.guard = guard
        self.input: ToolInputGuardrail[Any] = ToolInputGuardrail(self._before, name="loopguard")
        self.output: ToolOutputGuardrail[Any] = ToolOutputGuardrail(self._after, name="loopguard")
        self._open: OrderedDict[tuple[str, str], Gate] = OrderedDict()
        # RunConfig is an unhashable dataclass: keyed by id(), checked against a weak reference
        self._untraced: OrderedDict[int, tuple[weakref.ref[RunConfig], str]] = OrderedDict()

    def run_id(self, context: ToolContext[Any]) -> str:
        """The LoopGuard run id of the run this tool call belongs to."""
        config = context.run_config
        if config is not None and config.trace_id:
            return config.trace_id
        trace = get_current_trace()
        if trace is not None and trace.trace_id != _NO_TRACE:
            return trace.trace_id
        if config is None:
            return _NO_TRACE
        known = self._untraced.get(id(config))
        if known is None or known[0]() is not config:
            known = (weakref.ref(config), f"run_{uuid.uuid4().hex}")
            self._untraced[id(config)] = known
            if len(self._untraced) > _MAX_OPEN_CALLS:
                self._untraced.popitem(last=False)
        return known[1]

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        run_id = self.run_id(ctx)
        config = ctx.run_config
        self.guard.run(run_id, data.agent.name, config.group_id if config is not None else None)
        gate = await self.guard.before_call(
            run_id, data.agent.name, ctx.tool_name, _arguments(ctx.tool_arguments), ctx.tool_call_id
        )
        if gate.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=gate.message)
        if not gate.is_allowed:
            return ToolGuardrailFunctionOutput.reject_content(gate.message or "", gate.detector)
        self._open[(run_id, ctx.tool_call_id)] = gate
        if len(self._open) > _MAX_OPEN_CALLS:
            self._open.popitem(last=False)
        return ToolGuardrailFunctionOutput.allow()

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        gate = self._open.pop((self.run_id(data.context), data.context.tool_call_id), None)
        if gate is None:
            return ToolGuardrailFunctionOutput.allow()
        await self.guard.after_call(gate, result=data.output)
        if gate.note:
            return ToolGuardrailFunctionOutput.reject_content(
                with_note(str(data.output), gate.note), gate.detector
            )
        return ToolGuardrailFunctionOutput.allow()


def _arguments(raw: str) -> Any:
    """The tool's JSON arguments as JSON (the raw string if it does not parse)."""
    try:
        return jsonable(json.loads(raw))
    except ValueError:
        return raw


def protect(guard: LoopGuard | LoopGuardGuardrails, tools: Sequence[Tool]) -> list[Tool]:
    """`tools` with LoopGuard's guardrails added to every function tool (others unchanged)."""
    rails = guard if isinstance(guard, LoopGuardGuardrails) else LoopGuardGuardrails(guard)
    for t in tools:
        if isinstance(t, FunctionTool):
            t.tool_input_guardrails = [*(t.tool_input_guardrails or []), rails.input]
            t.tool_output_guardrails = [*(t.tool_output_guardrails or []), rails.output]
    return list(tools)
