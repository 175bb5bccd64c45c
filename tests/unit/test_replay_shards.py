"""Shards that read a file themselves give the same bytes and counts as one process."""

from __future__ import annotations

import gzip
import json
import multiprocessing
from pathlib import Path

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.inputs import FileInput, InputError
from loopguard_fleet.streams.audit.replay_jobs import (
    ROUND_LINES,
    ReplaySpec,
    replay_local,
    replay_sharded,
)

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 4}}})


def _fleet_lines(n: int) -> list[str]:
    """Runs looping at times, stamped, with a broken line, a redelivery and a long pause."""
    lines = []
    for i in range(n):
        run, k = f"r{i % 97}", i // 97 + 1
        args = {"p": 0 if k % 5 else i}
        ts = 1_000 * i + (40 * 60_000 if i > n // 2 else 0)  # past the TTL halfway through
        base = {"run_id": run, "tool": "read", "args": args, "ts": ts}
        lines.append(json.dumps({**base, "type": "tool_call", "event_id": f"c{i}", "seq": 2 * k}))
        lines.append(json.dumps({**base, "type": "tool_result", "event_id": f"r{i}",
                                 "seq": 2 * k + 1, "error": "missing"}))  # fmt: skip
    lines.insert(777, "{broken")
    lines.insert(1500, lines[1400])  # a redelivery
    lines.insert(20, "")  # blank lines count as lines but are not items
    return lines


def _run(spec: ReplaySpec, path: Path, jobs: int) -> tuple[list[tuple], object, list[int]]:
    """Outputs, stats, and the source's bytes read as each output arrived (the progress)."""
    source = FileInput(str(path))
    outs, stats = replay_local(spec, source) if jobs == 1 else replay_sharded(spec, source, jobs)
    got, read = [], []
    for o in outs:
        got.append(tuple(o))
        read.append(source.done_bytes())
    return got, stats, read


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("table", [False, True], ids=["json", "table"])
def test_shards_reading_the_file_match_one_process(
    tmp_path: Path, compressed: bool, table: bool
) -> None:
    text = ("\n".join(_fleet_lines(ROUND_LINES + ROUND_LINES // 3)) + "\n").encode()
    path = tmp_path / ("fleet.jsonl.gz" if compressed else "fleet.jsonl")
    path.write_bytes(gzip.compress(text) if compressed else text)
    spec = ReplaySpec(POLICY, table=table, idle_ttl_ms=30 * 60_000)
    one, one_stats, _ = _run(spec, path, 1)
    assert sum(o[2] is not None for o in one) == 1 and len(one) > 100
    for jobs in (2, 3):
        got, stats, read = _run(spec, path, jobs)
        assert got == one
        assert stats == one_stats
        assert read == sorted(read) and read[-1] > 0  # the progress bar moves with the rounds


def test_a_corrupt_gzip_file_fails_the_sharded_replay_with_its_input_error(tmp_path: Path) -> None:
    text = ("\n".join(_fleet_lines(3000)) + "\n").encode()
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(text)[:-4000])
    spec = ReplaySpec(POLICY)
    with pytest.raises(InputError, match="corrupt gzip stream"):
        _run(spec, path, 2)


@pytest.mark.parametrize("from_file", [True, False], ids=["file", "fed"])
def test_stopping_after_the_first_output_stops_every_shard(tmp_path: Path, from_file) -> None:
    # Many rounds of output, so that the shards' senders are blocked on full pipes when the
    # reader stops (as `--strict` does at the first malformed line).
    text = ("\n".join(_fleet_lines(6 * ROUND_LINES)) + "\n").encode()
    path = tmp_path / "fleet.jsonl"
    path.write_bytes(text)
    source = FileInput(str(path))
    items = source if from_file else list(source)
    outs, _ = replay_sharded(ReplaySpec(POLICY), items, 2)
    assert next(outs).pos > 0
    before = multiprocessing.active_children()
    assert len(before) == 2
    outs.close()  # type: ignore[attr-defined]  # a generator
    for proc in before:
        proc.join(timeout=10)
    assert [p.exitcode for p in before] == [0, 0]  # left on their own, not terminated
