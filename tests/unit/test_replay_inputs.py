"""Replay inputs: plain files, gzip, stdin (`-`) give the same bytes as the golden decisions;
blank lines keep line numbers; --from/--to parse; the idle TTL follows event time."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import Decision
from loopguard_fleet.streams.audit.inputs import Bound, FileInput, InputError, parse_bound
from loopguard_fleet.streams.audit.replay import Replayer, replay_items
from loopguard_fleet.streams.cli import main
from tests.wire import RunScript

REPO = Path(__file__).parents[2]
TRACE = REPO / "tests" / "data" / "traces" / "openclaw-P1-r5.jsonl"
GOLDEN = REPO / "tests" / "golden" / "expected" / "openclaw-P1-r5.decisions.jsonl"
ON = {"tools": {"loopDetection": {"enabled": True}}}


def _replay_file(path: Path, policy: str, tmp_path: Path) -> bytes:
    out = tmp_path / "out.jsonl"
    assert main(["replay", str(path), "--policy", policy, "--output", str(out), "--quiet"]) == 0
    return out.read_bytes()


def test_plain_and_gzip_files_give_the_golden_bytes(tmp_path, policy) -> None:
    gz = tmp_path / "trace.jsonl.gz"
    gz.write_bytes(gzip.compress(TRACE.read_bytes()))
    named_plain = tmp_path / "trace.gz"  # the content decides, not the name
    named_plain.write_bytes(TRACE.read_bytes())
    golden = GOLDEN.read_bytes()
    assert _replay_file(TRACE, policy, tmp_path) == golden
    assert _replay_file(gz, policy, tmp_path) == golden
    assert _replay_file(named_plain, policy, tmp_path) == golden


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_stdin_gives_the_golden_bytes(policy, compressed: bool) -> None:
    data = TRACE.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "-", "--policy", policy]
        + ["--quiet"],
        input=gzip.compress(data) if compressed else data, capture_output=True, cwd=REPO,
        timeout=60,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, b"", GOLDEN.read_bytes())


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":1}\n\n   \n{"b":2}\n')
    assert list(FileInput(str(path))) == [(1, b'{"a":1}\n'), (4, b'{"b":2}\n')]


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("0", Bound(offset=0)),
        ("1200", Bound(offset=1200)),
        ("2026-12-01T10:00:00Z", Bound(time_ms=1_796_119_200_000)),
        ("2026-12-01T11:00:00+01:00", Bound(time_ms=1_796_119_200_000)),
    ],
    ids=["offset-0", "offset", "utc", "offset-zone"],
)
def test_bounds_are_offsets_or_zoned_times(text: str, bound: Bound) -> None:
    assert parse_bound(text) == bound


@pytest.mark.parametrize("text", ["-1", "yesterday", "2026-12-01T10:00:00"], ids=str)
def test_other_bounds_are_refused(text: str) -> None:
    with pytest.raises(InputError):
        parse_bound(text)


def _loop(run: RunScript, calls: int, start_ms: int) -> list[tuple[int, bytes]]:
    events = [e for _ in range(calls) for e in run.both("read", {"p": 1}, error="x")]
    for i, e in enumerate(events):
        e["ts"] = start_ms + i * 1000
    return [(i, json.dumps(e).encode()) for i, e in enumerate(events, 1)]


def _warn_counts(items: list[tuple[int, bytes]], ttl_ms: int | None) -> list[int]:
    replayer = Replayer(load_policy(ON), idle_ttl_ms=ttl_ms)
    wires = [d.to_wire() for _, d in replay_items(replayer, items) if isinstance(d, Decision)]
    return [int(str(w["count"])) for w in wires if w.get("action") == "warn"]


def test_a_run_idle_past_the_ttl_in_event_time_starts_afresh() -> None:
    run = RunScript("r1")
    first = _loop(run, 9, 0)
    second = [(p + 100, raw) for p, raw in _loop(run, 9, 31 * 60 * 1000)]  # 31 min later
    assert _warn_counts(first + second, None)[:3] == [10, 11, 12]  # no TTL: one long loop
    assert _warn_counts(first + second, 30 * 60 * 1000) == []  # 9 + 9: never 10 in a row


def test_idle_runs_leave_memory_at_the_sweep() -> None:
    replayer = Replayer(load_policy(ON), idle_ttl_ms=60_000)
    for r in range(50):
        list(replay_items(replayer, _loop(RunScript(f"old-{r}"), 1, 0)))
    list(replay_items(replayer, _loop(RunScript("new"), 1, 10 * 60_000)))
    replayer.sweep()
    assert list(replayer.states) == ["new"]
