"""Workload E of docs/benchmarks.md: the engine alone (no broker, no JSON decoding).

    python bench/engine.py [--quick] [--runs 3]

Prints one JSON line per mode with the median calls/s of `--runs` runs after one warm-up,
and the ratio to OpenClaw's Node.js baseline (97k calls/s, the middle of docs/benchmarks.md's
89–105k range, measured on this machine class; it cannot be re-measured here without OpenClaw).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopguard_fleet.detectors import (
    Outcome,
    RunState,
    Thresholds,
    ToolCall,
    detect,
    record_call,
    record_outcome,
)

NODE_BASELINE = 97_000.0
PAD = "x" * 200
BURST_KINDS = [0, 4, 6, 8, 9]


def kind(mode: str, i: int) -> int:
    """The call kind r of docs/benchmarks.md for call i in a mode."""
    if mode == "unique":
        return 0
    if mode == "mixed":
        return i % 10
    if mode == "identical":
        return 9
    return BURST_KINDS[((i % 1000) // 25) % 5]


def make_call(r: int, i: int) -> tuple[str, object, object]:
    """(tool, args, result) of call i of kind r."""
    if r <= 3:
        return "read", {"path": f"/f/{i}.txt"}, _res(f"c{i} {PAD}", {"ok": True})
    if r <= 5:
        return (
            "process",
            {"action": "poll", "sessionId": f"s{i % 3}"},
            _res(f"(no new output) {PAD}", {"status": "running", "aggregated": "steady"}),
        )
    if r <= 7:
        if i % 2:
            return "read", {"path": "/a.txt"}, _res(f"A {PAD}", {"ok": True})
        return "list", {"dir": "/w"}, _res(f"L {PAD}", {"ok": True})
    if r == 8:
        details = {
            "status": "completed",
            "exitCode": 0,
            "durationMs": i,
            "aggregated": f"out {PAD}",
        }
        return "exec", {"command": "ls -la"}, _res(f"out {PAD}", details)
    return "read", {"path": "/same.txt"}, _res(f"same {PAD}", {"ok": True})


def _res(text: str, details: dict[str, object]) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "details": details}


def build(mode: str, n: int) -> list[tuple[str, object, object, str]]:
    """All calls of a mode, built before the clock starts."""
    out = []
    for i in range(n):
        tool, args, result = make_call(kind(mode, i), i)
        out.append((tool, args, result, f"call-{i}"))
    return out


def run_once(calls: list, th: Thresholds) -> tuple[float, dict[str, int]]:
    """One timed pass: detect, then record call and outcome unless blocked."""
    counts = {"none": 0, "warning": 0, "critical": 0}
    state = RunState()
    t0 = time.perf_counter()
    for i, (tool, args, result, tcid) in enumerate(calls):
        if i % 1000 == 0:
            state = RunState()
        call = ToolCall.of(tool, args, tcid)  # type: ignore[arg-type]
        v = detect(state, call, th)
        if v is None:
            counts["none"] += 1
        else:
            counts[v.level] += 1
            if v.level == "critical":
                continue
        record_call(state, call, th)
        record_outcome(state, call, Outcome.result(result), th)  # type: ignore[arg-type]
    return time.perf_counter() - t0, counts


def measure(mode: str, n: int, runs: int, th: Thresholds) -> dict[str, object]:
    """Median calls/s of `runs` timed runs after one warm-up."""
    calls = build(mode, n)
    # The prebuilt calls are harness data, not engine state: keep the cyclic GC from
    # rescanning 100,000 long-lived dicts on every collection while the clock runs.
    gc.collect()
    gc.freeze()
    run_once(calls, th)
    rates, counts = [], {}
    for _ in range(runs):
        dt, counts = run_once(calls, th)
        rates.append(n / dt)
    gc.unfreeze()
    med = statistics.median(rates)
    return {
        "workload": "E",
        "mode": mode,
        "enabled": th.enabled,
        "calls_per_s": round(med),
        "min": round(min(rates)),
        "max": round(max(rates)),
        "runs": [round(r) for r in rates],
        "verdicts": counts,
        "baseline": "openclaw-node20",
        "baseline_calls_per_s": NODE_BASELINE,
        "ratio": round(med / NODE_BASELINE, 3),
    }


def main() -> None:
    """Run every mode and print one JSON line each."""
    import json

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="10,000 calls instead of 100,000")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    n = 10_000 if a.quick else 100_000
    on = Thresholds(enabled=True)
    for mode in ("unique", "mixed", "identical", "bursts"):
        print(json.dumps(measure(mode, n, a.runs, on)), flush=True)
    print(json.dumps(measure("mixed", n, a.runs, Thresholds(enabled=False))), flush=True)


if __name__ == "__main__":
    main()
