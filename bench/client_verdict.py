"""A verdict's latency as an agent runtime sees it: `RuntimeClient` against `loopguard up`.

    python bench/client_verdict.py --quick                  # 200 calls per setting
    python bench/client_verdict.py --fetch-max-wait-ms 1,5,20,100 --verdict-fetch-max-wait-ms 1
    python bench/client_verdict.py --quick --broker kafka   # `up --broker kafka`
    python bench/client_verdict.py --quick --rounds 3       # settings alternate, 3 times

Starts `loopguard up` (embedded Tansu and a worker with detection on; a subprocess, stopped
by PID), then for each setting (`fetch_max_wait_ms` x `verdict_fetch_max_wait_ms`, the
latter at most the former) a `RuntimeClient` sends `tool_call`s with `want_verdict` one
after another, as one agent does, and times `tool_call` + `verdict`. With `--rounds N` the
settings take turns N times, so each saw the same host; a setting's figures pool its rounds.
The same-run baselines: `verdict_fetch_max_wait_ms` equal to `fetch_max_wait_ms` (the client
before it shortened the fetch wait while a verdict is awaited) and the client's former
hard-coded 100 ms. One JSON line per figure.
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
from loopguard_fleet.streams.client.runtime import DEFAULT_VERDICT_FETCH_MAX_WAIT_MS  # noqa: E402
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
    address: str, waits: tuple[int, int], calls: int, warmup: int, setting: str
) -> tuple[list[float], int]:
    """Latencies (ms) of `calls` sequential tool_call + verdict pairs, and the timeouts.

    Each setting's client has runs of its own (`setting` in their ids): a new client numbers
    its runs' seq from 1 again, and the worker drops a known run's replayed seqs as
    redeliveries, so a repeated setting on shared run ids would time out by design."""
    latencies: list[float] = []
    timeouts = 0
    idle, awaiting = waits
    async with RuntimeClient(
        address, fetch_max_wait_ms=idle, verdict_fetch_max_wait_ms=awaiting
    ) as client:
        runs = [client.run(f"bench-{setting}-{os.getpid()}-{n}") for n in range(50)]
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
        "--verdict-fetch-max-wait-ms", default=f"{DEFAULT_VERDICT_FETCH_MAX_WAIT_MS},5",
        help="comma list; each is paired with every --fetch-max-wait-ms it does not exceed",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1, help="times the settings take turns")
    ap.add_argument(
        "--broker", choices=["tansu", "kafka"], default="tansu",
        help="the broker `up` starts: embedded Tansu (its default) or Apache Kafka",
    )  # fmt: skip
    args = ap.parse_args()
    calls, warmup = (200, 20) if args.quick else (args.calls, 100)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"loopguard-bench-up-{os.getpid()}.log"
    idles = [int(w) for w in args.fetch_max_wait_ms.split(",")]
    awaits = [int(w) for w in args.verdict_fetch_max_wait_ms.split(",")]
    settings = [(i, a) for i in idles for a in awaits if a <= max(i, 1)]
    pooled: dict[tuple[int, int], list[float]] = {s: [] for s in settings}
    timeouts = dict.fromkeys(settings, 0)
    loads: dict[tuple[int, int], list[float]] = {s: [] for s in settings}
    proc, address = start_up(log, args.broker)
    try:
        for r in range(args.rounds):
            for n, waits in enumerate(settings):
                name = f"{r}.{n}"
                latencies, missed = asyncio.run(_measure(address, waits, calls, warmup, name))
                pooled[waits] += latencies
                timeouts[waits] += missed
                loads[waits].append(round(os.getloadavg()[0], 2))
        for (idle, awaiting), latencies in pooled.items():
            for figure, q in (("verdict_p50_ms", 0.5), ("verdict_p99_ms", 0.99)):
                print(json.dumps({
                    "workload": "client-verdict", "figure": figure, "unit": "ms",
                    "broker": args.broker, "fetch_max_wait_ms": idle,
                    "verdict_fetch_max_wait_ms": awaiting,
                    "value": percentile(latencies, q), "max": round(max(latencies), 2),
                    "calls": len(latencies), "timeouts": timeouts[(idle, awaiting)],
                    "baseline": f"verdict_fetch_max_wait_ms = fetch_max_wait_ms (no shorter "
                    f"wait while a verdict is awaited); fetch_max_wait_ms={BASELINE_WAIT_MS} "
                    "(the former fixed wait)",
                    "loadavg_1m": loads[(idle, awaiting)],
                }), flush=True)  # fmt: skip
    finally:
        stop_process(proc, timeout=30)
        log.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
