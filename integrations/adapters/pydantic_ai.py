"""pydantic-ai: the `LoopGuardCapability` capability.

    agent = Agent(model, tools=[...], capabilities=[LoopGuardCapability(guard)])
    result = await agent.run("...", run_id="r1")

- `wrap_tool_execute` publishes each call and its outcome; in gate mode a blocked call raises
  `ToolFailed` with LoopGuard's message (pydantic-ai's terminal tool failure: the model sees it,
  the tool never runs, no retry budget is spent) and the run continues; a warning's note is
  appended to a string result.
- An aborted run ends with `RunAborted` (an `AgentRunError`, like `UsageLimitExceeded`): raised
  by the next tool call or model request of the run.
- `wrap_run` publishes run_end when the run ends, however it ends.
- Ids: run_id = pydantic-ai's `RunContext.run_id` (`Agent.run(run_id=...)`, else its fresh
  UUID7); session_key = `conversation_id`; agent_id = the capability's `agent_id`, else
  `Agent(name=...)`.
- pydantic-ai has no built-in summarisation: a history processor that compacts calls
  `guard.compaction(run_id)` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopguard_fleet.adapters.core import LoopGuard, jsonable
from loopguard_fleet.adapters.gate import with_note
from loopguard_fleet.adapters.versions import require_version

require_version("pydantic-ai-slim", "2.66", "3")

from pydantic_ai import RunContext  # noqa: E402 -- after the version guard
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.capabilities.abstract import (  # noqa: E402
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import AgentRunError, ToolFailed  # noqa: E402
from pydantic_ai.messages import ToolCallPart  # noqa: E402
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.run import AgentRunResult  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402

__all__ = ["LoopGuardCapability", "RunAborted"]


class RunAborted(AgentRunError):
    """LoopGuard aborted the run (`abort_run`); the message is LoopGuard's reason."""


def _ids(ctx: RunContext[Any], agent_id: str | None) -> tuple[str, str | None, str | None]:
    """(run_id, session_key, agent_id) of the run `ctx` belongs to."""
    name = ctx.agent.name if ctx.agent is not None else None
    return str(ctx.run_id), ctx.conversation_id, agent_id or name


@dataclass(init=False)
class LoopGuardCapability(AbstractCapability[Any]):
    """Publishes the agent's tool calls to LoopGuard and enforces its verdicts."""

    guard: LoopGuard
    agent_id: str | None

    def __init__(self, guard: LoopGuard, *, agent_id: str | None = None) -> None:
        self.guard = guard
        self.agent_id = agent_id

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not constructible from an agent spec: it needs a started guard."""
        return None

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Name the run for LoopGuard; publish run_end when it ends."""
        run_id, session_key, agent_id = _ids(ctx, self.agent_id)
        self.guard.run(run_id, agent_id, session_key)
        try:
            return await handler()
        finally:
            await self.guard.end(run_id)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """End an aborted run before the model is asked again."""
        reason = self.guard.abort_reason(str(ctx.run_id))
        if reason is not None:
            raise RunAborted(reason)
        return request_context

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Ask LoopGuard before the tool runs; refuse it with LoopGuard's message if blocked."""
        run_id, _, agent_id = _ids(ctx, self.agent_id)
        gate = await self.guard.before_call(
            run_id, agent_id, call.tool_name, jsonable(args), call.tool_call_id
        )
        if gate.action == "abort":
            raise RunAborted(gate.message or "")
        if not gate.is_allowed:
            raise ToolFailed(gate.message or "")
        try:
            result = await handler(args)
        except Exception as exc:
            await self.guard.after_call(gate, error=exc)
            raise
        await self.guard.after_call(gate, result=result)
        return with_note(result, gate.note) if isinstance(result, str) else result
