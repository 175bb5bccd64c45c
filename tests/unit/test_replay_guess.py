"""Shards that read a file route each line by the run id its bytes name, without decoding it
(streams/audit/shards.py `guess_shard`). Lines whose bytes name the wrong shard, or move stream
time with a `ts` their bytes do not spell, are found by the shard that decodes them, and the
file is replayed again exactly: the output stays byte-identical to one process."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import orjson
import pytest

from loopguard.config import load_policy
from loopguard.streams.audit.inputs import FileInput
from loopguard.streams.audit.replay_jobs import (
    ROUND_LINES,
    ReplaySpec,
    replay_local,
    replay_sharded,
)
from loopguard.streams.audit.shards import guess_shard, guess_time, misguessed, route
from loopguard.streams.client.run_events import RunEvents
from loopguard.streams.processing.driver import event_time_ms

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 4}}})
TTL_MS = 30 * 60_000
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def _shard(run_id: str, jobs: int) -> int:
    return zlib.crc32(run_id.encode()) % jobs


def _other_run(run_id: str, jobs: int) -> str:
    """A run id of the fleet on another shard than `run_id` for `jobs` shards."""
    return next(f"r{k}" for k in range(97) if _shard(f"r{k}", jobs) != _shard(run_id, jobs))


def _fleet(n: int, odd: bytes | None = None, at: int = 0) -> list[bytes]:
    """97 runs reading the same file again and again (they warn), stamped with a ts; `odd`
    inserted at line `at`."""
    lines = []
    for i in range(n):
        run, k = f"r{i % 97}", i // 97 + 1
        base = {"run_id": run, "tool": "read", "args": {"p": 0}, "ts": 1_000 * i}
        lines.append(orjson.dumps({**base, "type": "tool_call", "event_id": f"c{i}", "seq": 2 * k}))
        lines.append(orjson.dumps({**base, "type": "tool_result", "event_id": f"r{i}",
                                   "seq": 2 * k + 1, "error": "missing"}))  # fmt: skip
    if odd is not None:
        lines.insert(at, odd)
    return lines


def _outputs(lines: list[bytes], tmp: Path, jobs: int, gz: bool = False) -> tuple[list, object]:
    path = tmp / ("f.jsonl.gz" if gz else "f.jsonl")
    text = b"".join(line + b"\n" for line in lines)
    path.write_bytes(gzip.compress(text) if gz else text)
    spec = ReplaySpec(POLICY, idle_ttl_ms=TTL_MS)
    source = FileInput(str(path))
    outs, stats = replay_local(spec, source) if jobs == 1 else replay_sharded(spec, source, jobs)
    return [tuple(o) for o in outs], stats


def _odd_lines(jobs: int) -> dict[str, bytes]:
    """Events of run r5 whose bytes mislead the guess, each a call the run's loop counts."""
    other = _other_run("r5", jobs)
    head = '"type":"tool_call","event_id":"odd","seq":999,"tool":"read","args":{"p":0}'
    return {
        # the first "run_id" of the bytes is a key of the args, another run's
        "nested": f'{{"meta":{{"run_id":"{other}"}},"run_id":"r5",{head}}}'.encode(),
        # a repeated key: JSON keeps the last one
        "repeated": f'{{"run_id":"{other}",{head},"run_id":"r5"}}'.encode(),
        # the key spelled with an escape, after another run's id
        "escaped": f'{{"run_id":"{other}",{head},"run\\u005fid":"r5"}}'.encode(),
    }


@pytest.mark.parametrize("jobs", [2, 3])
@pytest.mark.parametrize("kind", ["nested", "repeated", "escaped"])
def test_a_line_whose_bytes_name_another_shard_is_replayed_as_by_one_process(
    tmp_path: Path, jobs: int, kind: str
) -> None:
    odd = _odd_lines(jobs)[kind]
    obj = orjson.loads(odd)
    assert obj["run_id"] == "r5" and guess_shard(odd, jobs) != route(obj, jobs)  # misleading
    # three rounds in, so that rounds yielded before the wrong guess are not yielded again
    lines = _fleet(3 * ROUND_LINES // 2, odd, at=ROUND_LINES * 5 // 2)
    one, one_stats = _outputs(lines, tmp_path, 1)
    assert any(o[0] == ROUND_LINES * 5 // 2 + 1 and b"r5" in o[1] for o in one)  # it decides
    got, stats = _outputs(lines, tmp_path, jobs)
    assert got == one
    assert stats == one_stats


def _time_lines(jump: int, early: int) -> dict[str, bytes]:
    """Lines of a run whose bytes name another event time than one process reads from them:
    `jump` (40 minutes ahead) or none, where the bytes name `early` or none."""
    head = '"type":"compaction","event_id":"j","seq":1,"run_id":"rx"'
    return {
        # the time in a key that no "ts" in the bytes shows: the others would not move
        "escaped": f'{{{head},"t\\u0073":{jump}}}'.encode(),
        # the first "ts" of the bytes is a nested one, an earlier time
        "nested": f'{{{head},"args":{{"ts":{early}}},"ts":{jump}}}'.encode(),
        # a repeated key: JSON keeps the last one
        "repeated": f'{{{head},"ts":{early},"ts":{jump}}}'.encode(),
        # a line cut after its ts does not decode, so it moves no time in one process
        "cut": f'{{{head},"ts":{jump},"tool":"re'.encode(),
    }


@pytest.mark.parametrize(
    ("kind", "gz"),
    [("escaped", False), ("escaped", True), ("nested", False), ("repeated", False), ("cut", False)],
)
def test_a_line_whose_bytes_name_another_time_moves_stream_time_as_in_one_process(
    tmp_path: Path, kind: str, gz: bool
) -> None:
    # In one process every run that goes on after the jump is idle past the TTL and starts
    # fresh (the later lines' own ts stay behind it), and after a cut line nothing changes
    # (it moves no time). The shards that take the time from the bytes must learn that the
    # bytes named another time than one process reads.
    at = ROUND_LINES + 100
    jump = 1_000 * (at // 2) + 40 * 60_000  # the fleet has two lines a second
    odd = _time_lines(jump, 1_000 * (at // 2))[kind]  # early: the time of the lines about it
    lines = _fleet(ROUND_LINES + ROUND_LINES // 2, odd, at=at)  # the later ts stay < jump
    try:
        obj = orjson.loads(odd)
    except orjson.JSONDecodeError:
        obj = None
    assert misguessed(obj, odd, 2, guess_shard(odd, 2), True)
    one, one_stats = _outputs(lines, tmp_path, 1, gz)
    got, stats = _outputs(lines, tmp_path, 2, gz)
    assert got == one
    assert stats == one_stats


def _client_lines() -> list[bytes]:
    """Lines as the runtime client writes them, with and without privacy mode and a clock,
    and as the recorded traces hold them (json.dumps's spacing)."""
    lines = []
    for privacy in (False, True):
        for clock in (None, lambda: 1_788_621_973_273, lambda: "2026-12-01T10:00:00.000Z"):
            ev = RunEvents("15fa1919-9e0b", agent_id="main", privacy=privacy, clock=clock)
            call = ev.tool_call("read", {"path": '/a \u00e9 "q"'})
            res = ev.tool_result(call["tool_call_id"], "read", {"path": "/a"}, error="x\ny")
            for wire in (call, res, ev.compaction(), ev.end()):
                lines.append(orjson.dumps(wire))
                lines.append(json.dumps(wire).encode())  # \u escapes, ": " spacing
    for trace in TRACES.glob("*.jsonl"):
        lines.extend(line for line in trace.read_bytes().splitlines() if line.strip())
    return lines


@pytest.mark.parametrize("jobs", [2, 3, 4])
def test_the_bytes_of_every_client_and_trace_line_name_its_shard(jobs: int) -> None:
    lines = _client_lines()
    assert len(lines) > 100
    for line in lines:
        obj = orjson.loads(line)
        guess = guess_shard(line, jobs)
        assert guess == route(obj, jobs)
        assert guess_time(line) == (True, event_time_ms(obj.get("ts")))
        assert not misguessed(obj, line, jobs, guess, True)
