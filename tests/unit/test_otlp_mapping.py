"""OTLP tool spans -> wire events: mapping, decoding, ordering, dedup (streams/otlp/)."""

from __future__ import annotations

import random

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from loopguard_fleet.detectors.events import parse_event
from loopguard_fleet.detectors.jsjson import dumps
from loopguard_fleet.streams.otlp.core import SpanBridge
from loopguard_fleet.streams.otlp.decode import decode_request
from loopguard_fleet.streams.otlp.mapping import (
    SpanMapping,
    SpanRejected,
    ToolSpan,
    read_tool_spans,
    wire_events,
)
from loopguard_fleet.streams.otlp.order import Added, SpanOrder, seq_of
from loopguard_fleet.streams.wire.codec import InputRejected

T0 = 1_764_606_000_000_000_000  # ns
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def tool_span(n: int, tool: str = "read", args: str | None = '{"path":"/a"}', **extra: str) -> Span:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    attrs["gen_ai.tool.call.id"] = f"c{n}"
    if args is not None:
        attrs["gen_ai.tool.call.arguments"] = args
    attrs["gen_ai.tool.call.result"] = "same"
    attrs.update(extra)
    return Span(
        trace_id=TRACE,
        span_id=n.to_bytes(8, "big"),
        name=f"execute_tool {tool}",
        start_time_unix_nano=T0 + n * 1_000_000,
        end_time_unix_nano=T0 + n * 1_000_000 + 500_000,
        attributes=[_kv(k, v) for k, v in attrs.items()],
    )


def request(*spans: Span, resource: dict[str, str] | None = None) -> ExportTraceServiceRequest:
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])
    for k, v in ({"gen_ai.conversation.id": "run-1"} if resource is None else resource).items():
        rs.resource.attributes.append(_kv(k, v))
    return ExportTraceServiceRequest(resource_spans=[rs])


def test_a_genai_tool_span_becomes_a_call_and_its_result_in_the_wire_format() -> None:
    mapping = SpanMapping()
    (span,) = read_tool_spans(request(tool_span(1, **{"gen_ai.agent.id": "a1"})), mapping)
    assert isinstance(span, ToolSpan)
    call, result = wire_events(span, seq_of(span.start_ns), mapping)
    assert (call["type"], call["run_id"], call["agent_id"], call["tool"]) == (
        "tool_call", "run-1", "a1", "read",
    )  # fmt: skip
    assert call["args"] == {"path": "/a"} and call["tool_call_id"] == "c1"
    assert result["result"] == "same" and result["seq"] == call["seq"] + 1
    assert call["event_id"] == f"run-1:{call['seq']}"
    parse_event(call), parse_event(result)  # the engine's validator accepts both


def test_errors_come_from_the_exception_event_then_the_status() -> None:
    span = tool_span(1)
    span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message="ValueError: boom"))
    (mapped,) = read_tool_spans(request(span), SpanMapping())
    assert isinstance(mapped, ToolSpan) and mapped.error == "ValueError: boom"
    event = span.events.add(name="exception")
    event.attributes.append(_kv("exception.message", "boom"))
    (mapped,) = read_tool_spans(request(span), SpanMapping())
    assert isinstance(mapped, ToolSpan) and mapped.error == "boom"


def test_run_falls_back_to_the_trace_id_and_keys_are_configurable() -> None:
    (a,) = read_tool_spans(request(tool_span(1), resource={}), SpanMapping())
    assert isinstance(a, ToolSpan) and a.run_id == TRACE.hex()
    m = SpanMapping(run_id_keys=("tenant.run",))
    (b,) = read_tool_spans(request(tool_span(1), resource={"tenant.run": "r9"}), m)
    assert isinstance(b, ToolSpan) and b.run_id == "r9"


def test_other_spans_are_skipped_and_incomplete_or_huge_tool_spans_rejected() -> None:
    other = Span(trace_id=TRACE, span_id=b"\x00" * 7 + b"\x09", name="chat")
    nameless = tool_span(2)
    del nameless.attributes[1]  # gen_ai.tool.name
    huge = tool_span(3, args="x" * 300_000)
    out = list(read_tool_spans(request(other, nameless, huge), SpanMapping()))
    assert out[0] is None
    assert isinstance(out[1], SpanRejected) and out[1].reason == "otlp_tool_name_missing"
    assert isinstance(out[2], SpanRejected) and out[2].reason == "otlp_attribute_too_large"


def test_openinference_spans_only_behind_the_setting() -> None:
    span = Span(trace_id=TRACE, span_id=b"\x00" * 7 + b"\x01", start_time_unix_nano=T0)
    for k, v in {
        "openinference.span.kind": "TOOL",
        "tool.name": "grep",
        "input.value": "{}",
    }.items():
        span.attributes.append(_kv(k, v))
    assert list(read_tool_spans(request(span), SpanMapping())) == [None]
    (mapped,) = read_tool_spans(request(span), SpanMapping(openinference=True))
    assert isinstance(mapped, ToolSpan) and mapped.tool == "grep" and mapped.args == {}


def test_privacy_sends_hashes_never_the_content() -> None:
    m = SpanMapping(privacy=True)
    (span,) = read_tool_spans(request(tool_span(1, args='{"secret":"s3"}')), m)
    assert isinstance(span, ToolSpan)
    call, result = wire_events(span, 2, m)
    text = dumps(call) + dumps(result)
    assert b"s3" not in text and b"same" not in text
    assert "args_hash" in call and "result_hash" in result


def test_without_argument_capture_no_two_calls_look_alike() -> None:
    spans = [
        s
        for s in read_tool_spans(
            request(tool_span(1, args=None), tool_span(2, args=None)), SpanMapping()
        )
    ]
    assert isinstance(spans[0], ToolSpan) and isinstance(spans[1], ToolSpan)
    assert spans[0].args != spans[1].args


def test_protobuf_and_otlp_json_decode_to_the_same_request() -> None:
    req = request(tool_span(1), tool_span(2))
    assert decode_request(req.SerializeToString(), 1 << 20) == req
    doc = json_format.MessageToDict(req)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for s, orig in zip(spans, req.resource_spans[0].scope_spans[0].spans, strict=True):
        # OTLP/JSON writes ids as hex, not protobuf JSON's base64.
        s["traceId"], s["spanId"] = orig.trace_id.hex(), orig.span_id.hex()
    assert decode_request(dumps(doc), 1 << 20) == req


@pytest.mark.parametrize(
    ("raw", "reason"),
    [(b"", "empty"), (b"\xff\xff\xff", "otlp_not_protobuf"), (b"{nope", "not_json"),
     (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}', "otlp_bad_id")],
)  # fmt: skip
def test_bad_payloads_are_refused_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InputRejected) as info:
        decode_request(raw, 1 << 20)
    assert info.value.reason == reason


def _spans(n: int) -> list[ToolSpan]:
    out = list(read_tool_spans(request(*(tool_span(i) for i in range(1, n + 1))), SpanMapping()))
    return [s for s in out if isinstance(s, ToolSpan)]


def _ordered(spans: list[ToolSpan], window_ns: int) -> list[bytes]:
    order = SpanOrder(window_ns, idle_ns=10**12)
    released = []
    for s in spans:
        order.add(s)
        released += order.release()
    released += order.release(everything=True)
    m = SpanMapping()
    return [dumps(e) for s, seq in released for e in wire_events(s, seq, m)]


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=12), st.randoms(use_true_random=False))
def test_shuffled_arrival_within_the_window_gives_the_same_bytes(
    n: int, rnd: random.Random
) -> None:
    spans = _spans(n)
    shuffled = spans[:]
    rnd.shuffle(shuffled)
    window = 10**12  # wider than the whole run: every arrival order is within it
    assert _ordered(shuffled, window) == _ordered(spans, window) == _ordered(spans, window)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=30))
def test_duplicates_are_dropped(picks: list[int]) -> None:
    spans = _spans(8)
    order = SpanOrder(0, idle_ns=10**12)
    outcomes = [order.add(spans[i]) for i in picks]
    assert outcomes.count(Added.HELD) == len(set(picks))
    assert len(order.release(everything=True)) == len(set(picks))


def test_a_span_older_than_the_last_released_is_late_and_seqs_increase() -> None:
    a, b, c = _spans(3)
    order = SpanOrder(0, idle_ns=10**12)
    order.add(a), order.add(c)
    released = order.release()
    assert [s for s, _ in released] == [a, c]
    assert order.add(b) is Added.LATE
    assert released[0][1] == seq_of(a.start_ns) < released[1][1]


def _bridge() -> SpanBridge:
    return SpanBridge(SpanMapping(), SpanOrder(10**12, idle_ns=10**13), 1 << 20)


def test_the_bridge_core_gives_the_same_events_from_protobuf_and_otlp_json() -> None:
    batches = [request(tool_span(2), tool_span(1)), request(tool_span(3), tool_span(1))]
    proto, as_json = _bridge(), _bridge()
    out_p, out_j = [], []
    for req in batches:
        doc = json_format.MessageToDict(req)
        spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        for s, orig in zip(spans, req.resource_spans[0].scope_spans[0].spans, strict=True):
            s["traceId"], s["spanId"] = orig.trace_id.hex(), orig.span_id.hex()
        step_p, step_j = proto.feed(req.SerializeToString()), as_json.feed(dumps(doc))
        out_p += step_p.events
        out_j += step_j.events
    assert step_p.duplicates == 1  # span 1 repeated by a retry
    out_p += proto.finish().events
    out_j += as_json.finish().events
    assert out_p == out_j and len(out_p) == 6
    assert [k for k, _ in out_p] == [b"run-1"] * 6


def test_the_bridge_core_refuses_bad_payloads_and_spans_without_raising() -> None:
    bridge = _bridge()
    assert bridge.feed(b"\xff\xff").refused[0].reason == "otlp_not_protobuf"
    nameless = tool_span(2)
    del nameless.attributes[1]
    step = bridge.feed(
        request(nameless, Span(trace_id=TRACE, span_id=b"\x01" * 8)).SerializeToString()
    )
    assert [r.reason for r in step.refused] == ["otlp_tool_name_missing"] and step.skipped == 1


@pytest.mark.parametrize(
    "raw",
    [b"\x0a\x00", b"\x08\x01", b"{}", request().SerializeToString()],
)  # fmt: skip
def test_a_payload_without_any_span_is_refused_not_dropped_silently(raw: bytes) -> None:
    """Protobuf reads many stray byte strings (and an empty request) as a request with no
    span: it is dead-lettered with a reason, never a silent no-op."""
    step = _bridge().feed(raw)
    assert [(r.reason, r.whole_message) for r in step.refused] == [("otlp_no_spans", True)]
    assert not step.events and not step.held and step.skipped == 0
