"""How long a pushed policy takes to decide: from `push` to the first decision that names it.

    python bench/policy_reload.py                    # 10 pushes under 1,000 calls/s, Tansu
    python bench/policy_reload.py --quick            # 4 pushes
    python bench/policy_reload.py --broker kafka     # `up --broker kafka`

Starts `loopguard up` following the policy topic (a subprocess, stopped by PID). A
`RuntimeClient` keeps 1,000 tool calls/s going over 200 runs; one probe run among them asks for
a verdict every 10 ms. Each push publishes a policy whose warning threshold differs from the
live one (docs/policy.md, "Changing the policy"), and the figure is the time from the start of
the push to the first verdict that carries the new `policy_version`. The same-run baseline is
the probe's verdict round trip between pushes: the part of a reload that any decision costs.
One JSON line per figure (target: reload ≤ 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.client_verdict import percentile, start_up, stop_up  # noqa: E402
from loopguard_fleet.config.defaults import TOPIC_POLICY  # noqa: E402
from loopguard_fleet.config.policy_record import encode_policy_record, read_policy_record  # noqa: E402
from loopguard_fleet.streams.client import RuntimeClient  # noqa: E402
from loopguard_fleet.streams.kafka.policy_topic import publish_policy  # noqa: E402

CALLS_PER_S = 1_000
PROBE_EVERY_S = 0.01
LOAD_RUNS = 200
RELOAD_TIMEOUT_S = 10.0
WARM_VERDICTS = 100  # a second of the probe's verdicts before the first push


def _policy(warning: int) -> dict[str, object]:
    """An enforcing policy whose warning threshold is `warning` (critical and breaker above)."""
    return {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": warning,
                "criticalThreshold": 40,
                "globalCircuitBreakerThreshold": 60,
            }
        }
    }


class Probe:
    """One run asking for a verdict every 10 ms: the versions it sees, and its round trips."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []  # (reply time, policy_version)
        self.round_trips_ms: list[float] = []
        self.warm = asyncio.Event()  # set after WARM_VERDICTS verdicts

    async def run(self, client: RuntimeClient, stop: asyncio.Event) -> None:
        """Probe until `stop`."""
        run = client.run(f"probe-{os.getpid()}")
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            cid = await run.tool_call("read", {"path": f"/probe/{i}"}, want_verdict=True)
            reply = await run.verdict(cid, timeout=2.0)
            now = time.perf_counter()
            if not reply.is_timeout:
                self.round_trips_ms.append((now - started) * 1000)
                version = reply.payload.get("policy_version")
                self.seen.append((now, version if isinstance(version, str) else None))
                if len(self.seen) >= WARM_VERDICTS:
                    self.warm.set()
            i += 1
            await asyncio.sleep(max(0.0, PROBE_EVERY_S - (now - started)))

    def first_with(self, version: str, after: float) -> float | None:
        """When the probe first saw `version` after `after` (perf_counter), if it did."""
        return next((t for t, v in self.seen if t >= after and v == version), None)


async def load(client: RuntimeClient, stop: asyncio.Event) -> None:
    """1,000 calls/s over 200 runs, in 10 ms ticks (no verdicts asked)."""
    runs = [client.run(f"load-{os.getpid()}-{n}") for n in range(LOAD_RUNS)]
    per_tick = CALLS_PER_S // 100
    i = 0
    next_tick = time.perf_counter()
    while not stop.is_set():
        for _ in range(per_tick):
            await runs[i % LOAD_RUNS].tool_call("read", {"path": f"/f/{i}"})
            i += 1
        next_tick += 0.01
        await asyncio.sleep(max(0.0, next_tick - time.perf_counter()))


async def _bench(address: str, pushes: int) -> tuple[list[float], list[float], int]:
    """Reload times (ms) of `pushes` pushes under load, the probe's round trips, misses."""
    stop = asyncio.Event()
    probe = Probe()
    reloads: list[float] = []
    misses = 0
    async with RuntimeClient(address) as client:
        tasks = [
            asyncio.create_task(probe.run(client, stop)),
            asyncio.create_task(load(client, stop)),
        ]
        try:
            # Warm: the worker answers (its partitions assigned, its first batches done), so
            # the first push does not also measure the worker's start-up.
            await asyncio.wait_for(probe.warm.wait(), 60)
            probe.round_trips_ms.clear()
            for n in range(pushes):
                document = _policy(10 + (n % 2) * 5 + n)  # a new version each time
                value = encode_policy_record(document)
                version = read_policy_record(value).version
                pushed = time.perf_counter()
                await publish_policy(address, TOPIC_POLICY, value)
                deadline = pushed + RELOAD_TIMEOUT_S
                while (first := probe.first_with(version, pushed)) is None:
                    if time.perf_counter() > deadline:
                        break
                    await asyncio.sleep(0.005)
                if first is None:
                    misses += 1
                else:
                    reloads.append((first - pushed) * 1000)
                await asyncio.sleep(1.0)  # the round-trip baseline between pushes
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    return reloads, probe.round_trips_ms, misses


def main() -> None:
    """Measure and print one JSON line per figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 pushes instead of 10")
    ap.add_argument(
        "--broker", choices=["tansu", "kafka"], default="tansu",
        help="the broker `up` starts: embedded Tansu (its default) or Apache Kafka",
    )  # fmt: skip
    args = ap.parse_args()
    pushes = 4 if args.quick else 10
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"loopguard-bench-reload-{os.getpid()}.log"
    proc, address = start_up(log, args.broker, {"LOOPGUARD_POLICY_TOPIC": TOPIC_POLICY})
    try:
        reloads, round_trips, misses = asyncio.run(_bench(address, pushes))
    finally:
        stop_up(proc, log)
    common = {"workload": "policy-reload", "broker": args.broker, "calls_per_s": CALLS_PER_S,
              "pushes": pushes, "missed": misses, "each_ms": [round(r) for r in reloads],
              "loadavg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
    for figure, q in (("reload_p50_ms", 0.5), ("reload_max_ms", 1.0)):
        value = percentile(reloads, q) if reloads else None  # None: every push missed
        baseline = percentile(round_trips, 0.5 if q == 0.5 else 0.99) if round_trips else None
        print(json.dumps({**common, "figure": figure, "unit": "ms", "value": value,
                          "target": "<= 1000", "baseline": baseline,
                          "baseline_is": "the probe's verdict round trip (p50 / p99)"}),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
