"""Scripted agent tool calls as real OTLP messages (hand-built, or traced with the
OpenTelemetry SDK), and as the wire events an SDK would send for the same calls: the inputs an
OTLP audit or bridge must decide alike."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk import resources
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopguard_fleet.detectors.jsjson import dumps, loads
from loopguard_fleet.streams.client.run_events import RunEvents
from loopguard_fleet.streams.otlp.order import seq_of

T0_NS = 1_796_119_200_000_000_000  # 2026-12-01T10:00:00Z


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


class ToolFailed(Exception):
    """A scripted tool call's failure (`run_tool`)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a run: an `execute_tool` span, or a `tool_call` + `tool_result`."""

    run_id: str
    agent_id: str
    n: int  # unique over the script: the span id, and the start time in ms after T0
    tool: str
    args: str  # JSON text, as instrumentations capture gen_ai.tool.call.arguments
    result: str
    t0_ns: int = T0_NS
    step_ns: int = 1_000_000_000  # call n starts n steps after t0 and lasts 0.4 steps
    error: str | None = None  # the call fails with this message (then `result` is unused)

    @property
    def start_ns(self) -> int:
        return self.t0_ns + self.n * self.step_ns

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.step_ns * 2 // 5

    def span(self) -> Span:
        """The call's GenAI `execute_tool` span (trace: one per run)."""
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.tool,
            "gen_ai.tool.call.id": f"call-{self.n}",
            "gen_ai.tool.call.arguments": self.args,
        }
        if self.error is None:
            attrs["gen_ai.tool.call.result"] = self.result
        else:
            attrs["error.type"] = ToolFailed.__qualname__
        failed = Status(code=Status.STATUS_CODE_ERROR, message=self.error)
        return Span(
            trace_id=self.run_id.encode().ljust(16, b"\x00")[:16],
            span_id=self.n.to_bytes(8, "big"),
            name=f"execute_tool {self.tool}",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=self.start_ns,
            end_time_unix_nano=self.end_ns,
            attributes=[_kv(k, v) for k, v in attrs.items()],
            status=failed if self.error is not None else None,
        )


def export_request(
    calls: list[Call], extra: list[Span] | None = None, run_key: str = "gen_ai.conversation.id"
) -> ExportTraceServiceRequest:
    """One `ExportTraceServiceRequest`: a resource per run (its conversation and agent ids as
    resource attributes, as an instrumented agent process sets them; the run id under
    `run_key`); `extra` spans (a model call, a broken tool span) go in the first resource."""
    by_run: dict[str, list[Call]] = {}
    for c in calls:
        by_run.setdefault(c.run_id, []).append(c)
    out = ExportTraceServiceRequest()
    for i, (run_id, run_calls) in enumerate(by_run.items()):
        resource = Resource(
            attributes=[
                _kv("service.name", "scripted-agent"),
                _kv(run_key, run_id),
                _kv("gen_ai.agent.id", run_calls[0].agent_id),
            ]
        )
        spans = [c.span() for c in run_calls] + (list(extra or []) if i == 0 else [])
        out.resource_spans.append(
            ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])
        )
    return out


def otlp_json_line(request: ExportTraceServiceRequest) -> bytes:
    """The request as one OTLP/JSON line, as the Collector's file exporter writes it (trace
    and span ids in hex, not protobuf JSON's base64)."""
    doc = json_format.MessageToDict(request)
    for rs, orig_rs in zip(doc["resourceSpans"], request.resource_spans, strict=True):
        spans = rs["scopeSpans"][0]["spans"]
        for s, orig in zip(spans, orig_rs.scope_spans[0].spans, strict=True):
            s["traceId"], s["spanId"] = orig.trace_id.hex(), orig.span_id.hex()
    return dumps(doc) + b"\n"


def wire_jsonl(calls: list[Call]) -> bytes:
    """The calls as an SDK sends them (`RunEvents`), in start order, each run numbered as the
    bridge numbers spans (`seq_of` their start)."""
    lines: list[bytes] = []
    for c in sorted(calls, key=lambda c: c.start_ns):
        times = iter((c.start_ns // 1_000_000, c.end_ns // 1_000_000))
        events = RunEvents(
            c.run_id, agent_id=c.agent_id, start_seq=seq_of(c.start_ns) - 1,
            clock=lambda t=times: next(t),
        )  # fmt: skip
        args = loads(c.args)
        lines.append(dumps(events.tool_call(c.tool, args, f"call-{c.n}")))
        outcome = {"result": c.result} if c.error is None else {"error": c.error}
        lines.append(dumps(events.tool_result(f"call-{c.n}", c.tool, args, **outcome)))
    return b"\n".join(lines) + b"\n"


def looping_script(t0_ns: int = T0_NS, step_ns: int = 1_000_000_000) -> list[Call]:
    """Two interleaved runs: one repeats a call until it is blocked, one alternates two
    calls (ping-pong); call n starts n steps after `t0_ns`."""
    calls: list[Call] = []
    for i in range(1, 31):
        loop = ("read", '{"path":"/etc/x"}', "same")
        calls.append(Call("run-loop", "agent-a", 2 * i, *loop, t0_ns, step_ns))
        path = "/a" if i % 2 else "/b"
        pp = ("cat", f'{{"path":"{path}"}}', path)
        calls.append(Call("run-pp", "agent-b", 2 * i + 1, *pp, t0_ns, step_ns))
    return calls


def failing_script(t0_ns: int = T0_NS, step_ns: int = 1_000_000_000) -> list[Call]:
    """One run that retries a call failing the same way each time (calls 101 to 130)."""
    fetch = ("fetch", '{"url":"https://api.invalid/report"}', "")
    return [
        Call("run-fail", "agent-c", 100 + i, *fetch, t0_ns, step_ns, error="Error: 503 from api")
        for i in range(1, 31)
    ]


def run_tool(call: Call) -> str:
    """Run the scripted tool: the call's result, or its error raised."""
    if call.error is not None:
        raise ToolFailed(call.error)
    return call.result


def _traced_call(tracer: trace.Tracer, call: Call, parent: Context) -> None:
    """Run one call inside its GenAI `execute_tool` span, content capture on, as an
    instrumented agent does: a failure is recorded on the span, and the agent goes on."""
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.conversation.id": call.run_id,
        "gen_ai.tool.name": call.tool,
        "gen_ai.tool.call.id": f"call-{call.n}",
        "gen_ai.tool.call.arguments": call.args,
    }
    with tracer.start_as_current_span(
        f"execute_tool {call.tool}", context=parent, attributes=attrs
    ) as span:
        try:
            span.set_attribute("gen_ai.tool.call.result", run_tool(call))
        except ToolFailed as exc:  # shown to the model, which carries on
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, str(exc))
            span.set_attribute("error.type", type(exc).__qualname__)


def sdk_traced(calls: list[Call], batch: int) -> list[bytes]:
    """The script run by agents traced with the OpenTelemetry SDK, as `otlp_proto` payloads
    of `batch` spans (a Collector batch): a `TracerProvider` per agent (its id a resource
    attribute), an `invoke_agent` span per run over an `execute_tool` span per call, every
    span encoded as the SDK's OTLP exporters encode it (`encode_spans`)."""
    exporter = InMemorySpanExporter()
    providers: dict[str, TracerProvider] = {}
    runs: dict[str, trace.Span] = {}
    for call in sorted(calls, key=lambda c: c.n):
        if call.agent_id not in providers:
            resource = {"service.name": "scripted-agent", "gen_ai.agent.id": call.agent_id}
            provider = TracerProvider(
                resource=resources.Resource.create(resource), shutdown_on_exit=False
            )
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            providers[call.agent_id] = provider
        tracer = providers[call.agent_id].get_tracer("scripted-agent")
        if call.run_id not in runs:
            runs[call.run_id] = tracer.start_span(
                "invoke_agent scripted-agent",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.id": call.agent_id,
                    "gen_ai.conversation.id": call.run_id,
                },
            )
        _traced_call(tracer, call, trace.set_span_in_context(runs[call.run_id]))
    for span in runs.values():
        span.end()
    spans = exporter.get_finished_spans()
    for provider in providers.values():
        provider.shutdown()
    return [
        encode_spans(spans[i : i + batch]).SerializeToString() for i in range(0, len(spans), batch)
    ]
