"""OTLP trace payloads -> `ExportTraceServiceRequest`, as the Collector's Kafka exporter
writes them: `otlp_proto` (binary protobuf) or `otlp_json` (OTLP/JSON).

Both are decoded by `opentelemetry-proto`'s generated classes and protobuf's own parsers.
OTLP/JSON differs from protobuf's canonical JSON in one point only: trace and span ids are
hex strings, not base64 (OTLP specification, "JSON Protobuf Encoding"), so those fields are
re-encoded before `json_format` reads the document.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from loopguard_fleet.detectors.jsjson import NotJSON, loads
from loopguard_fleet.streams.wire.codec import InputRejected

__all__ = ["Encoding", "decode_request", "detect_encoding"]

Encoding = Literal["otlp_proto", "otlp_json"]

_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field")
_AT_PATH = re.compile(r'at "?(ExportTraceServiceRequest[\w.\[\]]*)')


def detect_encoding(raw: bytes) -> Encoding:
    """`otlp_json` when the payload starts like a JSON object, else `otlp_proto`.

    An `ExportTraceServiceRequest` starts with field 1's tag (0x0a); `{` (0x7b) would be
    field 15 of wire type 3, which the message does not have, so the two never overlap.
    """
    return "otlp_json" if raw.lstrip()[:1] == b"{" else "otlp_proto"


def _hex_ids_to_base64(node: Any) -> Any:
    """The document with every hex trace/span id re-encoded as protobuf JSON's base64."""
    if isinstance(node, list):
        return [_hex_ids_to_base64(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ID_FIELDS and isinstance(value, str):
            try:
                value = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError:
                raise InputRejected("otlp_bad_id", f"{key} is not hex: {value[:40]!r}") from None
        elif key != "attributes":  # attribute values are user data: never rewritten
            value = _hex_ids_to_base64(value)
        out[key] = value
    return out


def _parse_error_detail(message: str) -> str:
    """Where an OTLP/JSON document is malformed, without the value: protobuf's message
    quotes it, and it may be a tool's argument or result."""
    at = _AT_PATH.search(message)
    indexed = at.group(1).rstrip(".") if at is not None else ""  # with list indexes
    fields = ".".join(["ExportTraceServiceRequest", *_FAILED_FIELD.findall(message)])
    return f"malformed OTLP/JSON at {max(indexed, fields, key=len)}"


def decode_request(raw: bytes | None, max_bytes: int) -> ExportTraceServiceRequest:
    """Decode one Kafka value into an `ExportTraceServiceRequest` or raise `InputRejected`."""
    if not raw:
        raise InputRejected("empty", "message has no value")
    if len(raw) > max_bytes:
        raise InputRejected("too_large", f"{len(raw)} bytes exceeds the limit of {max_bytes}")
    request = ExportTraceServiceRequest()
    if detect_encoding(raw) == "otlp_json":
        try:
            doc = loads(raw)
        except NotJSON as exc:
            raise InputRejected("not_json", str(exc)) from None
        if not isinstance(doc, dict):
            raise InputRejected("not_object", "an OTLP/JSON request is a JSON object")
        try:
            json_format.ParseDict(_hex_ids_to_base64(doc), request, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise InputRejected("otlp_bad_json", _parse_error_detail(str(exc))) from None
        return request
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        raise InputRejected("otlp_not_protobuf", str(exc) or "not an OTLP protobuf") from None
    return request
