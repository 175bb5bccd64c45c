"""unknown_tool_repeat: a model keeps calling a tool that does not exist.

Rule 1 of docs/semantics.md §6.

Streak = newest consecutive records of the current tool whose errors name the same missing
tool. Streak ≥ unknownToolThreshold → critical, whatever the detector flags say.

    exec → "Tool exec not found" ×10 (args change every time) → call 11: blocked, count 10
"""

from __future__ import annotations

from loopguard_fleet.detectors.values import Record, Thresholds, ToolCall, Verdict

DETECTOR = "unknown_tool_repeat"


def unknown_streak(history: list[Record], tool: str) -> tuple[int, str | None]:
    """Consecutive newest records of `tool` failing with one unknown-tool name."""
    streak = 0
    name: str | None = None
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        unk = rec.unknown_tool_name
        if not unk or rec.tool != tool:
            break
        if name is None:
            name = unk
        elif unk != name:
            break
        streak += 1
    return streak, name


def check(history: list[Record], call: ToolCall, th: Thresholds) -> Verdict | None:
    """Critical when the unknown-tool streak reaches the threshold."""
    if not history or not history[-1].unknown_tool_name:
        return None
    count, name = unknown_streak(history, call.tool)
    if count < th.unknown_tool_threshold:
        return None
    shown = name or call.tool
    return Verdict(
        "critical",
        DETECTOR,
        count,
        f"CRITICAL: attempted unavailable tool {shown} {count} times. "
        "Stop retrying that missing tool and answer without it.",
        f"unknown-tool:{call.tool}:{name or 'unknown'}",
    )
