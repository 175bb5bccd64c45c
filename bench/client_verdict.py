"""A verdict's latency as an agent runtime sees it: `RuntimeClient` against `loopguard up`.

    python bench/client_verdict.py --quick                  # 200 calls per setting
    python bench/client_verdict.py --fetch-max-wait-ms 1,5,20,100
    python bench/client_verdict.py --quick --broker kafka   # `up --broker kafka`

Starts `loopguard up` (embedded Tansu and a worker with detection on; a subprocess, stopped
by PID), then for each `fetch_max_wait_ms` a `RuntimeClient` sends `tool_call`s with
`want_verdict` one after another, as one agent does, and times `tool_call` + `verdict`.
The same-run baseline is the client's previous hard-coded 100 ms. One JSON line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loopguard_fleet.streams.client import RuntimeClient  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402

BASELINE_WAIT_MS = 100  # what RuntimeClient hard-coded before the setting existed
READY_S = 120.0


def start_up(
    log: Path, broker: str, settings: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`loopguard up --broker BROKER` in the background, with only the `LOOPGUARD_*` settings
    given; its broker address once it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env |= settings or {}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopguard_fleet.streams.cli", "up", "--broker", broker],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "ready;" in text:
            match = re.search(r"^broker\s+(\S+:\d+)", text, re.MULTILINE)  # not "installing"
            assert match is not None, text
            return proc, match.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"loopguard up exited:\n{text}")
        time.sleep(0.2)  # polling a child's log, not a result
    stop_process(proc, timeout=20)
    raise SystemExit(f"loopguard up not ready after {READY_S:.0f}s; see {log}")


async def _measure(
    address: str, wait_ms: int, calls: int, warmup: int, setting: int
) -> tuple[list[float], int]:
    """Latencies (ms) of `calls` sequential tool_call + verdict pairs, and the timeouts.

    Each setting's client has runs of its own (`setting` in their ids): a new client numbers
    its runs' seq from 1 again, and the worker drops a known run's replayed seqs as
    redeliveries, so a repeated setting on shared run ids would time out by design."""
    latencies: list[float] = []
    timeouts = 0
    async with RuntimeClient(address, fetch_max_wait_ms=wait_ms) as client:
        runs = [client.run(f"bench-{setting}-{wait_ms}-{os.getpid()}-{n}") for n in range(50)]
        for i in range(warmup + calls):
            run = runs[i % len(runs)]
            started = time.perf_counter()
            cid = await run.tool_call("read", {"path": f"/f{i}"}, want_verdict=True)
            reply = await run.verdict(cid, timeout=2.0)
            took = (time.perf_counter() - started) * 1000
            if i >= warmup:
                timeouts += reply.is_timeout
                latencies.append(took)
    return latencies, timeouts


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` (nearest rank), to 0.01."""
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def main() -> None:
    """Measure and print one JSON line per figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 calls per setting")
    ap.add_argument("--calls", type=int, default=2000, help="measured calls per setting")
    ap.add_argument("--fetch-max-wait-ms", default=f"5,{BASELINE_WAIT_MS}", help="comma list")
    ap.add_argument(
        "--broker", choices=["tansu", "kafka"], default="tansu",
        help="the broker `up` starts: embedded Tansu (its default) or Apache Kafka",
    )  # fmt: skip
    args = ap.parse_args()
    calls, warmup = (200, 20) if args.quick else (args.calls, 100)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"loopguard-bench-up-{os.getpid()}.log"
    proc, address = start_up(log, args.broker)
    try:
        for setting, wait in enumerate(int(w) for w in args.fetch_max_wait_ms.split(",")):
            latencies, timeouts = asyncio.run(_measure(address, wait, calls, warmup, setting))
            for figure, q in (("verdict_p50_ms", 0.5), ("verdict_p99_ms", 0.99)):
                print(json.dumps({
                    "workload": "client-verdict", "figure": figure, "unit": "ms",
                    "broker": args.broker, "fetch_max_wait_ms": wait,
                    "value": percentile(latencies, q),
                    "max": round(max(latencies), 2), "calls": calls, "timeouts": timeouts,
                    "baseline": f"fetch_max_wait_ms={BASELINE_WAIT_MS} (the previous default)",
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }), flush=True)  # fmt: skip
    finally:
        stop_process(proc, timeout=30)
        log.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
