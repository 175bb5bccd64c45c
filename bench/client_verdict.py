"""A verdict's latency as an agent runtime sees it: `RuntimeClient` against `loopguard up`.

    python bench/client_verdict.py --quick                  # 200 calls per setting
    python bench/client_verdict.py --fetch-max-wait-ms 1,5,20,100 --aiokafka
    python bench/client_verdict.py --quick --broker kafka   # `up --broker kafka`
    python bench/client_verdict.py --quick --rounds 3       # settings alternate, 3 times
    python bench/client_verdict.py --quick --think-ms 50    # a pause before each call

Starts `loopguard up` (embedded Tansu and a worker with detection on; a subprocess, stopped
by PID), then for each `fetch_max_wait_ms` a `RuntimeClient` sends `tool_call`s with
`want_verdict` one after another, as one agent does (`--think-ms`: the pause its model takes
before each call, so the control fetch in flight at a call is an idle one), and times
`tool_call` + `verdict`. With `--rounds N` the settings take turns N times, so each saw the
same host; a setting's figures pool its rounds. The same-run baselines: the client's former
hard-coded 100 ms and, with `--aiokafka`, the floor: the same calls through a bare aiokafka
producer (acks=all, no linger) and a group-less consumer of the control topic (the first
`--fetch-max-wait-ms`), so what is left above it is the client's own path. One JSON line
per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

from loopguard_fleet.config.defaults import TOPIC_CONTROL, TOPIC_TOOL_CALLS  # noqa: E402
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads  # noqa: E402
from loopguard_fleet.streams.client import RunEvents, RuntimeClient  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402
from loopguard_fleet.streams.kafka.admin import topic_partitions  # noqa: E402
from loopguard_fleet.streams.kafka.connection import cancel_until_done, stop_consumer  # noqa: E402
from loopguard_fleet.streams.wire.codec import run_key  # noqa: E402

BASELINE_WAIT_MS = 100  # what RuntimeClient hard-coded before the setting existed
READY_S = 120.0


def start_up(
    log: Path, broker: str, settings: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`loopguard up --broker BROKER` in the background, with only the `LOOPGUARD_*` settings
    given; its broker address once it is ready. `stop_up` stops it and removes what it left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env |= settings or {}
    # `up` keeps its data directory (log, policy) when it stops: made under one of ours.
    _up_tmp(log).mkdir(exist_ok=True)
    env["TMPDIR"] = str(_up_tmp(log))
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


def stop_up(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Stop `start_up`'s `loopguard up`; remove its log and the data directory it kept."""
    stop_process(proc, timeout=30)
    log.unlink(missing_ok=True)
    shutil.rmtree(_up_tmp(log), ignore_errors=True)


def _up_tmp(log: Path) -> Path:
    return log.with_name(log.name + ".tmp")


async def _measure(
    address: str, wait_ms: int, calls: int, warmup: int, setting: str, think: float
) -> tuple[list[float], int]:
    """Latencies (ms) of `calls` sequential tool_call + verdict pairs, and the timeouts.

    Each setting's client has runs of its own (`setting` in their ids): a new client numbers
    its runs' seq from 1 again, and the worker drops a known run's replayed seqs as
    redeliveries, so a repeated setting on shared run ids would time out by design."""
    latencies: list[float] = []
    timeouts = 0
    async with RuntimeClient(address, fetch_max_wait_ms=wait_ms) as client:
        runs = [client.run(f"bench-{setting}-{os.getpid()}-{n}") for n in range(50)]
        for i in range(warmup + calls):
            run = runs[i % len(runs)]
            await asyncio.sleep(think)  # the agent's model, between two tool calls
            started = time.perf_counter()
            cid = await run.tool_call("read", {"path": f"/f{i}"}, want_verdict=True)
            reply = await run.verdict(cid, timeout=2.0)
            took = (time.perf_counter() - started) * 1000
            if i >= warmup:
                timeouts += reply.is_timeout
                latencies.append(took)
    return latencies, timeouts


async def _measure_aiokafka(
    address: str, wait_ms: int, calls: int, warmup: int, setting: str, think: float
) -> tuple[list[float], int]:
    """As `_measure`, through a bare aiokafka producer and control consumer (the floor)."""
    latencies: list[float] = []
    timeouts = 0
    loop = asyncio.get_running_loop()
    waiting: dict[tuple[object, object], asyncio.Future[None]] = {}
    count = (await topic_partitions(address, [TOPIC_CONTROL], wait=10.0))[TOPIC_CONTROL]
    tps = [TopicPartition(TOPIC_CONTROL, p) for p in range(count)]
    producer = AIOKafkaProducer(bootstrap_servers=address, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(bootstrap_servers=address, group_id=None, fetch_max_wait_ms=wait_ms)

    async def read() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    try:
                        msg = loads(record.value or b"")
                    except NotJSON:
                        continue
                    if isinstance(msg, dict) and msg.get("type") == "verdict":
                        fut = waiting.pop((msg.get("run_id"), msg.get("tool_call_id")), None)
                        if fut is not None and not fut.done():
                            fut.set_result(None)

    await producer.start()
    await consumer.start()
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    reader = asyncio.create_task(read())
    try:
        runs = [RunEvents(f"bench-{setting}-{os.getpid()}-{n}") for n in range(50)]
        for i in range(warmup + calls):
            await asyncio.sleep(think)
            started = time.perf_counter()
            event = runs[i % len(runs)].tool_call("read", {"path": f"/f{i}"}, None, True)
            fut = waiting[(event["run_id"], event["tool_call_id"])] = loop.create_future()
            await producer.send(TOPIC_TOOL_CALLS, dumps(event), key=run_key(event["run_id"]))
            done, _ = await asyncio.wait([fut], timeout=2.0)
            took = (time.perf_counter() - started) * 1000
            if i >= warmup:
                timeouts += not done
                latencies.append(took)
    finally:
        await cancel_until_done([reader])
        await stop_consumer(consumer)
        await producer.stop()
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
    ap.add_argument("--rounds", type=int, default=1, help="times the settings take turns")
    ap.add_argument("--think-ms", type=float, default=0.0, help="pause before each call")
    ap.add_argument(
        "--aiokafka", action="store_true",
        help="add the floor: bare aiokafka, fetch wait = the first --fetch-max-wait-ms",
    )  # fmt: skip
    ap.add_argument(
        "--broker", choices=["tansu", "kafka"], default="tansu",
        help="the broker `up` starts: embedded Tansu (its default) or Apache Kafka",
    )  # fmt: skip
    args = ap.parse_args()
    calls, warmup = (200, 20) if args.quick else (args.calls, 100)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"loopguard-bench-up-{os.getpid()}.log"
    waits = [int(w) for w in args.fetch_max_wait_ms.split(",")]
    settings = [("RuntimeClient", w) for w in waits]
    settings += [("aiokafka", waits[0])] if args.aiokafka else []
    pooled: dict[tuple[str, int], list[float]] = {s: [] for s in settings}
    timeouts = dict.fromkeys(settings, 0)
    loads: dict[tuple[str, int], list[float]] = {s: [] for s in settings}
    think = args.think_ms / 1000
    proc, address = start_up(log, args.broker)
    try:
        for r in range(args.rounds):
            for n, setting in enumerate(settings):
                name, (via, wait) = f"{r}.{n}", setting
                measured = (
                    _measure(address, wait, calls, warmup, name, think)
                    if via == "RuntimeClient"
                    else _measure_aiokafka(address, wait, calls, warmup, name, think)
                )
                latencies, missed = asyncio.run(measured)
                pooled[setting] += latencies
                timeouts[setting] += missed
                loads[setting].append(round(os.getloadavg()[0], 2))
        for (via, wait), latencies in pooled.items():
            for figure, q in (("verdict_p50_ms", 0.5), ("verdict_p99_ms", 0.99)):
                print(json.dumps({
                    "workload": "client-verdict", "figure": figure, "unit": "ms",
                    "broker": args.broker, "via": via, "think_ms": args.think_ms,
                    "fetch_max_wait_ms": wait,
                    "value": percentile(latencies, q), "max": round(max(latencies), 2),
                    "calls": len(latencies), "timeouts": timeouts[(via, wait)],
                    "baseline": f"fetch_max_wait_ms={BASELINE_WAIT_MS} (the former fixed "
                    "wait); via aiokafka: the floor without the client's own path",
                    "loadavg_1m": loads[(via, wait)],
                }), flush=True)  # fmt: skip
    finally:
        stop_up(proc, log)


if __name__ == "__main__":
    main()
