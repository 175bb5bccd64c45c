"""argument_churn (openclaw-2026.9 decision order rule 8): new arguments, same dead end.

Walk the newest records of the current tool (another tool ends the walk; unhashed records
are skipped; a record that is not a no-progress outcome ends it). Per args hash keep its
first outcome and a count; an args hash showing a second outcome ends the walk. Variants seen
at least 3 times are stable. Churn when at least two variants are stable, every counted
record belongs to one, they all share one outcome, and the current call's variant is stable:
count = the records counted, variants = the stable ones. Count ≥ warningThreshold → warning
(never critical), and rules 4 and 6 carry `livenessSignal: "argument_churn"`.

    write /a, /b, /c → each "unchanged" (details.changed false) ×4 → write /a: warning,
    count 12, 3 variants
"""

from __future__ import annotations

from collections.abc import Sequence

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.streaks import HistoryRecord, as_records
from loopguard_fleet.detectors.values import Thresholds, ToolCall, Verdict

DETECTOR = "argument_churn"
LIVENESS_SIGNAL = "argument_churn"
MIN_STABLE_CALLS = 3  # per variant; fixed in OpenClaw 2026.9


def churn(history: Sequence[HistoryRecord], tool: str, args_hash: str) -> tuple[int, int]:
    """(count, stable variants) of argument churn for the current call; (0, 0) when none."""
    records = as_records(history)
    outcomes: dict[str, tuple[HashKey, int]] = {}  # args hash → (first outcome key, count)
    for i in range(len(records) - 1, -1, -1):
        rec = records[i]
        if rec.tool != tool:
            break
        rhash = rec.result_key
        if not rhash:
            continue
        if not rec.no_progress:
            break
        seen = outcomes.get(rec.args_hash)
        if seen is not None and seen[0] != rhash:
            break
        outcomes[rec.args_hash] = (rhash, (seen[1] if seen else 0) + 1)
    if not outcomes:
        return 0, 0  # the common case: the newest record of this tool shows progress
    total = sum(n for _, n in outcomes.values())
    stable = [(h, n) for h, n in outcomes.values() if n >= MIN_STABLE_CALLS]
    current = outcomes.get(args_hash)
    if (
        len(stable) > 1
        and sum(n for _, n in stable) == total
        and len({h for h, _ in stable}) == 1
        and current is not None
        and current[1] >= MIN_STABLE_CALLS
    ):
        return total, len(stable)
    return 0, 0


def check(call: ToolCall, count: int, variants: int, th: Thresholds) -> Verdict | None:
    """A warning when the churn count reaches the warning threshold."""
    if count < th.warning_threshold:
        return None
    return Verdict(
        "warning",
        DETECTOR,
        count,
        f"WARNING: {call.tool} has cycled through {variants} repeated argument patterns with "
        f"the same stable outcome {count} times. Continued churn is treated as stalled run "
        "activity, but this tool call remains allowed.",
        f"argument-churn:{call.tool}",
    )
