"""Each run's tool spans in start-time order, deduplicated, with deterministic seqs.

Spans reach the Collector when they end, in batches, possibly through several Collector
instances, so a run's spans arrive out of order. `SpanOrder` holds each span until the
event-time watermark (the latest span end seen, or a later time the caller advances it to)
is `window_ns` past its start, then releases the held spans ordered by (start time, span id).

- `seq` is a function of the span: twice its start time in microseconds for the `tool_call`,
  plus one for the `tool_result` (below 2^53, so JavaScript readers keep it exact until the
  year 2112). Two spans of a run started within the same microsecond take the next free seq.
  So a restarted bridge, or a replay of the same topic, numbers the same spans alike.
- A span id seen before for its run is a duplicate (the Collector's retries): dropped, counted.
- A span that starts before the last span already released for its run arrived later than the
  window allows: it is *late* and is dead-lettered (`otlp_late_span`), never sent out of order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from loopguard_fleet.streams.otlp.mapping import ToolSpan

__all__ = ["Added", "SpanOrder", "seq_of"]


class Added(Enum):
    """What `SpanOrder.add` did with a span."""

    HELD = "held"
    DUPLICATE = "duplicate"
    LATE = "late"


def seq_of(start_ns: int) -> int:
    """The `tool_call` seq of a span that started at `start_ns` (its result's is one more)."""
    return (start_ns // 1_000) * 2


@dataclass(slots=True)
class _Run:
    """One run's ordering state."""

    held: list[ToolSpan] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # span ids held or released
    last_key: tuple[int, str] | None = None  # (start_ns, span_id) of the last released span
    last_seq: int = 0  # the last seq released (a tool_result's)
    last_end_ns: int = 0  # the latest end time seen: the idle clock


class SpanOrder:
    """Reorders, deduplicates and numbers the tool spans of many runs."""

    def __init__(self, window_ns: int, idle_ns: int) -> None:
        if window_ns < 0 or idle_ns <= 0:
            raise ValueError("window_ns must be >= 0 and idle_ns > 0")
        self.window_ns = window_ns
        self.idle_ns = idle_ns  # a run quiet this long in event time is forgotten
        self.watermark_ns = 0
        self._runs: dict[str, _Run] = {}

    @classmethod
    def with_window(cls, window_ns: int, memory_ns: int) -> SpanOrder:
        """An order with this reorder window whose runs, quiet `memory_ns` past it, forget
        the span ids they saw (how long a Collector's retry is still a duplicate)."""
        return cls(window_ns, idle_ns=window_ns + memory_ns)

    def add(self, span: ToolSpan) -> Added:
        """Take one span: held until released, or refused as a duplicate or late."""
        run = self._runs.get(span.run_id)
        if run is None:
            run = self._runs[span.run_id] = _Run()
        if span.span_id in run.seen:
            return Added.DUPLICATE
        if run.last_key is not None and (span.start_ns, span.span_id) < run.last_key:
            return Added.LATE
        run.seen.add(span.span_id)
        run.held.append(span)
        run.last_end_ns = max(run.last_end_ns, span.end_ns)
        self.watermark_ns = max(self.watermark_ns, span.end_ns)
        return Added.HELD

    def advance(self, to_ns: int) -> None:
        """Move the watermark forward (a wall-clock tick when no span arrives)."""
        self.watermark_ns = max(self.watermark_ns, to_ns)

    def release(self, *, everything: bool = False) -> list[tuple[ToolSpan, int]]:
        """The spans whose start is a window behind the watermark (all held spans with
        `everything`), with their seqs, ordered by (start time, span id); forgets idle runs."""
        limit = self.watermark_ns - self.window_ns
        ready: list[ToolSpan] = []
        for run in self._runs.values():
            if not run.held:
                continue
            keep = [] if everything else [s for s in run.held if s.start_ns > limit]
            ready.extend(s for s in run.held if everything or s.start_ns <= limit)
            run.held = keep
        ready.sort(key=lambda s: (s.start_ns, s.span_id, s.run_id))
        out: list[tuple[ToolSpan, int]] = []
        for span in ready:
            run = self._runs[span.run_id]
            seq = max(seq_of(span.start_ns), run.last_seq + 1)
            run.last_seq = seq + 1
            run.last_key = (span.start_ns, span.span_id)
            out.append((span, seq))
        self._forget_idle()
        return out

    def _forget_idle(self) -> None:
        """Drop runs with nothing held whose last span ended `idle_ns` before the watermark:
        a duplicate of theirs arriving later carries its old seqs, which the worker drops."""
        cutoff = self.watermark_ns - self.idle_ns
        idle = [rid for rid, r in self._runs.items() if not r.held and r.last_end_ns < cutoff]
        for rid in idle:
            del self._runs[rid]

    @property
    def held(self) -> int:
        """How many spans wait for the watermark."""
        return sum(len(r.held) for r in self._runs.values())
