"""The cyclic collector's settings (streams/collector.py): the worker's frozen startup heap, the
offline commands' rarer scans, and the premise of both, that detection makes no cycles."""

from __future__ import annotations

import gc
import importlib
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import DETECTION_ON, load_policy
from loopguard_fleet.detectors import OPENCLAW_2026_9, SEMANTICS, Thresholds
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.collector import (
    BATCH_THRESHOLDS,
    batch_collector,
    freeze_startup_heap,
)
from tests.differential.streams import decided_runs


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thresholds() -> Iterator[None]:
    """The test process's thresholds, put back after the test whatever it did."""
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_the_startup_heap_is_collected_then_frozen_out_of_later_collections() -> None:
    garbage, kept = Cycle(), Cycle()
    gone = weakref.ref(garbage)
    del garbage
    try:
        freeze_startup_heap()
        frozen = gc.get_freeze_count()
        # Collected first (not frozen with the rest), the live one frozen: a full collection
        # no longer scans it.
        assert (gone(), frozen > 0, any(o is kept for o in gc.get_objects())) == (
            None,
            True,
            False,
        )
    finally:
        gc.unfreeze()


def test_an_offline_command_s_thresholds_hold_within_and_the_caller_s_after(
    thresholds: None,
) -> None:
    gc.set_threshold(700, 10, 10)
    with batch_collector():
        within = gc.get_threshold()
    assert (within, gc.get_threshold()) == (BATCH_THRESHOLDS, (700, 10, 10))
    assert BATCH_THRESHOLDS[0] > 700  # rarer scans than CPython's default


def test_the_caller_s_thresholds_come_back_when_the_command_fails(
    thresholds: None,
) -> None:
    gc.set_threshold(500, 5, 5)
    with pytest.raises(RuntimeError), batch_collector():
        raise RuntimeError("the command failed")
    assert gc.get_threshold() == (500, 5, 5)


def _lines(seed: int) -> list[bytes]:
    """Generated modern runs (every 2026.9 rule, vetoes, exec failures) as JSON lines, and
    lines a replay rejects."""
    th = Thresholds(enabled=True, semantics=OPENCLAW_2026_9, channel_tools=frozenset())
    lines = [orjson.dumps(ev) for run in decided_runs(seed, 12, th) for ev in run]
    return [*lines, b"not json", b'{"type": "tool_call"}', b"[1, 2]", lines[0]]


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_replaying_makes_no_reference_cycles(semantics: str) -> None:
    # The premise of the rarer scans: what the engine and replay make per event is freed by
    # reference counting, so a collection deferred finds nothing more to free.
    lines = _lines(2026)
    replayer = Replayer(load_policy(DETECTION_ON).with_semantics(semantics))
    gc.collect()
    gc.disable()
    try:
        out = list(replay_lines(replayer, lines))
        found = gc.collect()
    finally:
        gc.enable()
    rejected = sum(isinstance(d, Rejected) for d in out)
    assert (found, rejected, len(out) > rejected) == (0, 3, True)


@pytest.mark.parametrize(
    ("command", "module", "name"),
    [
        ("replay", "loopguard_fleet.streams.audit.replay_jobs", "replay_local"),
        ("compare", "loopguard_fleet.streams.audit.compare", "compare"),
        ("explain", "loopguard_fleet.streams.audit.explain", "explain_run"),
    ],
)
def test_offline_commands_run_with_the_batch_thresholds_and_leave_the_caller_s(
    command: str,
    module: str,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    thresholds: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = importlib.import_module(module)
    real = getattr(target, name)
    seen: list[tuple[int, int, int]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, spy)
    lines = _lines(7)
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(lines) + b"\n")
    first_run = str(orjson.loads(lines[0])["run_id"])
    argv = {
        "replay": ["replay", str(trace), "--quiet"],
        "compare": ["compare", str(trace), "--candidate", str(_candidate(tmp_path))],
        "explain": ["explain", first_run, str(trace)],
    }[command]
    gc.set_threshold(600, 9, 9)
    code = main(argv)
    capsys.readouterr()
    assert (code, seen, gc.get_threshold()) == (0, [BATCH_THRESHOLDS], (600, 9, 9))


def _candidate(tmp_path: Path) -> Path:
    path = tmp_path / "candidate.json"
    doc = {"tools": {"loopDetection": {"enabled": True, "criticalThreshold": 12}}}
    path.write_bytes(orjson.dumps(doc))
    return path
