"""JSON Schemas of the wire input events, from pydantic models that mirror `parse_event`.

The engine's `detectors.parse_event` is the validator the worker runs; these models document
the same contract for emitters (`loopguard schema`) and a test checks the two agree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    event_id: Annotated[
        str, Field(min_length=1, description="unique per run; makes delivery idempotent")
    ]
    run_id: Annotated[
        str, Field(min_length=1, description="the Kafka key; all loop state is per run")
    ]
    seq: Annotated[int, Field(description="the emitter's per-run order across all event types")]
    agent_id: str | None = Field(
        None, description="fixes the run's policy overlay (first one wins)"
    )
    session_key: str | None = None
    ts: str | int | float | None = Field(None, description="informational; no decision uses it")


class _ToolEvent(_Event):
    tool: str
    tool_call_id: str | None = None
    args: JsonValue = Field(None, description="raw call arguments (omit in privacy mode)")
    args_hash: str | None = Field(None, description="privacy mode: '<tool>:<sha256 hex>'")
    poll_action: str | None = Field(None, description="privacy mode: args.action")


class ToolCallEvent(_ToolEvent):
    """A call, sent before it runs."""

    type: Literal["tool_call"]
    want_verdict: bool = Field(False, description="ask for an allow/warn/block verdict")


class ToolResultEvent(_ToolEvent):
    """A call's outcome: `result` (returned) or `error` (raised); neither = still pending."""

    type: Literal["tool_result"]
    result: JsonValue = None
    error: JsonValue = Field(
        None, description="a string is the error text; any other value is canonicalised"
    )
    result_hash: str | None = Field(None, description="privacy mode: the outcome hash")
    unknown_tool_name: str | None = Field(None, description="privacy mode")


class CompactionEvent(_Event):
    """A successful auto-compaction retry; arms the post-compaction guard."""

    type: Literal["compaction"]


class RunEndEvent(_Event):
    """The run ended; its state is dropped."""

    type: Literal["run_end"]


AnyWireEvent = Annotated[
    ToolCallEvent | ToolResultEvent | CompactionEvent | RunEndEvent, Field(discriminator="type")
]


def wire_schema() -> dict[str, Any]:
    """The JSON Schema of one input event (a discriminated union on `type`)."""
    schema: dict[str, Any] = TypeAdapter(AnyWireEvent).json_schema()
    schema["title"] = "LoopGuard input event"
    schema["description"] = (
        "One JSON object per Kafka message (key = run_id) or JSONL line. Tool events carry "
        "`args`, or in privacy mode `args_hash` (+ `poll_action`, and `result_hash` / "
        "`unknown_tool_name` on results)."
    )
    return schema
