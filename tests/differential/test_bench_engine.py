"""bench/engine.py's same-run baseline really is OpenClaw's module, deciding the bench's calls.

The bench's figures are only comparable if both sides decide the same calls the same way: on
every mode the openclaw-2026.9 profile and the module must count the same verdicts. This checks
the harness (bench/openclaw_engine.mjs and its driving), not speed: nothing here is timed.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "engine.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_engine", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("mode", "calls"),
    [("unique", 2_000), ("mixed", 2_000), ("identical", 2_000), ("bursts", 2_000), ("pages", 200)],
)
def test_the_module_and_the_2026_9_profile_count_the_same_verdicts(
    openclaw: Callable[[dict[str, Any]], Any], mode: str, calls: int
) -> None:
    # `openclaw` installs the pinned module (the fixture's npm ci) before the bench loads it.
    result = _bench().measure(mode, calls, 1, True)
    counts = result["verdicts"]
    assert counts["openclaw-2026.9"] == counts["openclaw-module"]
    assert sum(counts["openclaw-module"].values()) == calls
    if mode in {"identical", "bursts"}:
        assert counts["openclaw-module"]["critical"] > 0
    if mode == "pages":  # the fetch loop is seen through the pages' fresh markers
        assert counts["openclaw-module"]["warning"] > 0
