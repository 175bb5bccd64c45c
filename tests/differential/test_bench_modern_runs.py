"""bench/modern_runs.py's same-run baseline really is OpenClaw's module and runner model,
deciding the bench's file.

Workload M's figures compare only if both sides decide the same events the same way: the
openclaw-2026.9 profile and the module must reach the same verdicts and end the same runs.
This checks the harness (bench/openclaw_runs.mjs, the file, the tallies), not speed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).parents[2] / "bench" / "modern_runs.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_modern_runs", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_modern_runs", module)
    spec.loader.exec_module(module)
    return module


def test_the_module_and_the_2026_9_profile_decide_the_file_alike(
    openclaw: Callable[[dict[str, Any]], Any], tmp_path: Path
) -> None:
    # `openclaw` installs the pinned module (the fixture's npm ci) before the bench starts it.
    bench = _bench()
    path = tmp_path / "events.jsonl"
    events = bench.write_events(path, 60)
    assert events == sum(1 for line in path.read_bytes().splitlines() if line)
    result = bench.measure(path, 1)
    tallies = result["tallies"]
    assert result["verdicts_agree"], tallies
    module = tallies["openclaw-module"]
    assert module["events"] == events
    # The file holds warnings, blocks and runs the runner ends, and the configurable profile
    # decides it by rules of its own (it ends no run).
    assert module["verdicts"]["warning"] > 0 and module["verdicts"]["critical"] > 0
    assert module["terminated"] > 0
    assert tallies["configurable"]["terminated"] == 0
    assert tallies["configurable"]["verdicts"] != module["verdicts"]
    # The file interleaves the runs, each in its own order.
    events_in_file = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({e["run_id"] for e in events_in_file[:60]}) > 10
    last_seq: dict[str, int] = {}
    for e in events_in_file:
        assert e["seq"] == last_seq.get(e["run_id"], 0) + 1
        last_seq[e["run_id"]] = e["seq"]
