"""LangChain v1 / LangGraph: `LoopGuardMiddleware` for `create_agent`.

    agent = create_agent(model, tools, middleware=[LoopGuardMiddleware(guard)])
    await agent.ainvoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})

- `awrap_tool_call` publishes each call and its outcome; in gate mode a blocked call returns
  an error `ToolMessage` carrying LoopGuard's message (the model sees it, the tool never runs)
  and the agent continues; a warning's note is appended to the tool's `ToolMessage`.
- `abefore_model` ends an aborted run the LangChain way (`jump_to: "end"` with an `AIMessage`
  carrying the reason, as `ToolCallLimitMiddleware` does), and publishes a compaction when
  `SummarizationMiddleware` (listed before this middleware) has summarised the history.
- Ids: run_id = LangGraph's run id of the invocation (`runtime.execution_info.run_id`, the
  `run_id` of its config), else a fresh uuid per invocation; session_key = the `thread_id`;
  agent_id = the middleware's `agent_id`, else `create_agent(name=...)`.
- Async hooks only: LangChain itself tells `invoke()` users to call `ainvoke()`.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

from loopguard_fleet.adapters.core import LoopGuard, jsonable
from loopguard_fleet.adapters.gate import with_note
from loopguard_fleet.adapters.versions import require_version

require_version("langchain", "1.5", "2")
require_version("langchain-core", "1.8", "2")

from typing import NotRequired  # noqa: E402

from langchain.agents.middleware import (  # noqa: E402 -- after the version guard
    AgentMiddleware,
    AgentState,
    hook_config,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.config import get_config  # noqa: E402
from langgraph.prebuilt.tool_node import ToolCallRequest  # noqa: E402
from langgraph.runtime import ExecutionInfo, Runtime  # noqa: E402
from langgraph.types import Command  # noqa: E402

__all__ = ["LoopGuardMiddleware", "LoopGuardState"]

RUN_KEY: Final = "loopguard_run_id"
_MAX_SUMMARIES: Final = 10_000
_MAX_RUNS: Final = 10_000


class LoopGuardState(AgentState[Any]):
    """The agent state plus the LoopGuard run id of the current invocation."""

    loopguard_run_id: NotRequired[str]


def _ids(
    info: ExecutionInfo | None, agent_id: str | None
) -> tuple[str | None, str | None, str | None]:
    """(LangGraph's run id, thread id, agent id) of the node that is running (None if unknown)."""
    config = get_config()
    thread = info.thread_id if info is not None else None
    if thread is None:
        thread = (config.get("configurable") or {}).get("thread_id")
    run_id = info.run_id if info is not None else None
    name = (config.get("metadata") or {}).get("lc_agent_name")
    return (
        str(run_id) if run_id is not None else None,
        str(thread) if thread is not None else None,
        agent_id or (str(name) if name is not None else None),
    )


def _text(content: object) -> str:
    """A ToolMessage's content as the text LoopGuard records."""
    return content if isinstance(content, str) else str(jsonable(content))


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any, Any]):
    """Publishes the agent's tool calls to LoopGuard and enforces its verdicts."""

    state_schema = LoopGuardState

    def __init__(self, guard: LoopGuard, *, agent_id: str | None = None) -> None:
        super().__init__()
        self.guard = guard
        self.agent_id = agent_id
        self._agents: OrderedDict[str, str | None] = OrderedDict()
        self._summaries: OrderedDict[str, None] = OrderedDict()

    async def abefore_agent(
        self, state: LoopGuardState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Name this invocation's LoopGuard run."""
        found, session_key, agent_id = _ids(runtime.execution_info, self.agent_id)
        run_id = found or uuid.uuid4().hex
        self.guard.run(run_id, agent_id, session_key)
        self._agents[run_id] = agent_id
        if len(self._agents) > _MAX_RUNS:  # runs that raised never reach aafter_agent
            self._agents.popitem(last=False)
        return {RUN_KEY: run_id}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: LoopGuardState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """End an aborted run; publish a compaction after a summary."""
        run_id = state.get(RUN_KEY)
        if run_id is None:
            return None
        first = state["messages"][0] if state["messages"] else None
        if (
            isinstance(first, HumanMessage)
            and first.additional_kwargs.get("lc_source") == "summarization"
            and first.id is not None
            and first.id not in self._summaries
        ):
            self._summaries[first.id] = None
            if len(self._summaries) > _MAX_SUMMARIES:
                self._summaries.popitem(last=False)
            await self.guard.compaction(run_id)
        reason = self.guard.abort_reason(run_id)
        if reason is None:
            return None
        return {"jump_to": "end", "messages": [AIMessage(content=reason)]}

    async def aafter_agent(
        self, state: LoopGuardState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Publish run_end."""
        run_id = state.get(RUN_KEY)
        if run_id is not None:
            self._agents.pop(run_id, None)
            await self.guard.end(run_id)
        return None

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Ask LoopGuard before the tool runs; refuse it with LoopGuard's message if blocked."""
        call = request.tool_call
        state = request.state if isinstance(request.state, dict) else {}
        run_id = state.get(RUN_KEY)
        if run_id is None:  # a ToolNode outside create_agent: the run, else the thread
            info = request.runtime.execution_info if request.runtime is not None else None
            found, thread, _ = _ids(info, self.agent_id)
            run_id = found or thread or uuid.uuid4().hex
        name, call_id = call["name"], call.get("id")
        gate = await self.guard.before_call(
            run_id, self._agents.get(run_id, self.agent_id), name, jsonable(call["args"]), call_id
        )
        if not gate.is_allowed:
            return ToolMessage(
                content=gate.message or "", tool_call_id=call_id or "", name=name, status="error"
            )
        try:
            out = await handler(request)
        except Exception as exc:
            await self.guard.after_call(gate, error=exc)
            raise
        if not isinstance(out, ToolMessage):
            await self.guard.after_call(gate)  # a Command: the outcome is a state update
            return out
        if out.status == "error":
            await self.guard.after_call(gate, error=_text(out.content))
        else:
            await self.guard.after_call(gate, result=_text(out.content))
        if gate.note and isinstance(out.content, str):
            return out.model_copy(update={"content": with_note(out.content, gate.note)})
        return out
