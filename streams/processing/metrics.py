"""Prometheus metrics of one worker: our own registry, bounded labels, pre-bound children.

Metric names and labels are a public contract (deploy/ dashboards and alerts use them). Labels
are bounded sets (event type, detector, level, command, reject reason): never a run id or a
tool argument.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from loopguard_fleet.detectors.build_info import engine_build

__all__ = [
    "CONTENT_TYPE_LATEST",
    "EVENT_TYPES",
    "VERDICT_STAGES",
    "Metrics",
    "PerEventHistogram",
]

#: The stages of a verdict's way through the worker, as `loopguard_verdict_stage_seconds`
#: times them (docs/performance.md, "Where a verdict's time goes").
VERDICT_STAGES = ("fetch", "queue", "engine", "send", "ack")
# A verdict takes milliseconds end to end: buckets from 50 µs, fine up to 25 ms.
_STAGE_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip

EVENT_TYPES = ("tool_call", "tool_result", "compaction", "run_end")

# Batches take well under a millisecond per event; buckets span 50 µs .. 5 s.
_PROCESSING_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class PerEventHistogram(Collector):
    """A histogram of per-event processing time, observed a whole batch at a time.

    A batch of n events adds n observations of its mean time per event, as n calls of
    prometheus-client's `Histogram.observe` would (~0.6 µs each, about 1 % of the worker's
    time on workload P), with one bucket increment: the exposition is the same but for the
    `_created` sample, which a collector of its own does not have.
    """

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self._name, self._documentation = name, documentation
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last is +Inf's own
        self._sum = 0.0
        self._lock = threading.Lock()  # a scrape may read from another thread

    def observe(self, seconds: float, events: int) -> None:
        """Add `events` observations of `seconds / events` each."""
        if events <= 0:
            return
        i = bisect_left(self._bounds, seconds / events)  # first bound >= the value: its bucket
        with self._lock:
            self._counts[i] += events
            self._sum += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """The histogram's family: cumulative buckets, count and sum."""
        with self._lock:
            counts, total_seconds = list(self._counts), self._sum
        buckets, running = [], 0
        for bound, n in zip((*self._bounds, float("inf")), counts, strict=True):
            running += n
            buckets.append((floatToGoString(bound), float(running)))  # type: ignore[no-untyped-call]  # as Histogram labels its buckets
        yield HistogramMetricFamily(
            self._name, self._documentation, buckets=buckets, sum_value=total_seconds
        )


class Metrics:
    """The worker's counters; hot-path label children are bound once and cached."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "loopguard_events", "Input events processed, by type.", ["type"], registry=r
        )
        self.detections = Counter(
            "loopguard_detections",
            "Loop verdicts and guard aborts, by detector, level and mode (enforce, observe).",
            ["detector", "level", "mode"],
            registry=r,
        )
        self.commands = Counter(
            "loopguard_commands", "Commands published, by command.", ["command"], registry=r
        )
        self.rejected = Counter(
            "loopguard_events_rejected",
            "Input messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.duplicates = Counter(
            "loopguard_duplicates",
            "Redelivered events ignored (seq not above the run's watermark for its topic).",
            registry=r,
        )
        self.runs_active = Gauge(
            "loopguard_runs_active", "Runs with state held by this worker.", registry=r
        )
        self.runs_cached = Gauge(
            "loopguard_runs_cached",
            "Runs of loopguard_runs_active whose live state is in memory (the others: table).",
            registry=r,
        )
        self.runs_packed = Gauge(
            "loopguard_runs_packed",
            "Runs of loopguard_runs_cached held packed (beyond LOOPGUARD_RUN_CACHE_HOT_RUNS).",
            registry=r,
        )
        self.policy_info = Gauge(
            "loopguard_policy_info",
            "1 for the policy version this worker decides with (config/policy.py: Policy.version).",
            ["version"],
            registry=r,
        )
        self.engine_info = Gauge(
            "loopguard_engine_info",
            "1 for the engine build this worker runs: python, or compiled (setup.py).",
            ["engine"],
            registry=r,
        )
        self.engine_info.labels(engine=engine_build()).set(1)
        # Fleet signals (docs/fleet.md): no signature or tool label, so cardinality stays fixed.
        self.fleet_firing = Gauge(
            "loopguard_fleet_signatures_firing",
            "Loop signatures firing in this worker's fleet partitions.",
            registry=r,
        )
        self.fleet_signals = Counter(
            "loopguard_fleet_signals",
            "fleet_signal messages published, by state (firing / resolved).",
            ["state"],
            registry=r,
        )
        self.fleet_dropped = Counter(
            "loopguard_fleet_dropped",
            "Fleet contributions not counted, by reason (late: window closed; full: the "
            "window's signature cap).",
            ["reason"],
            registry=r,
        )
        # Tool health (docs/fleet.md, "Tool health"): the tool label is bounded to the
        # TOOL_LABELS busiest tools of the last closed windows, the rest folded into "_other".
        self.fleet_tool_ratio = Gauge(
            "loopguard_fleet_tool_bad_ratio",
            "Share of the runs calling a tool with an error or no-progress repeat on it, in the "
            "last closed window of this worker's fleet partitions (top tools by runs; the rest "
            'as tool="_other").',
            ["tool"],
            registry=r,
        )
        self.fleet_tool_signals = Counter(
            "loopguard_fleet_tool_signals",
            "Tool-health fleet_signal messages published, by state (firing / resolved).",
            ["state"],
            registry=r,
        )
        self.fleet_tools_firing = Gauge(
            "loopguard_fleet_tools_firing",
            "Tools whose tool-health signal is firing in this worker's fleet partitions.",
            registry=r,
        )
        self._tool_labels: set[str] = set()
        # The live OTLP bridge (docs/audit.md): spans read and not turned into events.
        self.otlp_spans_ignored = Counter(
            "loopguard_otlp_spans_ignored",
            "OTLP spans the bridge read and did not decide, by reason (other_kind: not a tool "
            "call; duplicate: a span id seen before in its run, a Collector retry).",
            ["reason"],
            registry=r,
        )
        self.processing_seconds = PerEventHistogram(
            "loopguard_processing_seconds",
            "Processing time per input event (batch time divided by its size).",
            _PROCESSING_BUCKETS,
        )
        r.register(self.processing_seconds)
        stages = Histogram(
            "loopguard_verdict_stage_seconds",
            "Per batch that holds a verdict, the time in each stage of its oldest record: fetch "
            "(its producer timestamp to the return of the fetch that brought it: produce, "
            "broker, fetch), queue (to the batch's start: Faust's queue to the agent), engine "
            "(deciding the batch), send (handing its control batches to the producer), ack "
            "(to the broker's acknowledgement; at-least-once only).",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self._stages = [stages.labels(stage=s) for s in VERDICT_STAGES]
        self._events_by_type = {t: self.events.labels(type=t) for t in EVENT_TYPES}
        self._detections: dict[tuple[str, str, str], Counter] = {}
        self._commands: dict[str, Counter] = {}
        self._rejected: dict[str, Counter] = {}

    def set_policy(self, version: str) -> None:
        """Name the policy version in force (the only series of loopguard_policy_info)."""
        self.policy_info.clear()
        self.policy_info.labels(version=version).set(1)

    def count_events(self, event_type: str, n: int = 1) -> None:
        """Count `n` processed events of one type (the type was validated upstream)."""
        child = self._events_by_type.get(event_type)
        if child is None:
            child = self._events_by_type[event_type] = self.events.labels(type=event_type)
        child.inc(n)

    def count_detection(self, detector: str, level: str, mode: str = "enforce") -> None:
        """Count one verdict or guard abort, enforced or observed (shadow mode)."""
        key = (detector, level, mode)
        child = self._detections.get(key)
        if child is None:
            child = self._detections[key] = self.detections.labels(
                detector=detector, level=level, mode=mode
            )
        child.inc()

    def count_command(self, command: str) -> None:
        """Count one published command."""
        child = self._commands.get(command)
        if child is None:
            child = self._commands[command] = self.commands.labels(command=command)
        child.inc()

    def count_rejected(self, reason: str) -> None:
        """Count one dead-lettered message."""
        child = self._rejected.get(reason)
        if child is None:
            child = self._rejected[reason] = self.rejected.labels(reason=reason)
        child.inc()

    def count_otlp_ignored(self, other_kind: int, duplicate: int) -> None:
        """Count the spans an OTLP payload held that the bridge did not decide."""
        if other_kind:
            self.otlp_spans_ignored.labels(reason="other_kind").inc(other_kind)
        if duplicate:
            self.otlp_spans_ignored.labels(reason="duplicate").inc(duplicate)

    def observe_verdict_batch(self, fetch: float, queue: float, engine: float, send: float) -> None:
        """Time the first stages of a batch that holds a verdict (seconds each)."""
        stages = self._stages
        stages[0].observe(fetch)
        stages[1].observe(queue)
        stages[2].observe(engine)
        stages[3].observe(send)

    def observe_verdict_ack(self, seconds: float) -> None:
        """Time a verdict batch's wait for the broker's acknowledgement."""
        self._stages[4].observe(seconds)

    def observe_batch(self, seconds: float, events: int) -> None:
        """Record a batch's time as `events` observations of its per-event mean."""
        self.processing_seconds.observe(seconds, events)

    def set_tool_ratios(self, ratios: dict[str, float]) -> None:
        """Show these tools' bad ratios (already folded to the top tools and `_other`) and
        remove the tools shown before that are not among them."""
        gauge = self.fleet_tool_ratio
        for tool in self._tool_labels - ratios.keys():
            gauge.remove(tool)
        for tool, ratio in ratios.items():
            gauge.labels(tool=tool).set(ratio)
        self._tool_labels = set(ratios)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
