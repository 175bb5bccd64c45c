"""`--input-format otlp`: OTLP traces (JSON lines files, topic payloads) become the wire events
the bridge's core makes of them, and replay, explain and compare decide them exactly as the
same calls in LoopGuard's wire format; refusals are shown and counted, never dropped."""

from __future__ import annotations

import gzip
import json
import pickle
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors.jsjson import loads
from loopguard_fleet.streams.audit.inputs import FileInput, RefusedItem
from loopguard_fleet.streams.audit.otlp_input import otlp_input
from loopguard_fleet.streams.audit.replay import Rejected, Replayer
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.otlp.options import AUDIT_OPTIONS
from tests.otlp import (
    Call,
    export_request,
    failing_script,
    looping_script,
    otlp_json_line,
    wire_jsonl,
)

ON = {"tools": {"loopDetection": {"enabled": True}}}


def _shuffled_batches(calls: list[Call], size: int, seed: int) -> list[list[Call]]:
    """Batches of calls in an arrival order that is not their start order (spans reach the
    Collector when they end, from several processes)."""
    rnd = random.Random(seed)
    order = calls[:]
    rnd.shuffle(order)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _otlp_file(path: Path, batches: list[list[Call]]) -> Path:
    path.write_bytes(b"".join(otlp_json_line(export_request(b)) for b in batches))
    return path


def _nameless_span() -> Span:
    span = Call("run-loop", "agent-a", 999, "read", "{}", "x").span()
    del span.attributes[1]  # gen_ai.tool.name
    return span


class _Messages:
    """A list of payloads read like a topic's messages (the adapter's view of TopicInput)."""

    unit = "message"
    total_bytes = None

    def __init__(self, values: list[bytes]) -> None:
        self.values = values

    def done_bytes(self) -> int:
        return 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return enumerate(self.values, start=1)


def test_json_lines_become_the_wire_events_of_the_same_calls_in_start_order(tmp_path) -> None:
    calls = looping_script()
    path = _otlp_file(tmp_path / "spans.jsonl", _shuffled_batches(calls, 7, seed=3))
    source = otlp_input(FileInput(str(path)))
    items = list(source)
    assert [pos for pos, _ in items] == list(range(1, len(items) + 1))
    assert [raw for _, raw in items] == wire_jsonl(calls).splitlines()
    counts = source.counts
    assert (counts.payloads, counts.tool_spans, counts.refused) == (9, 60, 0)


def test_a_failing_call_s_error_status_becomes_the_error_of_its_tool_result(tmp_path) -> None:
    calls = failing_script()[:3]
    path = _otlp_file(tmp_path / "spans.jsonl", [calls])
    events = [raw for _, raw in otlp_input(FileInput(str(path)))]
    assert events == wire_jsonl(calls).splitlines()
    assert [loads(e).get("error") for e in events[:2]] == [None, "Error: 503 from api"]


def test_refusals_duplicates_and_other_spans_are_counted_and_refusals_name_their_line(
    tmp_path,
) -> None:
    calls = looping_script()[:6]
    model_call = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat gpt-5")
    lines = [
        otlp_json_line(export_request(calls[:4], extra=[model_call])),
        otlp_json_line(export_request(calls[2:], extra=[_nameless_span()])),  # 2 retried
        b"\n",  # blank: skipped, as in any input file
        b"not an OTLP line\n",
    ]
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"".join(lines))
    source = otlp_input(FileInput(str(path)))
    items = list(source)
    refusals = [(p, r) for p, r in items if isinstance(r, RefusedItem)]
    assert [(r.reason, r.detail.split(":")[0]) for _, r in refusals] == [
        ("otlp_tool_name_missing", "line 2"),
        ("not_json", "line 4"),
    ]
    events = [r for _, r in items if not isinstance(r, RefusedItem)]
    assert events == wire_jsonl(calls).splitlines()
    c = source.counts
    assert (c.payloads, c.tool_spans, c.other_spans, c.duplicates, c.refused) == (3, 6, 1, 2, 2)


def test_a_gzip_file_gives_the_same_items(tmp_path) -> None:
    path = _otlp_file(tmp_path / "spans.jsonl", _shuffled_batches(looping_script(), 5, seed=1))
    gz = tmp_path / "spans.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert list(otlp_input(FileInput(str(gz)))) == list(otlp_input(FileInput(str(path))))


def test_topic_payloads_in_otlp_proto_and_otlp_json_give_the_same_events() -> None:
    batches = _shuffled_batches(looping_script(), 10, seed=7)
    proto = [export_request(b).SerializeToString() for b in batches]
    as_json = [otlp_json_line(export_request(b)).rstrip() for b in batches]
    mixed = [p if i % 2 else j for i, (p, j) in enumerate(zip(proto, as_json, strict=True))]
    runs = [list(otlp_input(_Messages(v))) for v in (proto, as_json, mixed)]  # type: ignore[arg-type]
    assert runs[0] == runs[1] == runs[2]
    assert [raw for _, raw in runs[0]] == wire_jsonl(looping_script()).splitlines()
    (refused,) = [r for _, r in otlp_input(_Messages([b"\x0a\xff"]))]  # type: ignore[arg-type]
    assert isinstance(refused, RefusedItem) and refused.reason == "otlp_not_protobuf"
    assert refused.detail.startswith("message 1: ")


def test_a_window_bounds_what_is_held_and_refuses_a_later_span(tmp_path) -> None:
    calls = looping_script()[:10]
    late, rest = calls[0], calls[1:]
    path = _otlp_file(tmp_path / "spans.jsonl", [rest[:3], rest[3:], [late]])
    items = list(otlp_input(FileInput(str(path)), replace(AUDIT_OPTIONS, reorder_window_s=1.0)))
    (refused,) = [r for _, r in items if isinstance(r, RefusedItem)]
    assert refused.reason == "otlp_late_span" and refused.detail.startswith("line 3: ")
    # Held whole, the same input is in order and nothing is late.
    whole = [r for _, r in otlp_input(FileInput(str(path)))]
    assert whole == wire_jsonl(calls).splitlines()


def test_a_refused_item_is_a_rejected_line_with_its_own_reason_after_a_pipe() -> None:
    item = pickle.loads(pickle.dumps(RefusedItem("otlp_late_span", "line 3: late"), 5))
    replayer = Replayer(load_policy(ON))
    assert replayer.feed_line(7, item) == Rejected(7, "otlp_late_span", "line 3: late")
    assert replayer.decode(8, item) == Rejected(8, "otlp_late_span", "line 3: late")
    assert replayer.stats.rejected == 2
    assert replayer.stats.rejected_reasons == {"otlp_late_span": 2}


def _run(argv: list[str], tmp_path: Path, name: str) -> bytes:
    out = tmp_path / name
    assert main([*argv, "--output", str(out)]) == 0
    return out.read_bytes()


def test_replay_of_otlp_json_lines_is_byte_identical_to_the_wire_format_replay(
    tmp_path, policy, capsys
) -> None:
    calls = looping_script()
    spans = _otlp_file(tmp_path / "spans.jsonl", _shuffled_batches(calls, 6, seed=11))
    wire = tmp_path / "events.jsonl"
    wire.write_bytes(wire_jsonl(calls))
    base = ["replay", "--policy", policy, "--quiet"]
    want = _run([*base, str(wire)], tmp_path, "wire.out")
    assert b'"action":"block"' in want and b"ping_pong" in want  # both runs decided something
    otlp = [*base, str(spans), "--input-format", "otlp"]
    for jobs in ("1", "2", "3"):
        assert _run([*otlp, "--jobs", jobs], tmp_path, f"otlp{jobs}.out") == want, jobs
    table = [*base, "--format", "table"]
    assert _run([*table, str(spans), "--input-format", "otlp"], tmp_path, "t1") == _run(
        [*table, str(wire)], tmp_path, "t2"
    )
    capsys.readouterr()
    for head, tail in (
        (["explain", "run-loop"], ["--format", "json", "--policy", policy]),
        (["compare"], ["--format", "json", "--policy", policy, "--candidate", policy]),
    ):
        assert main([*head, str(wire), *tail]) == 0
        from_wire = capsys.readouterr().out
        assert main([*head, str(spans), *tail, "--input-format", "otlp"]) == 0
        assert capsys.readouterr().out == from_wire, head[0]


def test_replay_shows_refusals_like_rejected_lines_and_prints_no_content(
    tmp_path, policy, capsys
) -> None:
    calls = looping_script()
    lines = [
        otlp_json_line(export_request(calls[:20], extra=[_nameless_span()])),
        b"{not json\n",
        otlp_json_line(export_request(calls[10:])),  # 10 retried spans
    ]
    spans = tmp_path / "spans.jsonl"
    spans.write_bytes(b"".join(lines))
    wire = tmp_path / "events.jsonl"
    wire.write_bytes(wire_jsonl(calls))
    want = _run(["replay", "--policy", policy, str(wire)], tmp_path, "w")
    (summary,) = capsys.readouterr().err.splitlines()
    got = _run(["replay", "--policy", policy, str(spans), "--input-format", "otlp"], tmp_path, "o")
    assert got == want
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("item 1: otlp_tool_name_missing: line 1: trace ")
    assert err[1].startswith("item 2: not_json: line 2: ")
    assert err[2:] == [
        summary.replace(", 0 rejected", ", 2 rejected"),
        "otlp: 3 payloads, 60 tool spans, 0 other spans, 10 duplicate spans, 2 refused",
    ]
    assert "/etc/x" not in "\n".join(err)  # arguments never shown


def test_otlp_flags_need_the_otlp_format_and_an_otlp_topic_is_named(capsys, policy) -> None:
    assert main(["replay", "x.jsonl", "--otlp-privacy"]) == 2
    assert capsys.readouterr().err == (
        "loopguard replay: --otlp-privacy needs --input-format otlp\n"
    )
    assert main(["replay", "--topic", "--input-format", "otlp"]) == 2
    assert "name the OTLP topic" in capsys.readouterr().err


def test_without_the_otlp_extra_one_line_names_it(tmp_path, monkeypatch, capsys) -> None:
    # As in an install without the extra: opentelemetry-proto cannot be imported, and the
    # OTLP modules that import it are imported afresh.
    monkeypatch.setitem(
        sys.modules, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", None
    )
    for name in [m for m in sys.modules if m.startswith("loopguard_fleet.streams.otlp.")]:
        monkeypatch.delitem(sys.modules, name)
    path = _otlp_file(tmp_path / "spans.jsonl", [looping_script()[:2]])
    assert main(["replay", str(path), "--input-format", "otlp"]) == 2
    assert capsys.readouterr().err == (
        "loopguard replay: --input-format otlp needs the optional extra: "
        "pip install 'loopguard-fleet[otlp]'\n"
    )


def test_the_mapping_flags_reach_the_bridge(tmp_path) -> None:
    from loopguard_fleet.streams.cli import _source, build_parser

    oi = Call("run-oi", "agent-c", 100, "grep", "{}", "x").span()
    del oi.attributes[:]
    for key, value in {"openinference.span.kind": "TOOL", "tool.name": "grep"}.items():
        oi.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    path = tmp_path / "spans.jsonl"
    path.write_bytes(otlp_json_line(export_request(looping_script()[:4], extra=[oi])))
    base = ["replay", str(path), "--input-format", "otlp"]

    def events(*flags: str) -> list[dict[str, object]]:
        return [loads(raw) for _, raw in _source(build_parser().parse_args([*base, *flags]))]

    assert {e["tool"] for e in events()} == {"read", "cat"}
    assert {e["tool"] for e in events("--otlp-openinference")} == {"read", "cat", "grep"}
    keyed = events("--otlp-run-id-keys", "tenant.run, gen_ai.agent.id", "--otlp-privacy")
    assert {e["run_id"] for e in keyed} == {"agent-a", "agent-b"}
    assert all("args" not in e and "args_hash" in e for e in keyed)
    assert all("result" not in e for e in keyed if e["type"] == "tool_result")


@pytest.mark.parametrize(
    "value",
    [{"intValue": "SECRET"}, {"doubleValue": "SECRET"}, {"stringValue": {"k": "SECRET"}},
     {"stringValue": "SECRET", "boolValue": True}, {"arrayValue": {"values": 5}}],
)  # fmt: skip
def test_a_malformed_attribute_is_refused_by_where_it_is_never_by_its_value(value) -> None:
    attr = {"key": "gen_ai.tool.call.arguments", "value": value}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [attr]}]}]}]}
    (refused,) = [r for _, r in otlp_input(_Messages([json.dumps(doc).encode()]))]  # type: ignore[arg-type]
    assert isinstance(refused, RefusedItem) and refused.reason == "otlp_bad_json"
    assert "SECRET" not in refused.detail and "5" not in refused.detail
    assert "attributes" in refused.detail and refused.detail.startswith("message 1: malformed")
