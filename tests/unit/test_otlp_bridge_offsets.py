"""The live bridge's commit rule (streams/worker/otlp_bridge.py): an OTLP record's offset is
committable only once none of its spans is held by the reorder window, so a bridge restarted
from the committed offset sends every held span, with the same bytes."""

from __future__ import annotations

from loopguard_fleet.streams.otlp.core import SpanBridge, Step
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
