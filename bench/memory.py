"""Resident memory per active run: one worker holding 10,000 runs (issue 4's capacity figure).

    python bench/memory.py            # 10,000 runs x 15 calls; 3 workers (no warm-up: a
                                      # fresh process each, and RSS is not a rate)
    python bench/memory.py --quick    # 10,000 runs x 3 calls; 1 worker

Starts the bundled broker on 127.0.0.1; each worker (subprocess, fresh topics and group) is
started over empty topics, its RSS read from /proc once it idles in its group, then the bench
sends `calls` x 2 events of workload P's `mixed` calls spread over 10,000 runs and reads the RSS
again once /metrics counts them all. Figure: (RSS after - RSS before) / runs, in bytes, beside
the target (4,096 B) and the mean compact `RunState` size those runs serialise to.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pipeline import PARTITIONS, POLICY, _events_done, prefill, workload  # noqa: E402
from config import load_policy  # noqa: E402
from detectors import RunState, parse_event, process_event  # noqa: E402
from streams.broker import EmbeddedBroker, create_topics, free_port  # noqa: E402
from streams.processes import stop_process  # noqa: E402

ACTIVE_RUNS = 10_000
TARGET_BYTES = 4096


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def state_size(records: list[tuple[bytes, bytes]]) -> float:
    """Mean `RunState.to_json()` bytes of the runs after these events (engine only)."""
    th = load_policy(POLICY).with_channel_tools(["telegram"]).for_agent(None)
    states: dict[bytes, RunState] = {}
    for key, value in records:
        process_event(states.setdefault(key, RunState()), parse_event(orjson.loads(value)), th)
    return statistics.mean(len(s.to_json()) for s in states.values())


async def one_worker(
    broker: EmbeddedBroker, tag: str, records: list[tuple[bytes, bytes]], workdir: Path
) -> float:
    """Bytes of RSS per active run for one fresh worker."""
    source = f"mem{tag}.tool-calls"
    names = [source, f"mem{tag}.compactions", f"mem{tag}.control", f"mem{tag}.dead-letter"]
    await create_topics(broker.bootstrap, names, PARTITIONS)
    port = free_port()
    policy = workdir / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env.update(
        LOOPGUARD_BROKER=broker.url, LOOPGUARD_TOPIC_TOOL_CALLS=names[0],
        LOOPGUARD_TOPIC_COMPACTIONS=names[1], LOOPGUARD_TOPIC_CONTROL=names[2],
        LOOPGUARD_TOPIC_DEAD_LETTER=names[3], LOOPGUARD_APP_ID=f"mem{tag}",
        LOOPGUARD_DATA_DIR=str(workdir / "data"), LOOPGUARD_WEB_PORT=str(port),
        LOOPGUARD_POLICY_FILE=str(policy), LOOPGUARD_RECOVERY_CONSISTENCY_CHECK="false",
    )  # fmt: skip
    log = (workdir / f"worker-{tag}.log").open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220 -- a child we poll over HTTP, not await
        [sys.executable, "-m", "streams.main", "worker"], cwd=REPO, env=env, stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    web = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # up and serving /metrics, then a few seconds to join its group
            try:
                await asyncio.to_thread(_events_done, web)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start, see {log.name}") from None
                await asyncio.sleep(0.2)
        await asyncio.sleep(6)
        before = rss_bytes(proc.pid)
        await prefill(broker.bootstrap, source, records)
        deadline = time.monotonic() + 600
        while await asyncio.to_thread(_events_done, web) < len(records):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not finish, see {log.name}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)
        after = rss_bytes(proc.pid)
    finally:
        stop_process(proc, timeout=60)
        log.close()
    return (after - before) / ACTIVE_RUNS


async def main() -> None:
    """Measure and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 calls per run, one worker")
    ap.add_argument("--calls-per-run", type=int, default=None)
    args = ap.parse_args()
    per_run = args.calls_per_run or (3 if args.quick else 15)
    runs = 1 if args.quick else 3
    records = workload(ACTIVE_RUNS * per_run, runs=ACTIVE_RUNS)
    workdir = Path(tempfile.mkdtemp(prefix="loopguard-memory-"))
    values: list[float] = []
    try:
        with EmbeddedBroker(log_dir=workdir) as broker:
            for i in range(runs):
                per = await one_worker(broker, str(i), records, workdir)
                print(f"# worker {i}: {per:,.0f} B per active run", file=sys.stderr)
                values.append(per)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = statistics.median(values)
    print(
        json.dumps(
            {
                "workload": "memory",
                "figure": "rss_bytes_per_active_run",
                "active_runs": ACTIVE_RUNS,
                "calls_per_run": per_run,
                "median": round(med),
                "min": round(min(values)),
                "max": round(max(values)),
                "runs": [round(v) for v in values],
                "baseline": "target 4,096 B per active run",
                "baseline_value": TARGET_BYTES,
                "ratio": round(med / TARGET_BYTES, 3),
                "state_json_bytes_mean": round(state_size(records)),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
