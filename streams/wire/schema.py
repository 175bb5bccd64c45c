"""JSON Schemas of the wire: input events (models that mirror `parse_event`) and the
control topic's messages (models of what `process_event` publishes).

The engine's `detectors.parse_event` is the validator the worker runs; the input models
document the same contract for emitters (`loopguard schema`) and a test checks the two agree.
The control models document the outputs for consumers (the runtime client, the OpenClaw
plugin); a test validates every message the engine publishes, in both profiles, against them.
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


def _union_schema(union: Any, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema of a discriminated union, titled and described."""
    schema: dict[str, Any] = TypeAdapter(union).json_schema()
    schema["title"] = title
    schema["description"] = description
    return schema


def wire_schema() -> dict[str, Any]:
    """The JSON Schema of one input event (a discriminated union on `type`)."""
    return _union_schema(
        AnyWireEvent,
        "LoopGuard input event",
        "One JSON object per Kafka message (key = run_id) or JSONL line. Tool events carry "
        "`args`, or in privacy mode `args_hash` (+ `poll_action`, and `result_hash` / "
        "`unknown_tool_name` on results).",
    )


# Control topic (key = run_id): loop events, commands and verdicts. Each model forbids fields
# it does not name, so a new output field must be documented here first.


class _Control(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    run_id: str
    trigger_event_id: str = Field(description="the input event that caused this message")
    seq: int = Field(description="that event's seq")
    policy_version: str | None = Field(
        description="the version of the policy that decided it (`sha256:` + 16 hex, "
        "docs/policy.md); null only from the engine used without a policy"
    )


_Level = Literal["warning", "critical"]
_NOTE = (
    "openclaw-2026.9, a published warning only: the system note OpenClaw's runner appends to "
    "the call's tool result (the recorded outcome stays the raw one)"
)


class LoopEventMessage(_Control):
    """A verdict (warn / block) or an abort (post-compaction guard, spent recovery allowance)."""

    type: Literal["loop_event"]
    tool: str
    level: _Level
    action: Literal["warn", "block", "abort"]
    detector: str = Field(
        description="the rule; `compaction_loop_persisted` and (openclaw-2026.9) "
        "`tool_loop_recovery_exhausted` name aborts"
    )
    count: int
    message: str
    warning_key: str | None
    paired_tool: str | None
    published: bool = Field(description="warnings: crossed a new bucket of 10 (rate limit)")
    agent_id: str | None
    signature: str = Field(
        description="the loop signature: 32 hex digits of a hash of the tool, its args hash "
        "and its latest outcome's facts; no run id, no raw text (docs/fleet.md)"
    )
    fleet_signal_id: str | None = Field(
        None,
        description="an early verdict of fleet signals only (detector `fleet_signal`): the id "
        "of the fleet signal whose evidence it names (docs/fleet.md)",
    )
    semantics: Literal["openclaw-2026.9"] | None = Field(
        None, description="present only under the openclaw-2026.9 profile"
    )
    liveness_signal: str | None = Field(None, description="openclaw-2026.9 only")
    note: str | None = Field(None, description=_NOTE)
    enforced: bool = Field(
        description="false in shadow mode (`loopguard.mode: observe`): decided, not sent as "
        "a command; the run went on"
    )
    id: str


class CommandMessage(_Control):
    """`block_call` (one call) or `abort_run` (the whole run)."""

    type: Literal["command"]
    command: Literal["block_call", "abort_run"]
    command_id: str
    tool_call_id: str | None = Field(None, description="block_call only")
    tool: str
    detector: str
    count: int
    reason: str = Field(description="the loop event's message (OpenClaw's, verbatim)")


class VerdictMessage(_Control):
    """The answer to a tool_call sent with `want_verdict`; warn and block repeat their loop
    event's detector, level, count, message and note."""

    type: Literal["verdict"]
    tool_call_id: str | None
    decision: Literal["allow", "warn", "block"]
    detector: str | None = Field(None, description="warn / block only")
    level: _Level | None = Field(None, description="warn / block only")
    count: int | None = Field(None, description="warn / block only")
    message: str | None = Field(None, description="warn / block only")
    note: str | None = Field(None, description=_NOTE)
    id: str


AnyControlMessage = Annotated[
    LoopEventMessage | CommandMessage | VerdictMessage, Field(discriminator="type")
]


def control_schema() -> dict[str, Any]:
    """The JSON Schema of one control-topic message (a discriminated union on `type`)."""
    return _union_schema(
        AnyControlMessage,
        "LoopGuard control message",
        "One JSON object per control-topic message (key = run_id): loop events, block_call / "
        "abort_run commands and verdicts. Ids derive from (run_id, trigger event_id, kind).",
    )
