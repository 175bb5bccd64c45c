"""Scripted agent tool calls as real OTLP messages, and as the wire events an SDK would send
for the same calls: the two inputs an OTLP audit must decide alike."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from loopguard_fleet.detectors.jsjson import dumps, loads
from loopguard_fleet.streams.client.run_events import RunEvents
from loopguard_fleet.streams.otlp.order import seq_of

T0_NS = 1_796_119_200_000_000_000  # 2026-12-01T10:00:00Z


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


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
            "gen_ai.tool.call.result": self.result,
        }
        return Span(
            trace_id=self.run_id.encode().ljust(16, b"\x00")[:16],
            span_id=self.n.to_bytes(8, "big"),
            name=f"execute_tool {self.tool}",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=self.start_ns,
            end_time_unix_nano=self.end_ns,
            attributes=[_kv(k, v) for k, v in attrs.items()],
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
        lines.append(dumps(events.tool_result(f"call-{c.n}", c.tool, args, result=c.result)))
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
