"""The bridge's core without I/O: OTLP payloads in, keyed wire events and refusals out.

`SpanBridge.feed` takes one Kafka value (or one line of an OTLP JSON lines file) and returns
what it released; `finish` releases what is still held (end of a file, or a stopping bridge).
The same payloads in the same order give the same output bytes.

Every release, late-span and forget decision is a function of the payloads alone: the
watermark is the latest span end read, or the time a *watermark record* carries. The live
bridge writes such a record (`watermark_record`) onto a quiet partition of the span topic
itself, instead of advancing its watermark from the wall clock, so a replay of the topic
reads the same record at the same offset and decides every span alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from loopguard_fleet.detectors.jsjson import dumps
from loopguard_fleet.streams.otlp.decode import decode_request
from loopguard_fleet.streams.otlp.mapping import (
    SpanMapping,
    SpanRejected,
    read_tool_spans,
    wire_events,
)
from loopguard_fleet.streams.otlp.options import OtlpOptions
from loopguard_fleet.streams.otlp.order import Added, SpanOrder
from loopguard_fleet.streams.wire.codec import InputRejected, run_key

__all__ = ["WATERMARK_PREFIX", "Refusal", "SpanBridge", "Step", "watermark_record"]

_NS = 1_000_000_000
#: The value of a watermark record starts so (then the time in ns, ASCII digits): no OTLP
#: protobuf request starts with "l" (field 13, wire type 4: an end-group), no OTLP/JSON
#: with a letter.
WATERMARK_PREFIX: Final = b"loopguard-otlp-watermark "


def watermark_record(now_ns: int) -> bytes:
    """The value of a span-topic record that moves its partition's watermark to `now_ns`."""
    return WATERMARK_PREFIX + str(now_ns).encode("ascii")


def _watermark_of(raw: bytes) -> int | None:
    """The time a watermark record carries; None if `raw` is not a well-formed one."""
    digits = raw[len(WATERMARK_PREFIX) :]
    if not raw.startswith(WATERMARK_PREFIX) or not digits.isdigit() or len(digits) > 20:
        return None
    return int(digits)


#: "Hold every span until the end of the input": a reorder window no span time reaches.
_WHOLE_INPUT_NS = 1 << 62


@dataclass(frozen=True, slots=True)
class Refusal:
    """One dead letter: a payload or a span that cannot become events."""

    reason: str  # label-safe
    detail: str
    run_id: str | None = None
    whole_message: bool = False  # True: the payload itself (dead-letter it with its prefix)


@dataclass(slots=True)
class Step:
    """What one payload produced."""

    events: list[tuple[bytes, bytes]] = field(default_factory=list)  # (run key, event JSON)
    refused: list[Refusal] = field(default_factory=list)
    skipped: int = 0  # spans of other kinds (model calls, agent spans): not tool calls
    duplicates: int = 0
    held: list[tuple[str, str]] = field(default_factory=list)  # (run id, span id) now held
    released: list[tuple[str, str]] = field(default_factory=list)  # (run id, span id) sent


class SpanBridge:
    """Decode, map, order and number tool spans; one instance per bridge."""

    def __init__(self, mapping: SpanMapping, order: SpanOrder, max_message_bytes: int) -> None:
        self.mapping = mapping
        self.order = order
        self.max_message_bytes = max_message_bytes

    @classmethod
    def of_options(cls, options: OtlpOptions, max_message_bytes: int) -> SpanBridge:
        """The core `options` describe: the live bridge's and the audits' one constructor."""
        mapping = SpanMapping(
            run_id_keys=options.run_id_keys,
            openinference=options.openinference,
            privacy=options.privacy,
            channel_tools=options.channel_tools,
        )
        window = options.reorder_window_s
        window_ns = _WHOLE_INPUT_NS if window is None else int(window * _NS)
        order = SpanOrder.with_window(window_ns, int(options.dedupe_memory_s * _NS))
        return cls(mapping, order, max_message_bytes)

    def feed(self, raw: bytes | None) -> Step:
        """Take one OTLP payload; never raises for bad input."""
        step = Step()
        if raw is not None and (now_ns := _watermark_of(raw)) is not None:
            return self.tick(now_ns)
        try:
            request = decode_request(raw, self.max_message_bytes)
        except InputRejected as exc:
            step.refused.append(Refusal(exc.reason, exc.detail, whole_message=True))
            return step
        if not any(ss.spans for rs in request.resource_spans for ss in rs.scope_spans):
            # Nothing to decide, and protobuf reads many stray byte strings as such a request:
            # dead-lettered so that it is seen, never a silent no-op.
            detail = "the request holds no span"
            step.refused.append(Refusal("otlp_no_spans", detail, whole_message=True))
            return step
        for span in read_tool_spans(request, self.mapping):
            if span is None:
                step.skipped += 1
            elif isinstance(span, SpanRejected):
                detail = f"trace {span.trace_id} span {span.span_id}: {span.detail}"
                step.refused.append(Refusal(span.reason, detail, span.run_id))
            else:
                added = self.order.add(span)
                if added is Added.HELD:
                    step.held.append((span.run_id, span.span_id))
                elif added is Added.DUPLICATE:
                    step.duplicates += 1
                elif added is Added.LATE:
                    detail = (
                        f"trace {span.trace_id} span {span.span_id} starts before the run's "
                        f"last released span, over the {self.order.window_ns} ns window"
                    )
                    step.refused.append(Refusal("otlp_late_span", detail, span.run_id))
        self._release(step, everything=False)
        return step

    def finish(self) -> Step:
        """Release every held span."""
        step = Step()
        self._release(step, everything=True)
        return step

    def tick(self, now_ns: int) -> Step:
        """Release what a watermark moved to `now_ns` (a watermark record's time) frees."""
        step = Step()
        self.order.advance(now_ns)
        self._release(step, everything=False)
        return step

    def _release(self, step: Step, *, everything: bool) -> None:
        for span, seq in self.order.release(everything=everything):
            key = run_key(span.run_id)
            step.released.append((span.run_id, span.span_id))
            for event in wire_events(span, seq, self.mapping):
                step.events.append((key, dumps(event)))
