"""No OTLP input crashes an audit or shows content: generated hostile OTLP JSON lines (tool
spans with attributes of any type, bad ids and times, non-JSON lines) through replay,
explain and compare with `--input-format otlp` never exit 70, and no argument or result
value ever reaches stdout or stderr."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import EXIT_INTERNAL

MARK = "S3CR3T"  # in every argument and result value: must never be shown
STRICT = Path(__file__).parents[1] / "data" / "policies" / "first-contact-strict.json5"
COMMANDS = [
    ["replay", "{f}"],
    ["replay", "{f}", "--format", "table"],
    ["replay", "{f}", "--strict"],
    ["explain", "run-1", "{f}", "--format", "json"],
    ["compare", "{f}", "--candidate", str(STRICT)],
]

text = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(["\udc00", "\x00", '"', "\\"])),
    max_size=8,
)
secret = text.map(lambda t: MARK + t)
any_value = st.one_of(  # AnyValue, of the right shape or not
    secret.map(lambda s: {"stringValue": s}),
    secret.map(lambda s: {"intValue": s}),
    secret.map(lambda s: {"doubleValue": s}),
    secret.map(lambda s: {"stringValue": {"k": s}}),
    secret.map(lambda s: {"arrayValue": {"values": [{"stringValue": s}]}}),
    secret.map(lambda s: {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": s}}]}}),
    st.just({"stringValue": '{"path": "' + MARK + '"}'}),
    st.just({}),
)
name_value = st.one_of(st.sampled_from(["read", "exec", ""]), text).map(
    lambda s: {"stringValue": s}
)
hex_id = st.one_of(st.binary(min_size=0, max_size=16).map(bytes.hex), text)
nanos = st.one_of(st.integers(min_value=0, max_value=2**64 - 1).map(str), text, st.none())


@st.composite
def tool_span(draw: st.DrawFn) -> dict[str, object]:
    attrs = [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]
    attrs.append({"key": "gen_ai.tool.name", "value": draw(name_value)})
    attrs.append({"key": "gen_ai.conversation.id", "value": {"stringValue": "run-1"}})
    for key in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result"):
        if draw(st.booleans()):
            attrs.append({"key": key, "value": draw(any_value)})
    span: dict[str, object] = {"traceId": draw(hex_id), "spanId": draw(hex_id), "attributes": attrs}
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        value = draw(nanos)
        if value is not None:
            span[key] = value
    if draw(st.booleans()):
        span["status"] = {"code": 2, "message": "Tool exec not found"}
    return span


payload = st.lists(tool_span(), min_size=1, max_size=4).map(
    lambda spans: json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
)
line = st.one_of(
    payload,
    payload,
    st.binary(max_size=30),
    st.sampled_from([b"{", b"[1]", b"{}", b'{"resourceSpans": 5}', b"\xff" + MARK.encode()]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(line, min_size=1, max_size=5))
def test_no_hostile_otlp_input_crashes_an_audit_or_shows_content(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "spans.jsonl"
        f.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
        for command in COMMANDS:
            argv = [a.format(f=f) for a in command] + ["--input-format", "otlp"]
            raw = io.BytesIO()
            out, err = io.TextIOWrapper(raw), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            out.flush()
            assert code != EXIT_INTERNAL, (argv, err.getvalue())
            shown = raw.getvalue() + err.getvalue().encode(errors="backslashreplace")
            assert MARK.encode() not in shown, (argv, shown[-2000:])
