"""Workload E of docs/benchmarks.md: the engine alone (no broker, no JSON decoding), against
OpenClaw's published detector in the same invocation.

    python bench/engine.py [--quick] [--runs 3]

For each mode the same prebuilt calls go through three engines, alternating pass by pass after
one warm-up each: LoopGuard's configurable profile, LoopGuard's openclaw-2026.9 profile, and
OpenClaw's own module (npm openclaw as tests/differential pins it, run by bench/openclaw_engine.mjs
with its logger silenced, driven as OpenClaw's runner drives it). Prints one JSON line per mode:
each side's median calls/s of `--runs` passes and LoopGuard's ratio to the module.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.openclaw_node import openclaw_node
from bench.python_build import python_build
from loopguard_fleet.detectors import (
    OPENCLAW_2026_9,
    Outcome,
    RunState,
    Thresholds,
    ToolCall,
    detect,
    engine_build,
    record_call,
    record_outcome,
)
from loopguard_fleet.detectors.history_2026_9 import record_veto

REPO = Path(__file__).resolve().parents[1]
OPENCLAW_ENGINE = REPO / "bench" / "openclaw_engine.mjs"
PAD = "x" * 200
BURST_KINDS = [0, 4, 6, 8, 9]
PAGE_KIND = 10
# A fetched page as OpenClaw wraps it (markup, quotes, `<`), ~20 KB: `pages` calls carry one
# each, in new markers every time, so the 2026.9 profile canonicalises every outcome's markers.
PAGE = "".join(
    f'<div class="row" id="r{k}"><a href="/item/{k}">Item {k}</a> <span>"quoted" a<b</span></div>\n'
    for k in range(250)
)
PAGE_URLS = 3  # the same pages again and again: a fetch loop
PAGE_CALLS_DIVISOR = 50  # `pages` runs n / 50 calls: each holds ~20 KB where the others hold ~0.3


def kind(mode: str, i: int) -> int:
    """The call kind r of docs/benchmarks.md for call i in a mode."""
    if mode == "unique":
        return 0
    if mode == "mixed":
        return i % 10
    if mode == "identical":
        return 9
    if mode == "pages":
        return PAGE_KIND
    return BURST_KINDS[((i % 1000) // 25) % 5]


def make_call(r: int, i: int) -> tuple[str, object, object]:
    """(tool, args, result) of call i of kind r."""
    if r == PAGE_KIND:
        nonce = f"{i:016x}"
        text = (
            f'<<<EXTERNAL_UNTRUSTED_CONTENT id="{nonce}">>>{PAGE}'
            f'<<<END_EXTERNAL_UNTRUSTED_CONTENT id="{nonce}">>>'
        )
        url = f"https://example.com/{i % PAGE_URLS}"
        return "web_fetch", {"url": url}, _res(text, {"status": 200})
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
    """One timed pass as OpenClaw's runner drives a detector: detect, then record the call and
    its outcome; a blocked call does not run (the 2026.9 profile records its veto)."""
    counts = {"none": 0, "warning": 0, "critical": 0}
    veto = th.semantics == OPENCLAW_2026_9
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
                if veto:
                    record_veto(state, call, th)
                continue
        record_call(state, call, th)
        record_outcome(state, call, Outcome.result(result), th)  # type: ignore[arg-type]
    return time.perf_counter() - t0, counts


class OpenClawEngine:
    """OpenClaw's published detector in a Node process of its own, one timed pass per request."""

    def __init__(self, calls: list, enabled: bool) -> None:
        self._proc = subprocess.Popen(
            [openclaw_node()[0], str(OPENCLAW_ENGINE)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"calls": calls, "enabled": enabled}) + "\n")

    def run_once(self) -> tuple[float, dict[str, int]]:
        """One timed pass over the calls: (seconds, verdict counts)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("bench/openclaw_engine.mjs exited (make bench-deps installs it)")
        answer = json.loads(line)
        return float(answer["seconds"]), dict(answer["verdicts"])

    def close(self) -> None:
        """End the Node process (ours, by its pipe and PID)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._proc.stdout.close()


def measure(mode: str, n: int, runs: int, enabled: bool) -> dict[str, object]:
    """Median calls/s of each side over `runs` alternating passes after one warm-up each."""
    calls = build(mode, n)
    sides: dict[str, Callable[[], tuple[float, dict[str, int]]]] = {
        "configurable": lambda: run_once(calls, Thresholds(enabled=enabled)),
        "openclaw-2026.9": lambda: run_once(
            calls, Thresholds(enabled=enabled, semantics=OPENCLAW_2026_9)
        ),
    }
    openclaw = OpenClawEngine(calls, enabled)
    sides["openclaw-module"] = openclaw.run_once
    # The prebuilt calls are harness data, not engine state: keep the cyclic GC from
    # rescanning 100,000 long-lived dicts on every collection while the clock runs.
    gc.collect()
    gc.freeze()
    try:
        for side in sides.values():
            side()
        rates: dict[str, list[float]] = {name: [] for name in sides}
        counts: dict[str, dict[str, int]] = {}
        for _ in range(runs):
            for name, side in sides.items():
                dt, counts[name] = side()
                rates[name].append(n / dt)
    finally:
        gc.unfreeze()
        openclaw.close()
    med = {name: statistics.median(r) for name, r in rates.items()}
    module = med["openclaw-module"]
    return {
        "workload": "E",
        "engine": engine_build(),  # "compiled" with PYTHONPATH=build/compiled (make compiled)
        "python": python_build(),  # the interpreter LoopGuard ran on (python_build.py)
        "openclaw_node": openclaw_node()[1],  # the Node the module ran on (openclaw_node.py)
        "mode": mode,
        "enabled": enabled,
        "calls_per_s": {name: round(m) for name, m in med.items()},
        "runs": {name: [round(x) for x in r] for name, r in rates.items()},
        "verdicts": counts,
        # The same calls must get the same verdicts from the profile that models the module.
        "verdicts_agree": counts["openclaw-2026.9"] == counts["openclaw-module"],
        "ratio_to_openclaw_module": {
            name: round(m / module, 3) for name, m in med.items() if name != "openclaw-module"
        },
    }


def main() -> None:
    """Run every mode and print one JSON line each."""
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="10,000 calls instead of 100,000")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    n = 10_000 if a.quick else 100_000
    for mode in ("unique", "mixed", "identical", "bursts"):
        print(json.dumps(measure(mode, n, a.runs, True)), flush=True)
    print(json.dumps(measure("pages", n // PAGE_CALLS_DIVISOR, a.runs, True)), flush=True)
    print(json.dumps(measure("mixed", n, a.runs, False)), flush=True)


if __name__ == "__main__":
    main()
