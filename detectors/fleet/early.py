"""Fleet-informed early warning (docs/fleet.md, "Early warning"): while a signature fires, a
run repeating the call it names is warned or blocked at its `earlyAtCount`th repeat.

A pure rule over the run's history, the policy's fleet settings and the evidence of the
firing signals the caller has applied: it never reads a clock, and with fleet signals off it
returns the engine's verdict unchanged, so default verdicts stay OpenClaw's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from loopguard_fleet.detectors.engine import MAX_BUCKET_KEYS, bucket_key
from loopguard_fleet.detectors.fleet.contribution import Progress, no_progress
from loopguard_fleet.detectors.fleet.settings import FleetSettings
from loopguard_fleet.detectors.fleet.signature import loop_signature
from loopguard_fleet.detectors.records import Record
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.values import Thresholds, ToolCall, Verdict

__all__ = [
    "DETECTOR",
    "FleetEvidence",
    "FleetView",
    "early_verdict",
    "evidence_text",
    "publish_early",
]

DETECTOR: Final = "fleet_signal"


@dataclass(frozen=True, slots=True)
class FleetEvidence:
    """What a firing signal says about its signature: the fleet evidence an early verdict names."""

    signal_id: str
    runs: int
    agents: int
    window_seconds: int
    is_failure: bool


class FleetView(NamedTuple):
    """What the engine reads of the fleet for one event: the policy's fleet settings, the
    signals firing as the run's partition applied them (signature → evidence), and the
    event's event time (the only place the engine sees one). A named tuple: one is built per
    tool_call."""

    settings: FleetSettings
    firing: Mapping[str, FleetEvidence]
    ts_ms: int


def publish_early(state: RunState, warning_key: str) -> bool:
    """Whether an early warning is published: the first one under its key in the run (the
    bucket rule of docs/semantics.md §7.3 would hold every warning below 10 back)."""
    key = bucket_key(warning_key)
    buckets = state.buckets
    if key in buckets:
        return False
    if len(buckets) >= MAX_BUCKET_KEYS:
        del buckets[next(iter(buckets))]
    buckets[key] = 1
    return True


def _span(seconds: int) -> str:
    if seconds % 60 == 0:
        minutes = seconds // 60
        return "minute" if minutes == 1 else f"{minutes} minutes"
    return "second" if seconds == 1 else f"{seconds} seconds"


def evidence_text(tool: str, ev: FleetEvidence) -> str:
    """`read failing the same way in 214 runs across 31 agents in the last 5 minutes`."""
    how = "failing the same way" if ev.is_failure else "returning the same result"
    runs = "1 run" if ev.runs == 1 else f"{ev.runs} runs"
    agents = "1 agent" if ev.agents == 1 else f"{ev.agents} agents"
    return f"{tool} {how} in {runs} across {agents} in the last {_span(ev.window_seconds)}"


def early_verdict(
    history: list[Record],
    call: ToolCall,
    th: Thresholds,
    fleet: FleetSettings,
    firing: Mapping[str, FleetEvidence],
    verdict: Verdict | None,
    progress: Progress | None = None,
) -> Verdict | None:
    """The verdict on a call before it runs, given the engine's `verdict` on it: the early
    one when its signature is firing and the run's no-progress streak on it has reached
    `earlyAtCount`, unless the engine's is at least as strong (`progress`: `no_progress`'s
    answer, when the caller has it)."""
    if not fleet.enabled or not firing or not th.enabled:
        return verdict
    if verdict is not None and (verdict.level == "critical" or fleet.early_action == "warn"):
        return verdict
    streak, outcome = no_progress(history, call, th) if progress is None else progress
    if streak < fleet.early_at_count or outcome is None:
        return verdict
    signature = loop_signature(call.tool, call.args_hash, outcome)
    evidence = firing.get(signature)
    if evidence is None:
        return verdict
    text = evidence_text(call.tool, evidence)
    repeated = f"You have repeated this call {streak} times with the same outcome"
    key = f"fleet:{evidence.signal_id}:{signature}"
    if fleet.early_action == "block":
        message = (
            f"CRITICAL: {text}. {repeated}. "
            "Session execution blocked: stop retrying and report the task as failed."
        )
        return Verdict("critical", DETECTOR, streak, message, key)
    message = f"WARNING: {text}. {repeated}: stop retrying and report the task as failed."
    return Verdict("warning", DETECTOR, streak, message, key)
