"""One OTLP tool span -> its `tool_call` and `tool_result` wire events (pure functions).

A tool span is a GenAI `execute_tool` span (`gen_ai.operation.name`, `gen_ai.tool.name`,
`gen_ai.tool.call.id`, opt-in `gen_ai.tool.call.arguments` / `gen_ai.tool.call.result`), or,
when `openinference` is on, an OpenInference `TOOL` span (`tool.name`, `input.value`,
`output.value`). Run, agent and session ids are read from the span's attributes, then its
resource's, under the names `SpanMapping` lists; the run falls back to the trace id.
The attribute mapping is documented in docs/integrations.md, "From OpenTelemetry".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from loopguard_fleet.config.defaults import OTLP_RUN_ID_KEYS
from loopguard_fleet.detectors.hashing import DEFAULT_CHANNEL_TOOLS
from loopguard_fleet.detectors.jsjson import NotJSON, loads
from loopguard_fleet.detectors.values import JSON
from loopguard_fleet.streams.client.run_events import MISSING, Missing, RunEvents, WireEvent

__all__ = [
    "SpanMapping",
    "SpanRejected",
    "ToolSpan",
    "read_tool_spans",
    "wire_events",
]

_EXECUTE_TOOL = "execute_tool"
_OPENINFERENCE_TOOL = "TOOL"


@dataclass(frozen=True, slots=True)
class SpanMapping:
    """Where a span's run, agent and session ids and its tool attributes are read."""

    run_id_keys: tuple[str, ...] = OTLP_RUN_ID_KEYS
    agent_id_keys: tuple[str, ...] = ("gen_ai.agent.id",)
    session_keys: tuple[str, ...] = ("session.id",)
    openinference: bool = False  # also read OpenInference TOOL spans
    max_attribute_bytes: int = 262_144  # a larger argument/result attribute is refused
    privacy: bool = False  # hash arguments and results at the bridge; never send them
    channel_tools: frozenset[str] = field(default=DEFAULT_CHANNEL_TOOLS)


@dataclass(frozen=True, slots=True)
class ToolSpan:
    """What LoopGuard needs of one tool span; `start_ns` and `span_id` order a run's spans."""

    run_id: str
    trace_id: str  # hex
    span_id: str  # hex
    start_ns: int
    end_ns: int
    tool: str
    tool_call_id: str
    args: JSON
    result: JSON | Missing
    error: JSON | Missing
    agent_id: str | None = None
    session_key: str | None = None


@dataclass(frozen=True, slots=True)
class SpanRejected:
    """A span that claims to be a tool span but cannot become events: a dead letter."""

    reason: str  # label-safe
    detail: str
    trace_id: str
    span_id: str
    run_id: str | None = None


def _value(value: AnyValue) -> Any:
    """An attribute's value as plain Python (arrays and key-value lists recursively)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind is not None else None


def _attributes(pairs: Sequence[KeyValue]) -> dict[str, AnyValue]:
    """Attributes by key (the last of a repeated key, as SDKs keep it)."""
    return {kv.key: kv.value for kv in pairs}


def _text(attrs: Mapping[str, AnyValue], keys: Sequence[str]) -> str | None:
    """The first of `keys` that holds a non-empty scalar, as text."""
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        plain = _value(value)
        if plain is not None and plain != "" and not isinstance(plain, list | dict):
            return str(plain).lower() if isinstance(plain, bool) else str(plain)
    return None


def _content(value: AnyValue) -> JSON:
    """An argument or result attribute: a JSON text is read as JSON (arguments are usually
    a JSON object serialised by the instrumentation), anything else is kept as it is."""
    plain = _value(value)
    if isinstance(plain, str):
        try:
            return loads(plain)  # type: ignore[no-any-return]  # a JSON value
        except NotJSON:
            return plain
    return plain  # type: ignore[no-any-return]  # attribute values are JSON-shaped


def _error(span: Span, attrs: Mapping[str, AnyValue]) -> str | Missing:
    """The call's error: the exception event's message, the status message, `error.type`."""
    exception = next((e for e in span.events if e.name == "exception"), None)
    error_type = _text(attrs, ("error.type",))
    failed = span.status.code == Status.STATUS_CODE_ERROR or error_type or exception is not None
    if not failed:
        return MISSING
    if exception is not None:
        message = _text(_attributes(exception.attributes), ("exception.message", "exception.type"))
        if message:
            return message
    return span.status.message or error_type or "error"


@dataclass(frozen=True, slots=True)
class _Convention:
    """The attribute names of one tool-span convention."""

    tool: str
    call_id: tuple[str, ...]
    args: str
    result: str


_GENAI = _Convention(
    "gen_ai.tool.name", ("gen_ai.tool.call.id",), "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)  # fmt: skip
_OPENINFERENCE = _Convention("tool.name", ("tool_call.id",), "input.value", "output.value")


def _convention(attrs: Mapping[str, AnyValue], mapping: SpanMapping) -> _Convention | None:
    """Which convention makes this span a tool span, if any."""
    if _text(attrs, ("gen_ai.operation.name",)) == _EXECUTE_TOOL:
        return _GENAI
    if mapping.openinference and _text(attrs, ("openinference.span.kind",)) == "TOOL":
        return _OPENINFERENCE
    return None


def _tool_span(
    span: Span, resource: Mapping[str, AnyValue], mapping: SpanMapping
) -> ToolSpan | SpanRejected | None:
    """The tool span's facts, a rejection, or None for a span of another kind."""
    attrs = _attributes(span.attributes)
    convention = _convention(attrs, mapping)
    if convention is None:
        return None
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    both = {**resource, **attrs}  # the span's own attribute wins over its resource's
    run_id = _text(both, mapping.run_id_keys) or trace_id
    if not trace_id or not span_id:
        return SpanRejected("otlp_span_id_missing", "span without trace or span id", "", "", run_id)
    tool = _text(attrs, (convention.tool,))
    if tool is None:
        return SpanRejected(
            "otlp_tool_name_missing",
            f"tool span {span.name[:100]!r} has no {convention.tool}",
            trace_id,
            span_id,
            run_id,
        )
    content: dict[str, JSON | Missing] = {}
    for name, key in (("args", convention.args), ("result", convention.result)):
        value = attrs.get(key)
        if value is None:
            content[name] = MISSING
            continue
        size = value.ByteSize()
        if size > mapping.max_attribute_bytes:
            return SpanRejected(
                "otlp_attribute_too_large",
                f"{key} is {size} bytes, over the limit of {mapping.max_attribute_bytes}",
                trace_id,
                span_id,
                run_id,
            )
        content[name] = _content(value)
    call_id = _text(attrs, convention.call_id) or span_id
    args = content["args"]
    # Not captured: the call is known by its id alone, so no two calls ever look alike
    # (docs/integrations.md says which detectors then work).
    if isinstance(args, Missing):
        args = {"gen_ai.tool.call.id": call_id}
    return ToolSpan(
        run_id=run_id,
        trace_id=trace_id,
        span_id=span_id,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        tool=tool,
        tool_call_id=call_id,
        args=args,
        result=content["result"],
        error=_error(span, attrs),
        agent_id=_text(both, mapping.agent_id_keys),
        session_key=_text(both, mapping.session_keys),
    )


def read_tool_spans(
    request: ExportTraceServiceRequest, mapping: SpanMapping
) -> Iterator[ToolSpan | SpanRejected | None]:
    """Each span of the request, in its order: a tool span, a rejection, or None (not a tool
    span)."""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield _tool_span(span, resource, mapping)


def wire_events(span: ToolSpan, seq: int, mapping: SpanMapping) -> tuple[WireEvent, WireEvent]:
    """The span's `tool_call` (seq `seq`) and `tool_result` (seq `seq + 1`), with the span's
    start and end times (epoch milliseconds) as their `ts`."""
    times = iter((span.start_ns // 1_000_000, span.end_ns // 1_000_000))
    events = RunEvents(
        span.run_id,
        agent_id=span.agent_id,
        session_key=span.session_key,
        privacy=mapping.privacy,
        start_seq=seq - 1,
        clock=lambda: next(times),
        channel_tools=mapping.channel_tools,
    )
    call = events.tool_call(span.tool, span.args, span.tool_call_id)
    result = events.tool_result(
        span.tool_call_id, span.tool, span.args, result=span.result, error=span.error
    )
    return call, result
