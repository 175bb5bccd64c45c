"""`loopguard replay` / `compare` on workload P's events (bench/pipeline.py's `workload`).

    python bench/replay.py            # 200,000 events; memory at 200k and 2M; 3 runs each
    python bench/replay.py --quick    # 40,000 events; memory at 40k and 400k; 2 runs

Figures, one JSON line each, every one with its same-run baseline:
- replay_events_per_s (--jobs 1, streamed from a file, decisions written to /dev/null),
  baseline: the engine alone (parse_event + process_event over lines decoded beforehand);
- replay_cli_events_per_s: the same as `loopguard replay FILE` runs for a user, a process of
  its own timed from start to exit (the replay before each compare, below); the in-process
  figure above runs with the command's collector settings, beside this bench's own heap;
- replay_jobs_N_events_per_s for N up to the cores present, baseline N × the --jobs 1 figure;
- compare_seconds (`loopguard compare`, criticalThreshold 20 vs 12), baseline: `loopguard
  replay` of the same file run right before each (both as processes of their own; the
  median pair ratio is the figure to read);
- replay_max_rss_bytes at 10 × the events, baseline: at 1 ×, both read from stdin through a
  pipe from a generator process (1,000 live runs, as in P), so the input is never on disk.
- replay_jobs_N_cpu_per_event_us: the CPU time (this process and the shards) per event of
  `--jobs N`, baseline the same of `--jobs 1`: what sharding costs in work, which is what
  bounds the scaling on N idle cores (wall-clock scaling needs the cores to be idle).
- replay_jobs_N_where (N = 1 too): where each process spent the run's wall-clock time, from
  Linux's /proc/<pid>/schedstat (per main thread: on a CPU, runnable but waiting for one
  (the host's other load), and neither: blocked on a pipe, a queue or the disk); the median
  of the runs, as fractions of the wall time. A shard that waits for a CPU is held back by
  the host; one that is blocked is held back by the parent or the other shards.

    python bench/replay.py --only scaling --runs 5   # just the --jobs 1 / --jobs N pairs

The machine is shared: absolute figures are noisy, the ratios less so; every line carries
the load average of the host before its runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pipeline import POLICY, RUNS, workload  # noqa: E402
from loopguard_fleet.config import load_policy  # noqa: E402
from loopguard_fleet.detectors import RunState, parse_event, process_event  # noqa: E402
from loopguard_fleet.streams.audit.inputs import FileInput  # noqa: E402
from loopguard_fleet.streams.audit.replay_jobs import ReplaySpec, replay_local, replay_sharded  # noqa: E402
from loopguard_fleet.streams.collector import batch_collector  # noqa: E402

TTL_MS = 1_800_000  # the CLI's default --idle-ttl
CANDIDATE = {"tools": {"loopDetection": {"enabled": True, "criticalThreshold": 12}}}


def _figure(name: str, values: list[float], baseline: list[float], what: str, **extra: Any) -> str:
    med, base = statistics.median(values), statistics.median(baseline)
    row: dict[str, Any] = {
        "load_avg_1m": LOAD[0],
        "workload": "P",
        "figure": name,
        "median": round(med, 3),
        "runs": [round(v, 3) for v in values],
        "baseline": what,
        "baseline_median": round(base, 3),
        "ratio": round(med / base, 3),
    }
    row.update(extra)
    return json.dumps(row)


LOAD = [round(x, 2) for x in os.getloadavg()]  # the host's load when the bench started


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its ended children so far."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _schedstat(pid: int | str) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable waiting for one) of a process's main thread."""
    try:
        on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


class _Where(threading.Thread):
    """Samples the schedstat of this process's main thread and of every shard until stopped
    (a shard's last sample is at most `every` old when it exits)."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.halt = threading.Event()
        self.start_self = _schedstat(os.getpid())
        self.shards: dict[int, tuple[float, float]] = {}
        self.start()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            for proc in mp.active_children():
                if proc.pid is not None and (got := _schedstat(proc.pid)) is not None:
                    self.shards[proc.pid] = got

    def stop(self, wall: float) -> dict[str, list[float]]:
        """{process: [on CPU, waiting for a CPU, blocked]} as fractions of `wall`."""
        self.halt.set()
        self.join()
        out: dict[str, list[float]] = {}
        end, begin = _schedstat(os.getpid()), self.start_self
        if end is not None and begin is not None:
            out["parent"] = _fractions(end[0] - begin[0], end[1] - begin[1], wall)
        for i, (cpu, wait) in enumerate(self.shards.values()):
            out[f"shard{i}"] = _fractions(cpu, wait, wall)
        return out


def _fractions(cpu: float, wait: float, wall: float) -> list[float]:
    blocked = max(0.0, 1 - (cpu + wait) / wall)
    return [round(cpu / wall, 3), round(wait / wall, 3), round(blocked, 3)]


def _replay_run(
    spec: ReplaySpec, path: Path, jobs: int
) -> tuple[float, float, dict[str, list[float]]]:
    """(events/s, CPU µs per event of this process and the shards, where the time went) of
    one replay, with the collector set as `loopguard replay` sets it."""
    with batch_collector():
        return _replay_timed(spec, path, jobs)


def _replay_timed(
    spec: ReplaySpec, path: Path, jobs: int
) -> tuple[float, float, dict[str, list[float]]]:
    where = _Where()
    start, cpu = time.perf_counter(), _cpu_s()
    items = FileInput(str(path))
    outs, stats = replay_local(spec, items) if jobs == 1 else replay_sharded(spec, items, jobs)
    with open(os.devnull, "wb") as sink:
        for o in outs:
            sink.write(o.data)
    wall = time.perf_counter() - start
    spent = where.stop(wall)
    return stats.events / wall, (_cpu_s() - cpu) / stats.events * 1e6, spent


def _median_where(runs: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per process, the median of each fraction over the runs."""
    keys = sorted({k for r in runs for k in r})
    return {
        k: [round(statistics.median(r[k][j] for r in runs if k in r), 3) for j in range(3)]
        for k in keys
    }


def _replay_rate(spec: ReplaySpec, path: Path, jobs: int) -> float:
    return _replay_run(spec, path, jobs)[0]


def _engine_rate(lines: list[bytes]) -> float:
    th = load_policy(POLICY).for_agent(None)
    objs = [orjson.loads(line) for line in lines]
    states: dict[str, RunState] = {}
    start = time.perf_counter()
    for obj in objs:
        ev = parse_event(obj)
        state = states.get(ev.run_id)
        if state is None:
            state = states[ev.run_id] = RunState()
        process_event(state, ev, th)
    return len(objs) / (time.perf_counter() - start)


def _cli_seconds(*args: str) -> float:
    """Wall seconds of one `loopguard ...` process (output discarded), as a user runs it."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", *args],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - start


def _compare_pair(path: Path, policy: Path, candidate: Path) -> tuple[float, float]:
    """(replay seconds, compare seconds), the CLI's, one right after the other.

    Each in a process of its own: in the bench's process, which holds the workload and what
    the runs before left, the cyclic collector's passes cost compare (two sides' objects) more
    than replay, and this host's speed swings ~1.4 x within a minute, so a compare divided by
    a replay of another moment measured the swing.
    """
    replay_s = _cli_seconds("replay", str(path), "--policy", str(policy))
    compare_s = _cli_seconds(
        "compare", str(path), "--policy", str(policy), "--candidate", str(candidate),
        "--format", "json",
    )  # fmt: skip
    return replay_s, compare_s


def generate(calls: int, repeats: int) -> None:
    """Write P's events `repeats` times to stdout, later copies later in every run (seq)."""
    base = [orjson.loads(v) for _, v in workload(calls)]
    shift = 2 * calls // RUNS + 2  # every run's seq grows past its previous copy's
    out = sys.stdout.buffer
    for k in range(repeats):
        for ev in base:
            ev2 = {**ev, "seq": ev["seq"] + k * shift, "event_id": f"k{k}-{ev['event_id']}"}
            out.write(orjson.dumps(ev2) + b"\n")
    out.flush()


def _max_rss(calls: int, repeats: int, policy: Path) -> int:
    """Peak RSS (VmHWM, bytes) of `loopguard replay -` fed `repeats` copies of P by a pipe."""
    gen = subprocess.Popen(
        [sys.executable, __file__, "--generate", str(calls), str(repeats)], stdout=subprocess.PIPE
    )
    replay = subprocess.Popen(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "-", "--policy",
         str(policy), "--quiet", "--output", os.devnull],
        stdin=gen.stdout, cwd=REPO,
    )  # fmt: skip
    assert gen.stdout is not None
    gen.stdout.close()
    peak = 0
    # VmHWM, polled: ru_maxrss would keep this (big) bench process's RSS from before the exec.
    while replay.poll() is None:
        try:
            status = Path(f"/proc/{replay.pid}/status").read_text()
        except FileNotFoundError:
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
        time.sleep(0.05)
    replay.wait()
    gen.wait()
    if replay.returncode != 0 or gen.returncode != 0:
        raise RuntimeError(f"replay exited {replay.returncode}, generator {gen.returncode}")
    return peak


def main() -> None:
    """Run every figure and print one JSON line each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--generate", nargs=2, type=int, metavar=("CALLS", "REPEATS"))
    ap.add_argument("--only", choices=["scaling"], help="only the --jobs 1 / --jobs N pairs")
    ap.add_argument("--runs", type=int, help="runs of each figure (default 3, --quick 2)")
    args = ap.parse_args()
    if args.generate:
        generate(*args.generate)
        return
    calls, runs = (20_000, 2) if args.quick else (100_000, 3)
    runs = args.runs or runs
    scaling_only = args.only == "scaling"
    spec = ReplaySpec(load_policy(POLICY), idle_ttl_ms=TTL_MS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.jsonl"
        lines = [v for _, v in workload(calls)]
        path.write_bytes(b"\n".join(lines) + b"\n")
        policy = Path(tmp) / "policy.json"
        policy.write_bytes(orjson.dumps(POLICY))
        candidate = Path(tmp) / "candidate.json"  # a lower criticalThreshold, as in docs/audit.md
        candidate.write_bytes(orjson.dumps(CANDIDATE))
        events = len(lines)
        _replay_rate(spec, path, 1)  # warm-up: page cache, imports
        one, one_cpu, engine, cmp_s, cores = [], [], [], [], os.cpu_count() or 1
        cmp_base: list[float] = []  # seconds of the replay run right before each compare
        scaled: dict[int, list[float]] = {n: [] for n in range(2, cores + 1)}
        scaled_cpu: dict[int, list[float]] = {n: [] for n in scaled}
        scaled_where: dict[int, list[dict[str, list[float]]]] = {n: [] for n in scaled}
        one_where: list[dict[str, list[float]]] = []
        for i in range(runs):
            rate, cpu, spent = _replay_run(spec, path, 1)
            one.append(rate)
            one_cpu.append(cpu)
            one_where.append(spent)
            if not scaling_only:
                engine.append(_engine_rate(lines))
            for n in scaled:
                rate, cpu, spent = _replay_run(spec, path, n)
                scaled[n].append(rate)
                scaled_cpu[n].append(cpu)
                scaled_where[n].append(spent)
                print(f"# run {i}: --jobs {n} / {n} x --jobs 1 {rate / (n * one[-1]):.3f}, "
                      f"load {os.getloadavg()[0]:.2f}, [cpu, wait for cpu, blocked] {spent}",
                      file=sys.stderr)  # fmt: skip
            if not scaling_only:
                base_s, compare_s = _compare_pair(path, policy, candidate)
                cmp_base.append(base_s)
                cmp_s.append(compare_s)
                print(f"# run {i}: replay {one[-1]:,.0f} ev/s, engine {engine[-1]:,.0f} ev/s, "
                      f"compare {cmp_s[-1]:.2f} s", file=sys.stderr)  # fmt: skip
        if not scaling_only:
            print(_figure("replay_events_per_s", one, engine, "engine alone (pre-decoded)",
                          events=events, jobs=1))  # fmt: skip
        print(json.dumps({"load_avg_1m": LOAD[0], "figure": "replay_jobs_1_where",
                          "fractions": "[on a CPU, waiting for a CPU, blocked] of wall",
                          "median": _median_where(one_where)}))  # fmt: skip
        for n, rates in scaled.items():
            pairs = [r / (n * b) for r, b in zip(rates, one, strict=True)]
            print(_figure(f"replay_jobs_{n}_events_per_s", rates, [n * r for r in one],
                          f"{n} x replay --jobs 1", events=events, jobs=n,
                          pair_ratios=[round(p, 3) for p in pairs],
                          pair_ratio_median=round(statistics.median(pairs), 3)))  # fmt: skip
            print(_figure(f"replay_jobs_{n}_cpu_per_event_us", scaled_cpu[n], one_cpu,
                          "replay --jobs 1, CPU per event", events=events, jobs=n))  # fmt: skip
            print(json.dumps({"load_avg_1m": LOAD[0], "figure": f"replay_jobs_{n}_where",
                              "fractions": "[on a CPU, waiting for a CPU, blocked] of wall",
                              "median": _median_where(scaled_where[n]),
                              "runs": scaled_where[n]}))  # fmt: skip
        if scaling_only:
            return
        # The replay runs right before each compare are `loopguard replay` as a user runs it:
        # a process of its own, start-up included, holding none of this bench's objects.
        print(_figure("replay_cli_events_per_s", [events / s for s in cmp_base], engine,
                      "engine alone (pre-decoded, in this process)", events=events, jobs=1,
                      process="`loopguard replay FILE` of its own, start-up included"))  # fmt: skip
        cmp_pairs = [c / b for c, b in zip(cmp_s, cmp_base, strict=True)]
        print(_figure("compare_seconds", cmp_s, cmp_base,
                      "`loopguard replay` of the file, run right before each compare",
                      events=events, pair_ratios=[round(p, 3) for p in cmp_pairs],
                      pair_ratio_median=round(statistics.median(cmp_pairs), 3)))  # fmt: skip
        small = [_max_rss(calls, 1, policy) for _ in range(2)]
        big = [_max_rss(calls, 10, policy) for _ in range(2)]
        print(_figure("replay_max_rss_bytes", big, small, f"max RSS at {events} events",
                      events=10 * events, live_runs=RUNS))  # fmt: skip


if __name__ == "__main__":
    main()
