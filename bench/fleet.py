"""Fleet signals on a simulated outage, in event time (docs/fleet.md): early blocks, signal
delay and healthy runs, each beside the same run's figure without fleet signals.

    python bench/fleet.py            # 500 affected runs on 50 agents, 2,000 healthy runs
    python bench/fleet.py --quick    # 50 affected runs on 10 agents, 200 healthy runs

The traffic: healthy runs read a shared README (the same content) three times, read files
of their own and poll a job until it finishes; during the outage, affected runs retry a read
that keeps failing the same way, 25 times each. Runs start at random times, calls are spaced
so that the fleet makes about 1,000 calls/s of event time (each event's `ts`), and the whole
stream goes through `loopguard replay`'s core twice, fleet signals off and on (policy
`loopguard.fleet`: minRuns 5, earlyAtCount 3, earlyAction block). Replay decides in event
time, so the figures are the worker's decisions for this input order, with no clock.

Figures, one JSON line each:
- fleet_calls_before_first_block_median: over the affected runs that start retrying after
  the signal applies, how many calls each spent on the loop before its first block (target
  <= 3), baseline: the same runs without fleet signals (about 20);
- fleet_signal_delay_s: event time from the moment minRuns affected runs have shown the
  signature to the firing signal applying to calls (target <= 2 s; the 1 s lateness
  included), baseline: from that moment to the firing's own event time;
- fleet_healthy_runs_newly_hit: healthy runs warned or blocked with fleet signals that were
  not without (target 0), baseline: healthy runs warned or blocked without fleet signals.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loopguard_fleet.config import load_policy  # noqa: E402
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines  # noqa: E402

T0 = 1_764_000_000_000
CALLS_PER_S = 1_000
MIN_RUNS = 5
FLEET = {"enabled": True, "minRuns": MIN_RUNS, "earlyAtCount": 3, "earlyAction": "block"}
POLICY = {"tools": {"loopDetection": {"enabled": True}}}
BROKEN = {"path": "/etc/app/credentials.json"}
ENOENT = "EACCES: permission denied, open '/etc/app/credentials.json'"


def _text(text: str, **details: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": details}


def _healthy(rng: random.Random, n: int) -> list[tuple[str, Any, dict[str, Any]]]:
    """A healthy run's calls: shared README reads, its own files, a poll until done."""
    calls: list[tuple[str, Any, dict[str, Any]]] = []
    for k in range(3):
        calls.append(("read", {"path": "README.md"}, {"result": _text("# Project\n")}))
        calls.append(("read", {"path": f"src/{n}/{k}.py"}, {"result": _text(f"code {n} {k}")}))
    for k in range(rng.randint(2, 4)):
        state = "done" if k == 3 else "running"
        calls.append(
            (
                "process",
                {"action": "poll", "sessionId": f"job-{n}"},
                {"result": _text(state, tail=f"line {k}")},
            )
        )
    return calls


def _affected() -> list[tuple[str, Any, dict[str, Any]]]:
    return [("read", BROKEN, {"error": ENOENT})] * 25


def traffic(affected: int, agents: int, healthy: int, seed: int = 7) -> list[bytes]:
    """The outage's events as JSONL lines in event-time order."""
    rng = random.Random(seed)
    runs: list[tuple[str, str, list[tuple[str, Any, dict[str, Any]]], float]] = []
    total = healthy * 10 + affected * 25
    span_s = total / CALLS_PER_S  # the stream lasts this long at the target rate
    for n in range(healthy):
        runs.append(
            (
                f"healthy-{n}",
                f"agent-{n % (agents * 2)}",
                _healthy(rng, n),
                rng.uniform(0, span_s * 0.8),
            )
        )
    for n in range(affected):
        start = rng.uniform(span_s * 0.1, span_s * 0.6)
        runs.append((f"affected-{n}", f"agent-{n % agents}", _affected(), start))
    events: list[tuple[int, str, int, dict[str, Any]]] = []
    for run_id, agent, calls, start in runs:
        gap = span_s * 0.2 / len(calls)  # each run's calls spread over a fifth of the stream
        for k, (tool, args, outcome) in enumerate(calls):
            at = T0 + int((start + k * gap) * 1000)
            seq = 2 * k + 1
            base = {"run_id": run_id, "agent_id": agent, "tool": tool, "args": args}
            call = {"type": "tool_call", "event_id": f"{run_id}:{seq}", "seq": seq,
                    "tool_call_id": f"c{k}", "ts": at, **base}  # fmt: skip
            result = {"type": "tool_result", "event_id": f"{run_id}:{seq + 1}", "seq": seq + 1,
                      "tool_call_id": f"c{k}", "ts": at + 20, **base, **outcome}  # fmt: skip
            events += [(at, run_id, seq, call), (at + 20, run_id, seq + 1, result)]
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    return [orjson.dumps(e[3]) for e in events]


def decide(lines: list[bytes], fleet: bool) -> list[dict[str, Any]]:
    """The control messages of the traffic, fleet signals off or on."""
    doc: dict[str, Any] = dict(POLICY)
    if fleet:
        doc["loopguard"] = {"fleet": FLEET}
    out = list(replay_lines(Replayer(load_policy(doc)), lines))
    return [d.to_wire() for d in out if not isinstance(d, Rejected)]


def _calls_before_block(decisions: list[dict[str, Any]]) -> dict[str, int]:
    """Each run's calls before its first block (the block's seq is its call's 2k+1)."""
    first: dict[str, int] = {}
    for d in decisions:
        if d.get("command") == "block_call" and d["run_id"] not in first:
            first[str(d["run_id"])] = (int(d["seq"]) - 1) // 2
    return first


def _hit(decisions: list[dict[str, Any]], prefix: str) -> set[str]:
    return {
        str(d["run_id"])
        for d in decisions
        if d["type"] == "loop_event" and str(d["run_id"]).startswith(prefix)
    }


def main() -> None:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the runs")
    args = ap.parse_args()
    affected, agents, healthy = (50, 10, 200) if args.quick else (500, 50, 2_000)
    lines = traffic(affected, agents, healthy)
    off, on = decide(lines, fleet=False), decide(lines, fleet=True)
    events = [orjson.loads(x) for x in lines]
    span_s = (events[-1]["ts"] - events[0]["ts"]) / 1000
    calls = sum(1 for e in events if e["type"] == "tool_call")
    common = {"affected_runs": affected, "agents": agents, "healthy_runs": healthy,
              "calls_per_s": round(calls / span_s)}  # fmt: skip

    # When minRuns affected runs had shown the signature: their first retries (2nd call).
    retries = sorted(
        e["ts"]
        for e in events
        if e["type"] == "tool_call" and e["seq"] == 3 and str(e["run_id"]).startswith("affected")
    )
    shown_ms = retries[MIN_RUNS - 1]
    firing_at = next(i for i, d in enumerate(on) if d["type"] == "fleet_signal")
    fired = on[firing_at]
    # The signal applies to the calls after it: the event whose decision follows it.
    applied_ms = next((int(e["ts"]) for e in events if e["ts"] > fired["at_ms"] + 1000), shown_ms)
    late_starters = {
        str(e["run_id"])
        for e in events
        if e["type"] == "tool_call"
        and e["seq"] == 1
        and str(e["run_id"]).startswith("affected")
        and e["ts"] > applied_ms
    }
    before_on, before_off = _calls_before_block(on), _calls_before_block(off)
    with_fleet = [before_on[r] for r in late_starters if r in before_on]
    without = [before_off[r] for r in late_starters if r in before_off]
    print(json.dumps({"figure": "fleet_calls_before_first_block_median",
                      "value": statistics.median(with_fleet) if with_fleet else None,
                      "baseline": statistics.median(without) if without else None,
                      "runs": len(late_starters), "target": "<= 3", **common}))  # fmt: skip
    print(json.dumps({"figure": "fleet_signal_delay_s", "value": (applied_ms - shown_ms) / 1000,
                      "baseline": (fired["at_ms"] - shown_ms) / 1000, "target": "<= 2",
                      **common}))  # fmt: skip
    newly = _hit(on, "healthy") - _hit(off, "healthy")
    print(json.dumps({"figure": "fleet_healthy_runs_newly_hit", "value": len(newly),
                      "baseline": len(_hit(off, "healthy")), "target": 0, **common}))  # fmt: skip


if __name__ == "__main__":
    main()
