"""Tool health: each tool's share of runs failing or stuck on it, per hopping event-time window,
and the signals it raises (docs/fleet.md, "Tool health").

A run **uses** a tool in a window when it calls it there; it is **bad** on the tool when one of
its calls there is a fleet contribution (detectors/fleet/contribution.py): a failure retried
(an *error*) or a result returned `QUIET_STREAK` times in a row and asked again (*no
progress*). So a healthy poll or a shared README read several times is used, never bad.

The windows are those of the signatures (`FleetWindows`: `windowSeconds` long, one every half
window, each use stored once in its half-window bucket), but a tool is judged only when a
window **closes** (the watermark passes its end): its ratio (bad runs / runs) is final then,
whatever order its uses arrived in. A tool **fires** at the end of a window with at least
`minRuns` runs and a ratio of at least `errorRatio`, and **resolves** at the end of the first
later window that does not meet it (none at all included). Bounded: at most `MAX_TOOLS` tools
and `MAX_TOOL_RUNS` runs per tool per bucket; past either, uses are dropped and counted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from loopguard_fleet.detectors.fleet.contribution import Observation
from loopguard_fleet.detectors.outcome_facts import retool_2026_9
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.values import Thresholds, ToolCall

__all__ = [
    "MAX_TOOLS",
    "MAX_TOOL_RUNS",
    "OTHER_TOOLS",
    "TOOL_LABELS",
    "TOOL_STATE_VERSION",
    "ToolChange",
    "ToolRatio",
    "ToolUse",
    "ToolWindows",
    "tool_signal_id",
    "tool_use_of",
    "top_tools",
]

#: Distinct tools per half-window bucket before a new one is dropped (and counted).
MAX_TOOLS: Final = 1_000
#: Distinct runs per tool per bucket before a new one is dropped (and counted).
MAX_TOOL_RUNS: Final = 20_000
#: Version of `ToolWindows.state()`: a state of another version is not restored.
TOOL_STATE_VERSION: Final = 1
#: Tools the metrics name (the most runs in the last closed window); the rest are folded into
#: `OTHER_TOOLS`, so a fleet with thousands of tools adds at most TOOL_LABELS + 1 series.
TOOL_LABELS: Final = 20
OTHER_TOOLS: Final = "_other"
#: Run ids a tool signal names as samples: the smallest bad ones.
SAMPLE_RUNS: Final = 3

Bad = Literal["error", "no_progress"]


class ToolUse(NamedTuple):
    """One run calling a tool at an event time; `bad`: the call was a contribution, and how.
    (A named tuple: one is built per tool_call, and a frozen dataclass builds slower.)"""

    tool: str
    run_id: str
    agent_id: str | None
    ts_ms: int
    bad: Bad | None = None


@dataclass(frozen=True, slots=True)
class ToolChange:
    """A tool that started or stopped failing for the fleet, with its window's counts."""

    state: Literal["firing", "resolved"]
    signal_id: str
    tool: str
    at_ms: int  # the end of the window judged
    window_start_ms: int
    window_end_ms: int
    runs: int  # distinct runs that called the tool
    bad_runs: int  # of them, runs with an error or no-progress repeat
    error_runs: int
    no_progress_runs: int
    agents: int  # distinct agents of the bad runs
    ratio: float  # bad_runs / runs, rounded to 4 digits (0.0 without runs)
    first_seen_ms: int | None  # the first and last bad use in the window
    last_seen_ms: int | None
    sample_run_ids: tuple[str, ...]


def tool_signal_id(tool: str, fired_at_ms: int) -> str:
    """Stable id of the signal a tool raised at an event time (32 hex digits)."""
    raw = f"fleet_tool_signal\x1f{tool}\x1f{fired_at_ms}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def tool_use_of(
    call: ToolCall,
    th: Thresholds,
    run_id: str,
    agent_id: str | None,
    ts_ms: int,
    obs: Observation | None,
) -> ToolUse:
    """A tool_call's use of its tool (named as the profile names it), bad when the call
    contributed `obs`: an error when its outcome is a failure, else no progress."""
    if obs is not None:
        bad: Bad = "error" if obs.is_failure else "no_progress"
        return ToolUse(obs.tool, run_id, agent_id, ts_ms, bad)
    tool = retool_2026_9(call.tool) if th.semantics == OPENCLAW_2026_9 else call.tool
    return ToolUse(tool, run_id, agent_id, ts_ms)


@dataclass(slots=True)
class _Bucket:
    """One tool's uses in one half-window bucket."""

    runs: set[str] = field(default_factory=set)
    errors: set[str] = field(default_factory=set)
    stuck: set[str] = field(default_factory=set)  # no progress
    agents: set[str] = field(default_factory=set)  # of bad uses
    first_ms: int | None = None  # of bad uses
    last_ms: int | None = None


def _bucket_state(tool: str, b: _Bucket) -> list[object]:
    """One tool's bucket as `ToolWindows.state` lists it (sorted: the same counts, the same
    bytes)."""
    ids = [sorted(b.runs), sorted(b.errors), sorted(b.stuck), sorted(b.agents)]
    return [tool, *ids, b.first_ms, b.last_ms]


@dataclass(frozen=True, slots=True)
class ToolRatio:
    """A tool's counts in one closed window (also what the metrics show)."""

    runs: int
    bad_runs: int
    error_runs: int
    no_progress_runs: int
    ratio: float


class ToolWindows:
    """Tool health of one fleet partition: live buckets, firing tools, the last closed window's
    ratios (`latest`, for the metrics)."""

    def __init__(
        self,
        window_seconds: int,
        min_runs: int,
        error_ratio: float,
        max_tools: int = MAX_TOOLS,
        max_runs: int = MAX_TOOL_RUNS,
    ) -> None:
        self.window_ms = window_seconds * 1000
        self.hop_ms = self.window_ms // 2
        self.min_runs = min_runs
        self.error_ratio = error_ratio
        self.max_tools = max_tools
        self.max_runs = max_runs
        self.buckets: dict[int, dict[str, _Bucket]] = {}  # bucket start → tool → uses
        self.firing: dict[str, str] = {}  # tool → its signal id
        self.judged_ms: int | None = None  # start of the last window judged
        self.latest: dict[str, ToolRatio] = {}  # the last closed window's tools
        self.dropped_late = 0
        self.dropped_full = 0

    def observe(self, use: ToolUse, watermark_ms: int | None) -> bool:
        """Count one use; False when dropped (both its windows closed, or a bucket full)."""
        bucket = use.ts_ms - use.ts_ms % self.hop_ms
        if watermark_ms is not None and bucket + self.window_ms <= watermark_ms:
            self.dropped_late += 1
            return False
        if self.judged_ms is not None and bucket <= self.judged_ms:
            self.dropped_late += 1  # its first window was judged already
            return False
        tools = self.buckets.setdefault(bucket, {})
        b = tools.get(use.tool)
        if b is None:
            if len(tools) >= self.max_tools:
                self.dropped_full += 1
                return False
            b = tools[use.tool] = _Bucket()
        if use.run_id not in b.runs:
            if len(b.runs) >= self.max_runs:
                self.dropped_full += 1
                return False
            b.runs.add(use.run_id)
        if use.bad is not None:
            (b.errors if use.bad == "error" else b.stuck).add(use.run_id)
            if use.agent_id is not None:
                b.agents.add(use.agent_id)
            b.first_ms = use.ts_ms if b.first_ms is None else min(b.first_ms, use.ts_ms)
            b.last_ms = use.ts_ms if b.last_ms is None else max(b.last_ms, use.ts_ms)
        return True

    def resize(self, window_seconds: int, watermark_ms: int | None) -> None:
        """Judge windows of another length from `watermark_ms` on: the counts start afresh;
        a firing tool stays firing until a window starting after it is judged healthy."""
        self.window_ms = window_seconds * 1000
        self.hop_ms = self.window_ms // 2
        self.buckets = {}
        if watermark_ms is not None:
            self.judged_ms = watermark_ms - watermark_ms % self.hop_ms

    def advance(self, watermark_ms: int) -> list[ToolChange]:
        """Judge every window the watermark closed since the last call, in order."""
        out: list[ToolChange] = []
        while True:
            start = self._next_start()
            if start is None:
                judged = self.judged_ms
                if judged is not None and judged + self.hop_ms + self.window_ms <= watermark_ms:
                    self.latest = {}  # the windows since closed held no use at all
                break
            if start + self.window_ms > watermark_ms:
                break
            self._judge(start, out)
            self.judged_ms = start
            self.buckets.pop(start, None)  # both its windows (start - hop, start) are judged
        return out

    def _next_start(self) -> int | None:
        """The start of the next window to judge: the one after the last judged while a tool
        fires (its resolution is due), else the first with a live bucket (None: nothing)."""
        after = None if self.judged_ms is None else self.judged_ms + self.hop_ms
        if self.firing and after is not None:
            return after
        if not self.buckets:
            return None
        first = min(self.buckets) - self.hop_ms
        return first if after is None else max(after, first)

    def _judge(self, start: int, out: list[ToolChange]) -> None:
        first = self.buckets.get(start, {})
        second = self.buckets.get(start + self.hop_ms, {})
        latest: dict[str, ToolRatio] = {}
        for tool in sorted(set(first) | set(second) | set(self.firing)):
            parts = [b for b in (first.get(tool), second.get(tool)) if b is not None]
            runs: set[str] = set().union(*(b.runs for b in parts))
            errors: set[str] = set().union(*(b.errors for b in parts))
            stuck: set[str] = set().union(*(b.stuck for b in parts)) - errors
            bad = errors | stuck
            ratio = round(len(bad) / len(runs), 4) if runs else 0.0
            if runs:
                latest[tool] = ToolRatio(len(runs), len(bad), len(errors), len(stuck), ratio)
            unhealthy = len(runs) >= self.min_runs and ratio >= self.error_ratio
            if unhealthy == (tool in self.firing):
                continue  # still healthy, or still firing
            end = start + self.window_ms
            if unhealthy:
                sid = tool_signal_id(tool, end)
                self.firing[tool] = sid
                state: Literal["firing", "resolved"] = "firing"
            else:
                sid = self.firing.pop(tool)
                state = "resolved"
            firsts = [b.first_ms for b in parts if b.first_ms is not None]
            lasts = [b.last_ms for b in parts if b.last_ms is not None]
            agents: set[str] = set().union(*(b.agents for b in parts))
            change = ToolChange(
                state, sid, tool, end, start, end, len(runs), len(bad), len(errors),
                len(stuck), len(agents), ratio, min(firsts, default=None),
                max(lasts, default=None), tuple(sorted(bad)[:SAMPLE_RUNS]),
            )  # fmt: skip
            out.append(change)
        self.latest = latest

    def state(self) -> dict[str, Any]:
        """Everything the counts and signals depend on, JSON-ready (`restore` reads it)."""
        return {
            "v": TOOL_STATE_VERSION,
            "window_ms": self.window_ms,
            "min_runs": self.min_runs,
            "ratio": self.error_ratio,
            "judged": self.judged_ms,
            "dropped": [self.dropped_late, self.dropped_full],
            "buckets": [
                [
                    start,
                    [_bucket_state(tool, b) for tool, b in sorted(tools.items())],
                ]
                for start, tools in sorted(self.buckets.items())
            ],
            "firing": sorted([tool, sid] for tool, sid in self.firing.items()),
            "latest": [
                [tool, r.runs, r.bad_runs, r.error_runs, r.no_progress_runs, r.ratio]
                for tool, r in sorted(self.latest.items())
            ],
        }

    def restore(self, state: dict[str, Any]) -> bool:
        """Take what `state()` gave; False (nothing changed) when it was kept with other
        windows, `minRuns`, `errorRatio` or version."""
        kept = (state.get("v"), state.get("window_ms"), state.get("min_runs"), state.get("ratio"))
        if kept != (TOOL_STATE_VERSION, self.window_ms, self.min_runs, self.error_ratio):
            return False
        self.judged_ms = state["judged"]
        self.dropped_late, self.dropped_full = state["dropped"]
        self.buckets = {
            start: {
                tool: _Bucket(set(runs), set(errors), set(stuck), set(agents), first, last)
                for tool, runs, errors, stuck, agents, first, last in tools
            }
            for start, tools in state["buckets"]
        }
        self.firing = {tool: sid for tool, sid in state["firing"]}
        self.latest = {tool: ToolRatio(*counts) for tool, *counts in state["latest"]}
        return True


def top_tools(ratios: dict[str, ToolRatio], k: int = TOOL_LABELS) -> dict[str, float]:
    """Each of the `k` tools with the most runs and its bad ratio; the others' runs together
    as `OTHER_TOOLS` (their bad runs over their runs), when there are others."""
    ranked = sorted(ratios.items(), key=lambda item: (-item[1].runs, item[0]))
    out = {tool: r.ratio for tool, r in ranked[:k] if tool != OTHER_TOOLS}
    rest = [r for tool, r in ranked if tool not in out]
    runs = sum(r.runs for r in rest)
    if runs:
        out[OTHER_TOOLS] = round(sum(r.bad_runs for r in rest) / runs, 4)
    return out
