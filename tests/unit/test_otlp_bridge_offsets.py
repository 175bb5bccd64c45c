"""The live bridge's commit rule (streams/worker/otlp_bridge.py): an OTLP record's offset is
committable only once none of its spans is held by the reorder window, so a bridge restarted
from the committed offset sends every held span, with the same bytes."""

from __future__ import annotations

from loopguard_fleet.streams.otlp.core import SpanBridge, Step, watermark_record
from loopguard_fleet.streams.otlp.options import OtlpOptions
from loopguard_fleet.streams.worker.otlp_bridge import HeldOffsets
from tests.otlp import T0_NS, export_request, looping_script

CALLS = {c.n: c for c in looping_script()}  # call n starts n s after T0, lasts 0.4 s
PAYLOADS = [
    export_request([CALLS[2], CALLS[3]]).SerializeToString(),  # offset 0
    export_request([CALLS[6]]).SerializeToString(),  # offset 1: releases 2 and 3
    b"not a protobuf",  # offset 2: refused, holds nothing
]
LATER_NS = T0_NS + 3_600 * 1_000_000_000


def _bridge() -> SpanBridge:
    return SpanBridge.of_options(OtlpOptions(), 1 << 20)  # the live defaults


def test_a_record_is_committed_only_once_its_spans_are_released() -> None:
    bridge, held = _bridge(), HeldOffsets()
    assert held.commit_below() is None
    below = []
    for offset, payload in enumerate(PAYLOADS):
        held.note(offset, bridge.feed(payload))
        below.append(held.commit_below())
    assert below == [0, 1, 1]  # 2 and 3 held by record 0, then 6 by record 1
    held.note(None, bridge.tick(LATER_NS))
    assert held.commit_below() == 3


def test_a_bridge_restarted_from_the_commit_sends_what_was_held_alike() -> None:
    first, held = _bridge(), HeldOffsets()
    sent: list[tuple[bytes, bytes]] = []
    for offset, payload in enumerate(PAYLOADS):
        step = first.feed(payload)
        held.note(offset, step)
        sent += step.events
    below = held.commit_below()
    assert below == 1
    sent += first.tick(LATER_NS).events  # what a crash here would have lost

    restarted = _bridge()  # crash: read again from the committed offset
    again: list[tuple[bytes, bytes]] = []
    for payload in PAYLOADS[below:]:
        again += restarted.feed(payload).events
    again += restarted.tick(LATER_NS).events
    assert again and again == sent[-len(again) :]
    assert len(sent) == 6  # 3 calls, a tool_call and a tool_result each


def test_a_tick_without_records_releases_nothing_early() -> None:
    bridge, held = _bridge(), HeldOffsets()
    held.note(0, bridge.feed(PAYLOADS[0]))
    step: Step = bridge.tick(T0_NS + 3 * 1_000_000_000)  # 2 started 1 s before: in the window
    held.note(None, step)
    assert step.events == [] and held.commit_below() == 0


def _decisions(records: list[bytes]) -> list[tuple[list[tuple[bytes, bytes]], list[str], int]]:
    """What a fresh live-default bridge makes of each record, in offset order."""
    bridge = _bridge()
    steps = [bridge.feed(r) for r in records]
    return [(s.events, [f.reason for f in s.refused], s.duplicates) for s in steps]


def test_a_watermark_record_decides_late_spans_and_retries_alike_on_replay() -> None:
    held = export_request([CALLS[3], CALLS[4]]).SerializeToString()
    records = [
        held,  # 3 and 4 held
        watermark_record(T0_NS + 30 * 1_000_000_000),  # a quiet partition's tick: releases
        export_request([CALLS[2]]).SerializeToString(),  # starts before 4, released: late
        held,  # the Collector's retry of 3 and 4: duplicates
    ]
    live = _decisions(records)
    assert [len(events) for events, _, _ in live] == [0, 4, 0, 0]
    assert live[1][1] == [] and live[2][1] == ["otlp_late_span"] and live[3][2] == 2
    assert _decisions(records) == live  # a replay of the span topic: the same bytes


def test_a_malformed_watermark_record_is_dead_lettered() -> None:
    step = _bridge().feed(watermark_record(1)[:-1] + b"x")
    assert [r.reason for r in step.refused] and all(r.whole_message for r in step.refused)
