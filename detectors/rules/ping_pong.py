"""ping_pong (docs/semantics.md §6 rules 5–6): two calls alternating A, B, A, B, …

Count = length of the alternating tail + 1, when the current call continues it. Count ≥
criticalThreshold with no-progress evidence (every tail record has an outcome and each side's
outcomes are all equal) → critical; count ≥ warningThreshold → warning.

    read /a, list /w, read /a, … (stable results) → call 10 warns (10); call 20 blocked (20)
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.values import Record, Thresholds, ToolCall, Verdict

DETECTOR = "ping_pong"

Alternation = tuple[int, Record | None, bool]  # `streak`'s (count, newest record, evidence)


def streak(history: list[Record], args_hash: str) -> Alternation:
    """(count, newest record, no-progress evidence) for the current call's args hash."""
    n = len(history)
    if n < 2:
        return 0, None, False
    last = history[-1]
    a = last.args_hash
    if args_hash == a:
        # The same call again (a repeat, not an alternation): `other` below always differs
        # from `a`, so the walk could only end in no count. Looping runs skip it.
        return 0, None, False
    other: str | None = None
    for i in range(n - 2, -1, -1):
        h = history[i].args_hash
        if h != a:
            other = h
            break
    if other is None or args_hash != other:
        return 0, None, False
    tail = 0
    for i in range(n - 1, -1, -1):
        if history[i].args_hash != (a if tail % 2 == 0 else other):
            break
        tail += 1
    if tail < 2:
        return 0, None, False
    hash_a: HashKey | None = None
    hash_b: HashKey | None = None
    evidence = True
    for i in range(n - tail, n):
        rec = history[i]
        rh = rec.result_key
        if not rh:
            evidence = False
            break
        if rec.args_hash == a:
            if hash_a is None:
                hash_a = rh
            elif rh != hash_a:
                evidence = False
                break
        elif hash_b is None:
            hash_b = rh
        elif rh != hash_b:
            evidence = False
            break
    return tail + 1, last, evidence and hash_a is not None and hash_b is not None


def check(
    history: list[Record],
    call: ToolCall,
    th: Thresholds,
    memo: list[Alternation] | None = None,
) -> Verdict | None:
    """Critical or warning for an alternating pair of calls. `memo`: `streak`'s answer for
    this history and call once computed (kept in it), for deciding under two policies."""
    if not th.ping_pong:
        return None
    if memo:
        count, last, evidence = memo[0]
    else:
        count, last, evidence = streak(history, call.args_hash)
        if memo is not None:
            memo.append((count, last, evidence))
    if count < th.warning_threshold or last is None:
        return None
    key = "pingpong:" + "|".join(sorted((call.args_hash, last.args_hash), key=_utf16))
    if count >= th.critical_threshold and evidence:
        return Verdict(
            "critical",
            DETECTOR,
            count,
            f"CRITICAL: You are alternating between repeated tool-call patterns ({count} "
            "consecutive calls) with no progress. This appears to be a stuck ping-pong loop. "
            "Session execution blocked to prevent resource waste.",
            key,
            last.tool,
        )
    return Verdict(
        "warning",
        DETECTOR,
        count,
        f"WARNING: You are alternating between repeated tool-call patterns ({count} "
        "consecutive calls). This looks like a ping-pong loop; stop retrying and report the "
        "task as failed.",
        key,
        last.tool,
    )


def _utf16(s: str) -> bytes:
    # JavaScript's default sort compares UTF-16 code units, not code points.
    return s.encode("utf-16-be", "surrogatepass")
