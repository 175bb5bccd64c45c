"""Workload M of docs/benchmarks.md: generated modern OpenClaw runs decided end to end from
JSON lines, against OpenClaw's published detector in the same invocation.

    python bench/modern_runs.py [--quick] [--runs 3]

The runs come from the differential tests' seeded generator (tests/differential/streams.py:
every 2026.9 rule, vetoes and their echoes, marker-wrapped fetched pages, argument churn, exec
failures with volatile output, approvals, overlapping results), each shaped by LoopGuard's live
openclaw-2026.9 decisions, then interleaved as a topic interleaves a fleet's runs and written
to one JSON-lines file. Three sides read that file, decode each line, decide it with a state
per run and write their decisions as JSON lines (to /dev/null), alternating pass by pass after
one warm-up each: `loopguard replay` in this process (`--jobs 1`) with the openclaw-2026.9
profile and with the configurable one, and OpenClaw's own module (bench/openclaw_runs.mjs,
driven as its runner drives it for a batch of one call, logger silenced). Prints one JSON line:
each side's median events/s, LoopGuard's ratios to the module, and `verdicts_agree` (the
2026.9 profile's loop events and the module's verdicts, by level, and the runs they end).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.openclaw_node import openclaw_node  # noqa: E402
from bench.python_build import python_build  # noqa: E402
from loopguard_fleet.config import DETECTION_ON, load_policy  # noqa: E402
from loopguard_fleet.detectors import CONFIGURABLE, OPENCLAW_2026_9, Thresholds, engine_build  # noqa: E402
from loopguard_fleet.detectors.runner_2026_9 import RECOVERY_EXHAUSTED  # noqa: E402
from loopguard_fleet.streams.audit.inputs import FileInput  # noqa: E402
from loopguard_fleet.streams.audit.replay_jobs import ReplaySpec, replay_local  # noqa: E402
from loopguard_fleet.streams.collector import batch_collector  # noqa: E402
from tests.differential.streams import decided_runs  # noqa: E402

OPENCLAW_RUNS = REPO / "bench" / "openclaw_runs.mjs"
TTL_MS = 1_800_000  # the CLI's default --idle-ttl
RUNS_PER_SEED = 100
LIVE_RUNS = 50  # runs in flight at once in the file, as a topic interleaves a fleet's runs
SEED = 2026

Tally = dict[str, Any]


def write_events(path: Path, runs: int) -> int:
    """The workload's file: `runs` generated runs, interleaved; returns its event count."""
    th = Thresholds(enabled=True, semantics=OPENCLAW_2026_9, channel_tools=frozenset())
    pending = [
        iter(run)
        for first in range(0, runs, RUNS_PER_SEED)
        for run in decided_runs(SEED + first, min(RUNS_PER_SEED, runs - first), th)
    ]
    rng = random.Random(SEED)
    live: list[Any] = []
    n = 0
    with path.open("wb") as out:
        while pending or live:
            while pending and len(live) < LIVE_RUNS:
                live.append(pending.pop(0))
            i = rng.randrange(len(live))
            event = next(live[i], None)
            if event is None:
                live.pop(i)
                continue
            out.write(orjson.dumps(event) + b"\n")
            n += 1
    return n


def replay_pass(path: Path, semantics: str, tally: bool = False) -> tuple[float, Tally]:
    """One `loopguard replay` pass (--jobs 1), decisions written to /dev/null: (seconds, the
    events, and with `tally` the loop events by level and the runs ended)."""
    spec = ReplaySpec(
        policy=load_policy(DETECTION_ON).with_semantics(semantics), idle_ttl_ms=TTL_MS
    )
    kept: list[bytes] | None = [] if tally else None
    start = time.perf_counter()
    outs, stats = replay_local(spec, FileInput(str(path)))
    with open(os.devnull, "wb") as sink:
        for o in outs:
            sink.write(o.data)
            if kept is not None:
                kept.append(o.data)
    seconds = time.perf_counter() - start
    return seconds, _tally(stats.events, b"".join(kept)) if kept is not None else {
        "events": stats.events
    }


def _tally(events: int, data: bytes) -> Tally:
    """The loop events by level and the runs ended (abort_run), from replay's JSON lines.

    A run's end is one verdict of the module's (the block that ends it, `terminate_run`); the
    2026.9 profile reports it as that block's loop event plus the abort's own (not counted)."""
    levels: Counter[str] = Counter()
    terminated = 0
    for line in data.splitlines():
        d = orjson.loads(line)
        if d["type"] == "loop_event" and d["detector"] != RECOVERY_EXHAUSTED:
            levels[d["level"]] += 1
        elif d.get("command") == "abort_run":
            terminated += 1
    return {"events": events, "verdicts": dict(sorted(levels.items())), "terminated": terminated}


class OpenClawRuns:
    """OpenClaw's published detector and runner model in a Node process of its own."""

    def __init__(self, path: Path) -> None:
        self._proc = subprocess.Popen(
            [openclaw_node()[0], str(OPENCLAW_RUNS)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"events": str(path), "out": os.devnull}) + "\n")

    def run_once(self) -> tuple[float, Tally]:
        """One timed pass over the file: (seconds, its tally)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("bench/openclaw_runs.mjs exited (make bench-deps installs it)")
        got = json.loads(line)
        verdicts = {k: v for k, v in sorted(got["verdicts"].items()) if v}
        tally = {"events": got["events"], "verdicts": verdicts, "terminated": got["terminated"]}
        return float(got["seconds"]), tally

    def close(self) -> None:
        """End the Node process (ours, by its pipe and PID)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._proc.stdout.close()


def measure(path: Path, runs: int) -> dict[str, Any]:
    """Median events/s of each side over `runs` alternating passes after one warm-up each."""
    module = OpenClawRuns(path)
    sides: dict[str, Callable[[], tuple[float, Tally]]] = {
        "openclaw-2026.9": lambda: replay_pass(path, OPENCLAW_2026_9),
        "configurable": lambda: replay_pass(path, CONFIGURABLE),
        "openclaw-module": module.run_once,
    }
    try:
        # The warm-ups, each tallied: what every side decided.
        tallies = {
            "openclaw-2026.9": replay_pass(path, OPENCLAW_2026_9, tally=True)[1],
            "configurable": replay_pass(path, CONFIGURABLE, tally=True)[1],
            "openclaw-module": module.run_once()[1],
        }
        rates: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(runs):
            for name, side in sides.items():
                seconds, tally = side()
                rates[name].append(tally["events"] / seconds)
    finally:
        module.close()
    med = {name: statistics.median(r) for name, r in rates.items()}
    base = med["openclaw-module"]
    return {
        "workload": "M",
        "engine": engine_build(),  # "compiled" with PYTHONPATH=build/compiled (make compiled)
        "python": python_build(),  # the interpreter LoopGuard ran on (python_build.py)
        "openclaw_node": openclaw_node()[1],  # the Node the module ran on (openclaw_node.py)
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "events": tallies["openclaw-module"]["events"],
        "events_per_s": {name: round(m) for name, m in med.items()},
        "runs": {name: [round(x) for x in r] for name, r in rates.items()},
        "tallies": tallies,
        # The profile that models the module must reach the same verdicts on the same events.
        "verdicts_agree": tallies["openclaw-2026.9"] == tallies["openclaw-module"],
        "ratio_to_openclaw_module": {
            name: round(m / base, 3) for name, m in med.items() if name != "openclaw-module"
        },
    }


def main() -> None:
    """Write the workload's file, measure, print one JSON line."""
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="200 runs (~16,000 events), not 2,000")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopguard-bench-m-") as tmp:
        path = Path(tmp) / "events.jsonl"
        write_events(path, 200 if a.quick else 2_000)
        # The generator's objects are gone; the collector starts from this process's own heap,
        # set as `loopguard replay` sets it (streams/collector.py).
        gc.collect()
        with batch_collector():
            result = measure(path, a.runs)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
