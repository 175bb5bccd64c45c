"""`--jobs N` shards runs over N processes and merges: the output is byte-identical to one
process, on generated fleets with interleaved runs, redeliveries, run ends, compactions,
malformed lines and event times that make runs go idle (streams/audit/replay_jobs.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.inputs import FileInput
from loopguard_fleet.streams.audit.replay_jobs import (
    ROUND_LINES,
    ReplaySpec,
    replay_local,
    replay_sharded,
)
from loopguard_fleet.streams.cli import main

LOW = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}
POLICY = load_policy({"tools": {"loopDetection": {**LOW, "globalCircuitBreakerThreshold": 7}}})
TOOLS = ["read", "exec", "process"]


@st.composite
def fleets(draw: st.DrawFn) -> list[bytes]:
    """Lines of a fleet: per run a script of steps, then the runs' events interleaved."""
    n_runs = draw(st.integers(1, 6))
    per_run: list[list[bytes]] = []
    for r in range(n_runs):
        run_id, seq, out = f"run-{r}", 0, []
        for step in draw(st.lists(st.integers(0, 9), min_size=1, max_size=40)):
            seq += 1
            ts = 1_000_000 + seq * draw(st.sampled_from([1_000, 400_000]))  # some gaps > TTL
            base = {"run_id": run_id, "event_id": f"{run_id}-{seq}", "seq": seq, "ts": ts}
            if step == 8:
                out.append(json.dumps({**base, "type": "compaction"}).encode())
            elif step == 9:
                out.append(draw(st.sampled_from([b"{not json", b"[1]", b'{"type":"tool_call"}'])))
            else:
                tool = TOOLS[step % 3]
                args = {"action": "poll"} if tool == "process" else {"p": step % 2}
                call = {**base, "type": "tool_call", "tool": tool, "args": args}
                out.append(json.dumps(call).encode())
                seq += 1
                result = {**call, "type": "tool_result", "seq": seq, "event_id": f"{run_id}-{seq}",
                          "error": "same" if step < 5 else f"e{step}"}  # fmt: skip
                out.append(json.dumps(result).encode())
            if draw(st.booleans()) and out:
                out.append(out[-1])  # a redelivery
        if draw(st.booleans()):
            seq += 1
            out.append(json.dumps({"run_id": run_id, "event_id": "end", "seq": seq,
                                   "type": "run_end"}).encode())  # fmt: skip
        per_run.append(out)
    order = draw(st.permutations([r for r, lines in enumerate(per_run) for _ in lines]))
    cursors = [0] * n_runs
    lines = []
    for r in order:
        lines.append(per_run[r][cursors[r]])
        cursors[r] += 1
    return lines


def _outputs(spec: ReplaySpec, lines: list[bytes], jobs: int) -> tuple[list, object]:
    items = list(enumerate(lines, 1))
    outs, stats = replay_local(spec, items) if jobs == 1 else replay_sharded(spec, items, jobs)
    return [(o.pos, o.data, o.rejected) for o in outs], stats


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), table=st.booleans())
def test_four_shards_give_the_same_outputs_and_counts_as_one(fleet, table) -> None:
    spec = ReplaySpec(POLICY, table=table, idle_ttl_ms=1_800_000)
    one, one_stats = _outputs(spec, fleet, 1)
    four, four_stats = _outputs(spec, fleet, 4)
    assert four == one
    assert four_stats == one_stats


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), table=st.booleans())
def test_three_shards_reading_the_file_give_the_same_outputs_and_counts_as_one(
    fleet, table
) -> None:
    spec = ReplaySpec(POLICY, table=table, idle_ttl_ms=1_800_000)
    one, one_stats = _outputs(spec, fleet, 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in fleet))
        outs, stats = replay_sharded(spec, FileInput(str(path)), 3)
        three = [(o.pos, o.data, o.rejected) for o in outs]
    assert three == one
    assert stats == one_stats


def test_cli_jobs_4_output_is_byte_identical_to_jobs_1_across_many_rounds(tmp_path) -> None:
    lines = []
    for i in range(3 * ROUND_LINES // 2):  # ~3 rounds of lines, 200 runs looping at times
        run, n = f"r{i % 200}", i // 200 + 1
        args = {"p": 0 if (i // 200) % 3 else i}
        base = {"run_id": run, "tool": "read", "args": args, "ts": 1_000 * i}
        lines.append(json.dumps({**base, "type": "tool_call", "event_id": f"c{i}", "seq": 2 * n}))
        lines.append(json.dumps({**base, "type": "tool_result", "event_id": f"r{i}",
                                 "seq": 2 * n + 1, "error": "missing"}))  # fmt: skip
    lines.insert(5000, "{broken")
    src = tmp_path / "fleet.jsonl"
    src.write_text("\n".join(lines) + "\n")
    policy = tmp_path / "p.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    outs = {}
    for jobs in (1, 4):
        out = tmp_path / f"out{jobs}.jsonl"
        argv = ["replay", str(src), "--policy", str(policy), "--jobs", str(jobs)]
        assert main([*argv, "--output", str(out), "--quiet"]) == 0
        outs[jobs] = out.read_bytes()
    assert outs[4] == outs[1] and outs[1].count(b"\n") > 1000
