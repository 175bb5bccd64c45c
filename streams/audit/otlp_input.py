"""OTLP traces as an audit input (`--input-format otlp`): the wire events their tool spans
become, through the bridge's own core (`SpanBridge`), as `(position, event)` items.

A file holds OTLP JSON lines, one `ExportTraceServiceRequest` a line (the Collector's `file`
exporter); a topic holds one OTLP payload a message, `otlp_proto` or `otlp_json` (its `kafka`
exporter). The position counts the items this input yields: events, and refusals
(`RefusedItem`, which the replay counts and shows as rejected, naming the file line or the
topic message). Nothing else is dropped but duplicate spans and spans that are not tool
calls, and `OtlpCounts` counts those. docs/audit.md, "Auditing OpenTelemetry traces".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from loopguard_fleet.streams.audit.inputs import FileInput, InputItem, RefusedItem, TopicInput
from loopguard_fleet.streams.otlp.options import AUDIT_OPTIONS, OtlpOptions

if TYPE_CHECKING:  # the [otlp] extra: imported only when an OTLP input is made
    from loopguard_fleet.streams.otlp.core import SpanBridge, Step

__all__ = [
    "MAX_OTLP_PAYLOAD_BYTES",
    "OtlpCounts",
    "OtlpInput",
    "otlp_input",
]

#: A payload larger than this is refused: a Collector batch is far below it (its Kafka
#: exporter sends at most 1 MB a message; a file line is one export request).
MAX_OTLP_PAYLOAD_BYTES: Final = 64 * 1024 * 1024


@dataclass(slots=True)
class OtlpCounts:
    """What an OTLP input read besides the events it yielded."""

    payloads: int = 0  # file lines or topic messages
    tool_spans: int = 0  # became a tool_call and its tool_result
    other_spans: int = 0  # not a tool call (model calls, agent spans): not for LoopGuard
    duplicates: int = 0  # a span id seen before in its run (the Collector's retries)
    refused: int = 0  # payloads and spans refused (shown as rejected)

    def summary(self) -> str:
        """The one-line summary printed after the replay's."""
        return (
            f"otlp: {self.payloads} payloads, {self.tool_spans} tool spans, "
            f"{self.other_spans} other spans, {self.duplicates} duplicate spans, "
            f"{self.refused} refused"
        )


class OtlpInput:
    """The wire events of a file's or a topic's OTLP payloads, one item at a time."""

    unit = "item"  # an event or a refusal: a refusal names its file line or topic message

    def __init__(self, source: FileInput | TopicInput, bridge: SpanBridge) -> None:
        self.source = source
        self.bridge = bridge
        self.counts = OtlpCounts()

    @property
    def total_bytes(self) -> int | None:
        """The file's size, for the progress bar (None for a topic)."""
        return self.source.total_bytes

    def done_bytes(self) -> int:
        """Bytes of the file read so far."""
        return self.source.done_bytes()

    def __iter__(self) -> Iterator[InputItem]:
        from loopguard_fleet.streams.otlp.decode import detect_encoding

        pos = 0
        lines = isinstance(self.source, FileInput)
        for where, raw in self.source:
            self.counts.payloads += 1
            at = f"{self.source.unit} {where}"
            if lines and detect_encoding(raw) != "otlp_json":
                # A file is OTLP JSON lines: a line that is not JSON is not protobuf either.
                self.counts.refused += 1
                pos += 1
                yield pos, RefusedItem("not_json", f"{at}: an OTLP JSON line starts with {{")
                continue
            for item in self._items(self.bridge.feed(raw), at):
                pos += 1
                yield pos, item
        for item in self._items(self.bridge.finish(), "end of input"):
            pos += 1
            yield pos, item

    def _items(self, step: Step, where: str) -> Iterator[bytes]:
        """A step's refusals (naming the payload they came from), then its events."""
        counts = self.counts
        counts.other_spans += step.skipped
        counts.duplicates += step.duplicates
        counts.refused += len(step.refused)
        counts.tool_spans += len(step.events) // 2  # each span: its call and its result
        for refusal in step.refused:
            yield RefusedItem(refusal.reason, f"{where}: {refusal.detail}")
        for _key, event in step.events:
            yield event


def otlp_input(source: FileInput | TopicInput, options: OtlpOptions = AUDIT_OPTIONS) -> OtlpInput:
    """An OTLP input over `source`, mapped as `options` say; raises ImportError without the
    [otlp] extra.

    A `reorder_window_s` of None holds every span until the end of the input, so each run's
    spans are in start-time order whatever order they arrived in; a window releases them that
    many seconds of span time behind the latest span end, bounding memory (a span later than
    that is refused as `otlp_late_span`)."""
    from loopguard_fleet.streams.otlp.core import SpanBridge

    return OtlpInput(source, SpanBridge.of_options(options, MAX_OTLP_PAYLOAD_BYTES))
