"""Workload P (docs/benchmarks.md): one worker over a pre-filled topic vs a plain aiokafka relay.

    python bench/pipeline.py            # 200,000 events, 1 warm-up + 3 measured runs each
    python bench/pipeline.py --quick    # 20,000 events, 1 warm-up + 2 runs
    python bench/pipeline.py --profile /tmp/worker.prof   # also cProfile one worker run
    python bench/pipeline.py --floor    # also Faust's floor: the worker with an empty agent
    python bench/pipeline.py --floor --faust-loop   # + the same with Faust's own drain loop
    python bench/pipeline.py --broker kafka --exactly-once   # Apache Kafka; + exactly-once
    python bench/pipeline.py --variant 'c1:LOOPGUARD_COMMIT_INTERVAL_SECONDS=1'  # A/B, same run

Starts the broker (`--broker`: embedded Tansu, or Apache Kafka) on 127.0.0.1, pre-fills the
input topic once (4 partitions), then alternates baseline relays and workers (each worker on
a fresh consumer group and changelog).
`--variant LABEL:NAME=VALUE ...` (repeatable) adds a worker with that environment right after
the base worker in every round; its figures (events/s, changelog bytes) name the variant and
carry `ratio_to_base`.
Worker events/s runs from the first event to the last one counted on its /metrics (polled
every 50 ms); changelog bytes are read after the worker stopped. One JSON line per figure.
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
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.brokers import (  # noqa: E402
    Broker,
    add_broker_argument,
    bench_broker,
    client_options,
    security,
    worker_env,
)
from bench.faust_floor import MODES as FLOOR_MODES  # noqa: E402
from bench.variants import parse_variant  # noqa: E402
from loopguard_fleet.streams.embedded.child import free_port  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402
from loopguard_fleet.streams.kafka.admin import create_topics  # noqa: E402

PARTITIONS = 4
RUNS = 1000
PAD = "x" * 200
POLICY = {"tools": {"loopDetection": {"enabled": True}}}
#: `--per-tool`: the same detection with per-tool settings on the workload's tools, and an
#: agent's own table (docs/policy.md, "Tuning per tool").
PER_TOOL_POLICY = {
    **POLICY,
    "loopguard": {
        "tools": {
            "read": {"warningThreshold": 12, "criticalThreshold": 24},
            "exec": {"criticalThreshold": 30},
            "process": {"knownPoll": True},
        },
        "agents": {"ci": {"tools": {"read": {"criticalThreshold": 40}}}},
    },
}


#: `--fleet`: the same detection with fleet signals on (docs/fleet.md; defaults: 300 s
#: windows, minRuns 5), and with tool health on too.
FLEET_POLICY = {**POLICY, "loopguard": {"fleet": {"enabled": True}}}
FLEET_TOOLS_POLICY = {
    **POLICY,
    "loopguard": {"fleet": {"enabled": True, "toolHealth": {"enabled": True}}},
}


def workload(calls: int, runs: int = RUNS) -> list[tuple[bytes, bytes]]:
    """(key, value) of 2 x `calls` events: E `mixed` calls over 1,000 runs, call then result."""
    seqs = [0] * runs
    out: list[tuple[bytes, bytes]] = []
    for i in range(calls):
        r = i % 10
        run = i % runs
        if r <= 3:
            tool, args, text, details = "read", {"path": f"/f/{i}.txt"}, f"c{i} {PAD}", {"ok": True}
        elif r <= 5:
            tool, args = "process", {"action": "poll", "sessionId": f"s{i % 3}"}
            text, details = f"(no new output) {PAD}", {"status": "running", "aggregated": "steady"}
        elif r <= 7:
            if i % 2:
                tool, args, text = "read", {"path": "/a.txt"}, f"A {PAD}"
            else:
                tool, args, text = "list", {"dir": "/w"}, f"L {PAD}"
            details = {"ok": True}
        elif r == 8:
            tool, args, text = "exec", {"command": "ls -la"}, f"out {PAD}"
            details = {"status": "completed", "exitCode": 0, "durationMs": i, "aggregated": text}
        else:
            tool, args, text, details = "read", {"path": "/same.txt"}, f"same {PAD}", {"ok": True}
        run_id = f"run-{run}"
        key = run_id.encode()
        base = {"run_id": run_id, "tool_call_id": f"call-{i}", "tool": tool, "args": args}
        seqs[run] += 1
        call = {"type": "tool_call", "event_id": f"e{i}c", "seq": seqs[run], **base}
        seqs[run] += 1
        result = {"type": "tool_result", "event_id": f"e{i}r", "seq": seqs[run], **base}
        result["result"] = {"content": [{"type": "text", "text": text}], "details": details}
        out.append((key, orjson.dumps(call)))
        out.append((key, orjson.dumps(result)))
    return out


async def prefill(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes, bytes]],
    stamps_ms: list[int] | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Write the workload into the input topic (record timestamps `stamps_ms`, else now)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=256 * 1024, acks=1,
        **(options or {}),
    )  # fmt: skip
    await producer.start()
    try:
        stamps: list[int | None] = list(stamps_ms) if stamps_ms else [None] * len(records)
        futures = [
            await producer.send(topic, v, key=k, timestamp_ms=t)
            for (k, v), t in zip(records, stamps, strict=True)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def relay(
    bootstrap: str, source: str, sink: str, total: int, options: dict[str, Any] | None = None
) -> float:
    """Baseline: plain aiokafka consume -> json.loads -> produce; events/s first->last."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024, **(options or {}),
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, **(options or {}))
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen, first = 0, 0.0
        while seen < total:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batches.values():
                for rec in records:
                    json.loads(rec.value)
                    await producer.send(sink, rec.value, key=rec.key)
                if not first and records:
                    first = time.perf_counter()
                seen += len(records)
        await producer.flush()
        return total / (time.perf_counter() - first)
    finally:
        await consumer.stop()
        await producer.stop()


def _events_done(web: str) -> float:
    """Sum of loopguard_events_total + rejected + duplicates on a worker's /metrics."""
    with urllib.request.urlopen(web + "/metrics", timeout=2) as resp:
        body = resp.read().decode()
    done = 0.0
    for line in body.splitlines():
        if line.startswith(
            (
                "loopguard_events_total{",
                "loopguard_events_rejected_total{",
                "loopguard_duplicates_total ",
            )
        ):
            done += float(line.rsplit(" ", 1)[1])
    return done


async def changelog_stats(
    bootstrap: str, topic: str, options: dict[str, Any] | None = None
) -> tuple[int, int, int, int]:
    """(records, bytes, first timestamp ms, last timestamp ms) of a changelog topic."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=50, **(options or {})
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        n = size = 0
        first, last = 1 << 62, 0
        idle = 0
        # Read until the topic stays quiet: Tansu can report too-low end offsets, so they
        # are not a reliable stop condition (the worker has already stopped writing).
        while idle < 4:
            batches = await consumer.getmany(timeout_ms=500)
            idle = 0 if any(batches.values()) else idle + 1
            for records in batches.values():
                for rec in records:
                    n += 1
                    size += len(rec.value or b"") + len(rec.key or b"")
                    first, last = min(first, rec.timestamp), max(last, rec.timestamp)
        return n, size, first, last
    finally:
        await consumer.stop()


async def run_worker(
    broker: Broker,
    source: str,
    tag: str,
    total: int,
    workdir: Path,
    profile: str | None,
    extra_env: dict[str, str],
    floor: str | None = None,
    policy_doc: dict[str, Any] = POLICY,
) -> tuple[float, float]:
    """One worker over the pre-filled topic: (events/s, changelog bytes per event).

    With `floor` ("empty" or "table") it runs bench/faust_floor.py: the same worker with an
    agent that does nothing (or one table write) per event.
    """
    port = free_port()
    app_id = f"bench{tag}"
    policy = workdir / "openclaw.json"
    policy.write_bytes(orjson.dumps(policy_doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env.update(
        LOOPGUARD_BROKER=broker.url,
        LOOPGUARD_TOPIC_TOOL_CALLS=source,
        LOOPGUARD_TOPIC_COMPACTIONS=f"{source}.compactions",
        LOOPGUARD_TOPIC_CONTROL=f"{source}.control",
        LOOPGUARD_TOPIC_DEAD_LETTER=f"{source}.dead-letter",
        LOOPGUARD_APP_ID=app_id,
        LOOPGUARD_DATA_DIR=str(workdir / "data"),
        LOOPGUARD_WEB_PORT=str(port),
        LOOPGUARD_POLICY_FILE=str(policy),
        **worker_env(broker),
    )
    env.update(extra_env)
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    target = (
        [str(REPO / "bench" / "faust_floor.py"), floor]
        if floor
        else ["-m", "loopguard_fleet.streams.main", "worker"]
    )
    cmd = [sys.executable, *prof, *target]
    log = (workdir / f"worker-{tag}.log").open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220 -- a child we poll over HTTP, not await
        cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    web = f"http://127.0.0.1:{port}"
    first = done_at = 0.0
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited, see {log.name}")
            try:
                done = await asyncio.to_thread(_events_done, web)
            except OSError:
                done = 0.0
            now = time.perf_counter()
            if done and not first:
                first = now
            if done >= total:
                done_at = now
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("worker did not finish within 600 s")
    finally:
        stop_process(proc, timeout=60)
        log.close()
    # The worker checkpoints run states before each commit, and once more when it stops:
    # the changelog is complete only now.
    _records, size, _first, _last = await changelog_stats(
        broker.bootstrap, f"{app_id}-loopguard-runs-changelog", client_options(broker)
    )
    return total / max(done_at - first, 1e-3), size / total


def _ratio(rates: list[float], baseline: list[float]) -> float:
    """The ratio of two same-run medians, rounded to 3 places."""
    return round(statistics.median(rates) / statistics.median(baseline), 3)


def _figure(name: str, values: list[float], baseline: list[float] | None, **extra: Any) -> str:
    row: dict[str, Any] = {
        "workload": "P",
        "figure": name,
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "runs": [round(v, 1) for v in values],
    }
    if baseline:
        row["baseline"] = "aiokafka relay (consume -> json.loads -> produce)"
        row["baseline_median"] = round(statistics.median(baseline), 1)
        row["baseline_runs"] = [round(v, 1) for v in baseline]
        row["ratio"] = round(statistics.median(values) / statistics.median(baseline), 3)
    row.update(extra)
    return json.dumps(row)


async def main() -> None:
    """Run workload P and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20,000 events, 2 measured runs")
    ap.add_argument("--runs", type=int, default=None, help="measured runs (default 3, quick 2)")
    ap.add_argument("--profile", help="cProfile one extra (unmeasured) worker run into this file")
    ap.add_argument(
        "--floor", action="store_true",
        help="also run bench/faust_floor.py (empty agent; one table write per event)",
    )  # fmt: skip
    ap.add_argument(
        "--worker-env", action="append", default=[], metavar="NAME=VALUE",
        help="extra LOOPGUARD_* setting for the worker (repeatable)",
    )  # fmt: skip
    ap.add_argument(
        "--variant", action="append", default=[], metavar="LABEL:NAME=VALUE ...",
        help="also a worker with this environment on top of --worker-env (repeatable), "
        "right after the base worker in every round: a candidate setting, same run",
    )  # fmt: skip
    ap.add_argument(
        "--exactly-once", action="store_true",
        help="also run the worker with LOOPGUARD_PROCESSING_GUARANTEE=exactly_once (Kafka)",
    )  # fmt: skip
    ap.add_argument(
        "--per-tool", action="store_true",
        help="also run the worker with per-tool settings (PER_TOOL_POLICY): with / without",
    )  # fmt: skip
    ap.add_argument(
        "--fleet", action="store_true",
        help="also run the worker with fleet signals on, then with tool health too: on / off",
    )  # fmt: skip
    ap.add_argument(
        "--faust-loop", action="store_true",
        help="also run the worker (and floors) with LOOPGUARD_FAUST_FAST_PATH=0: before/after",
    )  # fmt: skip
    ap.add_argument(
        "--floor-modes", default=",".join(FLOOR_MODES),
        help=f"with --floor: which floors, comma-separated (default {','.join(FLOOR_MODES)})",
    )  # fmt: skip
    ap.add_argument(
        "--active-runs", type=int, default=RUNS,
        help=f"runs the calls are spread over (default {RUNS:,}; beyond the worker's "
        "LOOPGUARD_RUN_CACHE_HOT_RUNS, states are packed between their events)",
    )  # fmt: skip
    add_broker_argument(ap)
    args = ap.parse_args()
    calls = 10_000 if args.quick else 100_000
    runs = args.runs or (2 if args.quick else 3)
    extra_env = dict(item.split("=", 1) for item in args.worker_env)
    variants = [parse_variant(v) for v in args.variant]  # refused before any work
    records = workload(calls, args.active_runs)
    workdir = Path(tempfile.mkdtemp(prefix="loopguard-bench-"))
    try:
        await _bench(args, runs, records, extra_env, variants, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _bench(
    args: argparse.Namespace,
    runs: int,
    records: list[tuple[bytes, bytes]],
    extra_env: dict[str, str],
    variants: list[tuple[str, dict[str, str]]],
    workdir: Path,
) -> None:
    """Start the broker, pre-fill, alternate relay and worker runs, print the figures."""
    total = len(records)
    with bench_broker(args.broker, workdir) as broker:
        source = "bench.tool-calls"
        names = [source, f"{source}.compactions", f"{source}.control", f"{source}.dead-letter"]
        login, options = security(broker), client_options(broker)
        await create_topics(broker.bootstrap, [*names, "bench.relay"], PARTITIONS, security=login)
        await prefill(broker.bootstrap, source, records, options=options)
        worker_rates: list[float] = []
        relay_rates: list[float] = []
        bytes_per_event: list[float] = []
        eos_rates: list[float] = []
        eos_env = {**extra_env, "LOOPGUARD_PROCESSING_GUARANTEE": "exactly_once"}
        old_env = {**extra_env, "LOOPGUARD_FAUST_FAST_PATH": "0"}  # Faust's own drain loop
        old_rates: list[float] = []
        tool_rates: list[float] = []
        variant_rates: dict[str, list[float]] = {label: [] for label, _ in variants}
        variant_bytes: dict[str, list[float]] = {label: [] for label, _ in variants}
        fleet_rates: dict[str, list[float]] = (
            {"fleet": [], "fleet_tool_health": []} if args.fleet else {}
        )
        fleet_docs = {"fleet": FLEET_POLICY, "fleet_tool_health": FLEET_TOOLS_POLICY}
        modes = [m for m in args.floor_modes.split(",") if m in FLOOR_MODES]
        floors: dict[str, list[float]] = {mode: [] for mode in modes} if args.floor else {}
        old_floors: dict[str, list[float]] = (
            {mode: [] for mode in floors} if args.faust_loop else {}
        )
        for i in range(runs + 1):  # run 0 is the warm-up
            rate = await relay(broker.bootstrap, source, "bench.relay", total, options)
            profile = None
            w_rate, per_event = await run_worker(
                broker, source, str(i), total, workdir, profile, extra_env
            )
            for n, (label, env) in enumerate(variants):  # tagged by index: a label may be
                v_rate, v_bytes = await run_worker(  # no valid Kafka name
                    broker, source, f"v{n}r{i}", total, workdir, None, {**extra_env, **env}
                )
                print(f"# run {i}: worker, variant {label} {v_rate:,.0f} ev/s, changelog "
                      f"{v_bytes:.0f} B/event", file=sys.stderr)  # fmt: skip
                if i:
                    variant_rates[label].append(v_rate)
                    variant_bytes[label].append(v_bytes)
            if args.faust_loop:
                o_rate, _ = await run_worker(
                    broker, source, f"old{i}", total, workdir, None, old_env
                )
                print(f"# run {i}: worker, Faust's drain loop {o_rate:,.0f} ev/s", file=sys.stderr)
                if i:
                    old_rates.append(o_rate)
            print(
                f"# run {i}{' (warm-up)' if i == 0 else ''}: worker {w_rate:,.0f} ev/s, "
                f"relay {rate:,.0f} ev/s, changelog {per_event:.0f} B/event",
                file=sys.stderr,
            )
            if args.per_tool:
                t_rate, _ = await run_worker(
                    broker, source, f"tools{i}", total, workdir, None, extra_env,
                    policy_doc=PER_TOOL_POLICY,
                )  # fmt: skip
                print(f"# run {i}: worker, per-tool settings {t_rate:,.0f} ev/s", file=sys.stderr)
                if i:
                    tool_rates.append(t_rate)
            for name, rates in fleet_rates.items():
                f_rate, _ = await run_worker(
                    broker, source, f"{name}{i}", total, workdir, None, extra_env,
                    policy_doc=fleet_docs[name],
                )  # fmt: skip
                print(f"# run {i}: worker, {name} {f_rate:,.0f} ev/s", file=sys.stderr)
                if i:
                    rates.append(f_rate)
            if args.exactly_once:
                e_rate, _ = await run_worker(
                    broker, source, f"eos{i}", total, workdir, None, eos_env
                )
                print(f"# run {i}: worker, exactly-once {e_rate:,.0f} ev/s", file=sys.stderr)
                if i:
                    eos_rates.append(e_rate)
            for mode, rates in floors.items():
                f_rate, _ = await run_worker(
                    broker, source, f"{mode}{i}", total, workdir, None, extra_env, floor=mode
                )
                print(f"# run {i}: Faust floor ({mode}) {f_rate:,.0f} ev/s", file=sys.stderr)
                if i:
                    rates.append(f_rate)
            for mode, rates in old_floors.items():
                f_rate, _ = await run_worker(
                    broker, source, f"old{mode}{i}", total, workdir, None, old_env, floor=mode
                )
                print(f"# run {i}: Faust floor ({mode}), Faust's loop {f_rate:,.0f} ev/s",
                      file=sys.stderr)  # fmt: skip
                if i:
                    rates.append(f_rate)
            if i:
                worker_rates.append(w_rate)
                relay_rates.append(rate)
                bytes_per_event.append(per_event)
        if args.profile:  # an extra, unmeasured run: cProfile slows the worker ~3x
            await run_worker(broker, source, "prof", total, workdir, args.profile, extra_env)
            print(f"# profile written to {args.profile}", file=sys.stderr)
        on = {"events": total, "broker": args.broker, "active_runs": args.active_runs}
        on |= {"worker_env": extra_env} if extra_env else {}
        print(_figure("worker_events_per_s", worker_rates, relay_rates, **on))
        print(_figure("changelog_bytes_per_event", bytes_per_event, None, **on))
        for label, env in variants:
            rates = variant_rates[label]
            vs_base = _ratio(rates, worker_rates)
            print(_figure("worker_events_per_s", rates, relay_rates, variant=label,
                          variant_env=env, ratio_to_base=vs_base, **on))  # fmt: skip
            changelog, vs_base = variant_bytes[label], _ratio(variant_bytes[label], bytes_per_event)
            print(_figure("changelog_bytes_per_event", changelog, None, variant=label,
                          variant_env=env, ratio_to_base=vs_base, **on))  # fmt: skip
        if tool_rates:
            print(_figure("worker_per_tool_events_per_s", tool_rates, relay_rates,
                          vs_without_per_tool=_ratio(tool_rates, worker_rates), **on))  # fmt: skip
        for name, rates in fleet_rates.items():
            print(_figure(f"worker_{name}_events_per_s", rates, relay_rates,
                          vs_fleet_off=_ratio(rates, worker_rates), **on))  # fmt: skip
        if old_rates:
            speedup = _ratio(worker_rates, old_rates)
            print(_figure("worker_faust_loop_events_per_s", old_rates, relay_rates,
                          fast_path_speedup=speedup, **on))  # fmt: skip
        if eos_rates:
            cost = _ratio(eos_rates, worker_rates)
            print(_figure("worker_exactly_once_events_per_s", eos_rates, relay_rates,
                          ratio_to_at_least_once=cost, **on))  # fmt: skip
        for mode, rates in floors.items():
            print(_figure(f"faust_floor_{mode}_events_per_s", rates, relay_rates, **on))
        for mode, rates in old_floors.items():
            speedup = _ratio(floors[mode], rates)
            print(_figure(f"faust_floor_{mode}_faust_loop_events_per_s", rates, relay_rates,
                          fast_path_speedup=speedup, **on))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
