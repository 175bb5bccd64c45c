"""Google ADK: LoopGuard as an `LlmAgent`'s tool and model callbacks.

    lg = LoopGuardCallbacks(guard)
    agent = LlmAgent(name="reader", model=..., tools=[read_file],
                     before_tool_callback=lg.before_tool, after_tool_callback=lg.after_tool,
                     before_model_callback=lg.before_model)

- `before_tool` publishes the call; in gate mode a blocked call returns `{"error": message}`
  instead of calling the tool (ADK's way for a callback to refuse: the model sees that response)
  and the invocation continues.
- An aborted run: its calls are refused the same way, and `before_model` answers the next model
  turn with LoopGuard's reason as the final response, so the invocation ends.
- `after_tool` publishes the tool's response (an `"error"` key makes it an error outcome) and
  on a warning returns the response with a `loopguard_note` entry for the model.
- Ids: run_id = ADK's `invocation_id`; session_key = the session id; agent_id = the agent's
  `name`. ADK's events compaction runs between invocations, so no compaction is published.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

from loopguard_fleet.adapters.core import LoopGuard, jsonable
from loopguard_fleet.adapters.gate import Gate
from loopguard_fleet.adapters.versions import require_version

require_version("google-adk", "2.13", "3")

from google.adk.agents.callback_context import CallbackContext  # noqa: E402 -- version guard
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.tools.base_tool import BaseTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

__all__ = ["NOTE_KEY", "LoopGuardCallbacks"]

NOTE_KEY: Final = "loopguard_note"
_MAX_OPEN_CALLS: Final = 10_000


class LoopGuardCallbacks:
    """`before_tool` / `after_tool` / `before_model` callbacks enforcing LoopGuard's verdicts."""

    def __init__(self, guard: LoopGuard) -> None:
        self.guard = guard
        self._open: OrderedDict[tuple[str, str], Gate] = OrderedDict()

    async def before_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Ask LoopGuard before the tool runs; a refusal replaces the tool's response."""
        run_id, call_id = tool_context.invocation_id, tool_context.function_call_id or ""
        self.guard.run(run_id, tool_context.agent_name, tool_context.session.id)
        gate = await self.guard.before_call(
            run_id, tool_context.agent_name, tool.name, jsonable(args), call_id or None
        )
        if not gate.is_allowed:
            return {"error": gate.message or ""}
        self._open[(run_id, call_id)] = gate
        if len(self._open) > _MAX_OPEN_CALLS:
            self._open.popitem(last=False)
        return None

    async def after_tool(
        self,
        tool: BaseTool,
        args: dict[str, Any],
        tool_context: ToolContext,
        tool_response: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Publish the tool's response; add LoopGuard's warning note to it when there is one."""
        key = (tool_context.invocation_id, tool_context.function_call_id or "")
        gate = self._open.pop(key, None)
        if gate is None:
            return None
        if isinstance(tool_response, dict) and "error" in tool_response:
            await self.guard.after_call(gate, error=tool_response["error"])
        else:
            await self.guard.after_call(gate, result=tool_response)
        if gate.note:
            return {**tool_response, NOTE_KEY: gate.note}
        return None

    async def before_model(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """End an aborted run: LoopGuard's reason becomes the final response."""
        reason = self.guard.abort_reason(callback_context.invocation_id)
        if reason is None:
            return None
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reason)]))
