"""Resident memory per active run: one worker holding 10,000 runs (docs/performance.md).

    python bench/memory.py            # 10,000 runs x 15 calls; 3 workers (no warm-up: a
                                      # fresh process each, and RSS is not a rate)
    python bench/memory.py --quick    # 10,000 runs x 3 calls; 1 worker
    python bench/memory.py --slope    # also 2,500 runs (same calls per run): per-run slope
    python bench/memory.py --runs 1000 5000 10000 --store memory:// --probe
    python bench/memory.py --slope --probe --table-options '{"write_buffer_size": 2097152}' \
        --order run-major   # a candidate RocksDB setting
    python bench/memory.py --variant 'trim-off:LOOPGUARD_MALLOC_TRIM=false'  # A/B, same run
    python bench/memory.py --event-ids client   # event ids as the runtime clients write them

Starts the bundled broker on 127.0.0.1; each worker (subprocess, fresh topics and group) is
started over empty topics, its RSS read from /proc once it idles in its group, then the bench
sends `calls` x 2 events of workload P's `mixed` calls spread over N runs and reads the RSS
again once /metrics counts them all. Figure: (RSS after - RSS before) / N, in bytes, beside
the target (4,096 B) and the mean compact `RunState` size those runs serialise to.

The first JSON line is that figure at the largest N (10,000 by default). With several N
(`--runs` or `--slope`) a second line gives the least-squares slope of RSS growth over N
(the cost of one more active run) and its intercept (the growth any worker shows whatever
its run count: memtable and buffer high-water, pymalloc and glibc arenas). With `--probe`
the workers run bench/memory_probe.py (the same worker plus a /memprobe page) and one more
line per N attributes the growth: run cache, table store (RocksDB memtables or the memory
store's dict), glibc and pymalloc free-but-kept memory, and what malloc_trim gives back.
`--table-options` (RocksDB options of the run-state table) measures a saving without editing
streams/; `--order run-major` sends each run's calls together, so few runs are touched
between two checkpoints, where the default interleaving touches every run between any two.
`--variant LABEL:KEY=VALUE ...` (repeatable) also measures workers with that environment,
interleaved with the base workers (worker i of each variant right after the base's), and
prints one more line per variant with its figure beside the base's: the same-run ratio.

`--order fleet` gives the events the timestamps of a fleet (the worker's clock is the record
timestamps: stream time): the N runs start one after another over 15 minutes of stream time,
each making one call every 10 s (an LLM turn) until its calls are done, then going quiet; the
30-minute idle TTL keeps all N active to the end. At any moment a few hundred runs are busy
and the rest quiet, so this measures what `LOOPGUARD_RUN_CACHE_IDLE_SECONDS` buys; the default
(interleaved, every run busy at once) is the worst case and stays the headline figure.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pipeline import PARTITIONS, POLICY, _events_done, prefill, workload  # noqa: E402
from bench.variants import parse_variant  # noqa: E402
from loopguard_fleet.config import load_policy  # noqa: E402
from loopguard_fleet.detectors import RunState, parse_event, process_event  # noqa: E402
from loopguard_fleet.streams.embedded.child import free_port  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker  # noqa: E402
from loopguard_fleet.streams.kafka.admin import create_topics  # noqa: E402

ACTIVE_RUNS = 10_000
FLEET_SPAN_S = 900  # --order fleet: the runs start over 15 minutes (under the 30-minute TTL)
FLEET_TURN_S = 10  # one call per run every 10 s
TARGET_BYTES = 4096
PROBE = REPO / "bench" / "memory_probe.py"


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def fleet_order(records: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes, int]]:
    """The events with fleet timestamps (ms from the fleet's start), in time order."""
    by_run: dict[bytes, list[bytes]] = {}
    for key, value in records:
        by_run.setdefault(key, []).append(value)
    longest = max(len(v) for v in by_run.values()) // 2  # calls of the busiest run
    last_start_ms = max(0, FLEET_SPAN_S - longest * FLEET_TURN_S) * 1000
    out = []
    for r, (key, values) in enumerate(by_run.items()):
        start = r * last_start_ms // len(by_run)
        for j, value in enumerate(values):  # call, result, call, ...: a result 100 ms later
            out.append((key, value, start + (j // 2) * FLEET_TURN_S * 1000 + (j % 2) * 100))
    out.sort(key=lambda e: e[2])  # stable: a run's events keep their order
    return out


def client_event_ids(records: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The events with the runtime clients' event ids, `<run_id>:<seq>` (streams/client)."""
    out = []
    for key, value in records:
        event = orjson.loads(value)
        event["event_id"] = f"{event['run_id']}:{event['seq']}"
        out.append((key, orjson.dumps(event)))
    return out


def state_size(records: list[tuple[bytes, bytes]]) -> float:
    """Mean `RunState.to_json()` bytes of the runs after these events (engine only)."""
    th = load_policy(POLICY).with_channel_tools(["telegram"]).for_agent(None)
    states: dict[bytes, RunState] = {}
    for key, value in records:
        process_event(states.setdefault(key, RunState()), parse_event(orjson.loads(value)), th)
    return statistics.mean(len(s.to_json()) for s in states.values())


def _probe(web: str, trim: bool = False) -> dict[str, Any]:
    """A probe worker's /memprobe breakdown."""
    url = web + "/memprobe" + ("?trim=1" if trim else "")
    with urllib.request.urlopen(url, timeout=600) as resp:
        return json.loads(resp.read())


async def one_worker(
    broker: EmbeddedBroker,
    tag: str,
    records: list[tuple[bytes, bytes]],
    workdir: Path,
    options: argparse.Namespace,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """RSS growth (bytes) of one fresh worker over these records, plus its probe reports."""
    source = f"mem{tag}.tool-calls"
    names = [source, f"mem{tag}.compactions", f"mem{tag}.control", f"mem{tag}.dead-letter"]
    await create_topics(broker.bootstrap, names, PARTITIONS)
    port = free_port()
    policy = workdir / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOOPGUARD_", "MEMPROBE_", "PYTHONTRACEMALLOC"))
    }
    env.update(
        LOOPGUARD_BROKER=broker.url, LOOPGUARD_TOPIC_TOOL_CALLS=names[0],
        LOOPGUARD_TOPIC_COMPACTIONS=names[1], LOOPGUARD_TOPIC_CONTROL=names[2],
        LOOPGUARD_TOPIC_DEAD_LETTER=names[3], LOOPGUARD_APP_ID=f"mem{tag}",
        LOOPGUARD_DATA_DIR=str(workdir / "data"), LOOPGUARD_WEB_PORT=str(port),
        LOOPGUARD_POLICY_FILE=str(policy), LOOPGUARD_RECOVERY_CONSISTENCY_CHECK="false",
        LOOPGUARD_STORE=options.store,
    )  # fmt: skip
    for item in options.env:
        key, _, value = item.partition("=")
        env[key] = value
    env.update(extra_env or {})
    if options.table_options:
        env["MEMPROBE_TABLE_OPTIONS"] = options.table_options
    if options.tracemalloc:
        env["PYTHONTRACEMALLOC"] = str(options.tracemalloc)
    probing = options.probe or bool(options.table_options)
    probing |= any(k.startswith("MEMPROBE_") for k in extra_env or {})  # a variant's probe options
    argv = [str(PROBE)] if probing else ["-m", "loopguard_fleet.streams.main", "worker"]
    log = (workdir / f"worker-{tag}.log").open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220 -- a child we poll over HTTP, not await
        [sys.executable, *argv], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    web = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + (180 if options.tracemalloc else 30)  # tracing is slow
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
        if options.probe:
            out["probe_before"] = await asyncio.to_thread(_probe, web)
        if options.order == "fleet":  # record timestamps are stream time; the last one is now
            events = fleet_order(records)
            base = int(time.time() * 1000) - events[-1][2]
            stamps = [base + t for _, _, t in events]
            await prefill(broker.bootstrap, source, [(k, v) for k, v, _ in events], stamps)
        else:
            await prefill(broker.bootstrap, source, records)
        deadline = time.monotonic() + 600
        while True:
            try:  # a busy worker on a loaded host may answer /metrics late: ask again
                if await asyncio.to_thread(_events_done, web) >= len(records):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not finish, see {log.name}")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)
        after = rss_bytes(proc.pid)
        await asyncio.sleep(3)  # past one more commit (Faust's 2.8 s): its checkpoint and trim
        out["settled"] = rss_bytes(proc.pid)
        if options.probe:
            out["probe_after"] = await asyncio.to_thread(_probe, web, True)
        if options.linger:  # later still: the RSS and Faust's acked offsets of a quiet worker
            await asyncio.sleep(options.linger)
            out["late"] = rss_bytes(proc.pid)
            if options.probe:
                out["probe_late"] = await asyncio.to_thread(_probe, web)
    finally:
        stop_process(proc, timeout=60)
        log.close()
    out.update(before=before, after=after, growth=after - before)
    return out


def breakdown(n: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run attribution of one N's growth: medians over workers of the probe deltas."""

    def per_run(get: Any, digits: int | None = None) -> float:
        return round(statistics.median(get(r) for r in results) / n, digits)

    def at(doc: dict[str, Any], *path: str) -> float:
        for p in path:
            doc = doc.get(p, {})
        return float(doc or 0)

    def delta(r: dict[str, Any], *path: str) -> float:
        return at(r["probe_after"], *path) - at(r["probe_before"], *path)

    def after(r: dict[str, Any], *path: str) -> float:
        return at(r["probe_after"], *path)

    table = results[0]["probe_after"]["table"]
    parts: dict[str, Any] = {
        "rss_growth": per_run(lambda r: r["growth"]),
        "rss_growth_after_trim": per_run(
            lambda r: r["probe_after"]["after_trim"]["rss"] - r["before"]
        ),
        "run_cache_deep": per_run(lambda r: after(r, "cache", "deep_bytes")),
        "run_cache_packed": per_run(lambda r: after(r, "cache", "packed_bytes")),
        "runs_packed": statistics.median(after(r, "cache", "packed_runs") for r in results),
        "smaps_heap": per_run(lambda r: delta(r, "smaps", "heap")),
        "smaps_anon_mmap": per_run(lambda r: delta(r, "smaps", "anon_mmap")),
        "smaps_file": per_run(lambda r: delta(r, "smaps", "file")),
        "malloc_in_use": per_run(lambda r: delta(r, "malloc", "in_use")),
        "malloc_free_kept": per_run(lambda r: delta(r, "malloc", "free_kept")),
        "malloc_mmapped": per_run(lambda r: delta(r, "malloc", "mmapped")),
        "malloc_after_trim_free_kept": per_run(
            lambda r: r["probe_after"]["after_trim"]["malloc"]["free_kept"]
            - r["probe_before"]["malloc"]["free_kept"]
        ),
        "pymalloc_arenas": per_run(lambda r: delta(r, "pymalloc", "arenas_bytes")),
        "pymalloc_used": per_run(lambda r: delta(r, "pymalloc", "used_blocks")),
        "pymalloc_free": per_run(lambda r: delta(r, "pymalloc", "free_blocks")),
    }  # fmt: skip
    if "changelog_applied" in results[0]["probe_after"]:
        parts["changelog_rows_applied_per_run"] = per_run(
            lambda r: after(r, "changelog_applied", "events"), 2
        )
        parts["store_sets_per_run"] = per_run(
            lambda r: after(r, "changelog_applied", "store_sets"), 2
        )
    if "trims" in results[0]["probe_after"]:
        trims = [r["probe_after"]["trims"] for r in results]
        parts["malloc_trims"] = round(statistics.median(t["count"] for t in trims))
        parts["malloc_trim_ms_mean"] = round(
            statistics.median(1000 * t["seconds"] / max(1, t["count"]) for t in trims), 2
        )
    if "acks" in results[0]["probe_after"]:  # Faust's acked, uncommitted offsets at the end
        parts["acked_pending"] = round(
            statistics.median(after(r, "acks", "pending") for r in results)
        )
        parts["acked_ranges"] = round(
            statistics.median(r["probe_after"]["acks"].get("ranges", 0) for r in results)
        )
        parts["acked_index_bytes_per_run"] = per_run(lambda r: after(r, "acks", "index_bytes"))
        parts["acked_list_bytes_per_run"] = per_run(lambda r: after(r, "acks", "list_bytes"))
        # [held, lowest, highest, committed] of the first worker, per input partition
        parts["acked_by_partition"] = results[0]["probe_after"]["acks"].get("by_partition")
    if "late" in results[0]:
        parts["rss_growth_late"] = per_run(lambda r: r["late"] - r["before"])
        if "probe_late" in results[0]:
            late = [r["probe_late"] for r in results]
            parts["late_acked_pending"] = round(
                statistics.median(p["acks"]["pending"] for p in late)
            )
            parts["late_checkpoints"] = round(statistics.median(p["checkpoints"] for p in late))
            parts["late_acked_index_bytes_per_run"] = per_run(
                lambda r: r["probe_late"]["acks"]["index_bytes"]
            )
            parts["late_pymalloc_arenas"] = per_run(
                lambda r: (
                    r["probe_late"]["pymalloc"]["arenas_bytes"]
                    - r["probe_before"]["pymalloc"]["arenas_bytes"]
                )
            )
            parts["late_malloc_mmapped"] = per_run(
                lambda r: (
                    r["probe_late"]["malloc"]["mmapped"] - r["probe_before"]["malloc"]["mmapped"]
                )
            )
            parts["late_acked_by_partition"] = late[0]["acks"].get("by_partition")
    if "checkpoints" in results[0]["probe_after"]:
        parts["checkpoints"] = round(statistics.median(after(r, "checkpoints") for r in results))
        parts["table_writes_per_run"] = per_run(lambda r: after(r, "table_writes"), 2)
    if "total" in table:
        parts["rocksdb_memtables"] = per_run(
            lambda r: after(r, "table", "total", "size-all-mem-tables")
        )
        parts["rocksdb_memtable_entries_per_run"] = per_run(
            lambda r: after(r, "table", "total", "num-entries-active-mem-table"), 2
        )
        parts["rocksdb_writes_per_run"] = per_run(
            lambda r: after(r, "table", "total", "sequence"), 2
        )
        parts["rocksdb_block_cache"] = per_run(
            lambda r: after(r, "table", "total", "block-cache-usage")
        )
        parts["rocksdb_options"] = table.get("options")
    else:
        parts["memory_store_deep"] = per_run(lambda r: after(r, "table", "deep_bytes"))
    top = results[0]["probe_after"].get("tracemalloc") or []
    if top:
        parts["tracemalloc_growth"] = round(top[0]["total_growth"] / n)
        parts["tracemalloc_top"] = [
            {"site": t["site"], "bytes_per_run": round(t["bytes"] / n), "count": t["count"]}
            | ({"stack": t["stack"]} if "stack" in t else {})
            for t in top[1:21]
        ]
    peak = results[0]["probe_after"].get("tracemalloc_peak") or []
    if peak:  # MEMPROBE_PEAK=1: the traced heap at its highest during the load
        parts["tracemalloc_peak_growth"] = round(peak[0]["total_growth"] / n)
        parts["tracemalloc_peak_top"] = [
            {"site": t["site"], "bytes_per_run": round(t["bytes"] / n), "count": t["count"]}
            for t in peak[1:16]
        ]
    census = results[0]["probe_after"].get("census") or []
    if census:
        parts["census_top"] = [
            {
                "type": c["type"],
                "per_run": round(c["count"] / n, 2),
                "bytes_per_run": round(c["bytes"] / n),
            }
            for c in census
        ]
    return {
        "workload": "memory",
        "figure": "rss_breakdown_bytes_per_run",
        "active_runs": n,
        **parts,
    }


async def main() -> None:
    """Measure; print the classic JSON line, then the slope and breakdown lines if asked."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 calls per run, one worker")
    ap.add_argument("--calls-per-run", type=int, default=None)
    ap.add_argument("--runs", type=int, nargs="+", default=None, metavar="N",
                    help="active run counts to measure (default 10,000)")  # fmt: skip
    ap.add_argument("--slope", action="store_true", help="measure 2,500 and 10,000 runs")
    ap.add_argument("--workers", type=int, default=None, help="workers per run count")
    ap.add_argument("--store", default="rocksdb://", choices=["rocksdb://", "memory://"])
    ap.add_argument("--probe", action="store_true", help="attribute the growth (memory_probe)")
    ap.add_argument("--table-options", default=None, metavar="JSON",
                    help='RocksDB options of the table, e.g. {"write_buffer_size": 4194304}',
    )  # fmt: skip
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                    help="run the probe worker under PYTHONTRACEMALLOC=FRAMES")  # fmt: skip
    ap.add_argument("--order", default="interleaved", choices=["interleaved", "run-major", "fleet"],
                    help="run-major: each run's calls together (few runs per checkpoint); "
                    "fleet: runs staggered over 15 min of stream time, a call per run every 10 s",
    )  # fmt: skip
    ap.add_argument("--event-ids", default="workload", choices=["workload", "client"],
                    help="client: event ids as the runtime clients write them, <run_id>:<seq> "
                    "(workload P's are e<i>c / e<i>r)",
    )  # fmt: skip
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the worker")  # fmt: skip
    ap.add_argument("--linger", type=float, default=0, metavar="S",
                    help="read the RSS (and probe) again S seconds after the end")  # fmt: skip
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE ...",
                    help="also measure workers with this environment (space-separated), "
                    "interleaved with the base workers; each gets a ratio to the base",
    )  # fmt: skip
    args = ap.parse_args()
    if args.tracemalloc:
        args.probe = True
    per_run = args.calls_per_run or (3 if args.quick else 15)
    workers = args.workers or (1 if args.quick else 3)
    default = [ACTIVE_RUNS // 4, ACTIVE_RUNS] if args.slope else [ACTIVE_RUNS]
    counts = sorted(set(args.runs or default))
    records = {n: workload(n * per_run, runs=n) for n in counts}
    if args.event_ids == "client":
        records = {n: client_event_ids(r) for n, r in records.items()}
    if args.order == "run-major":  # each run's events together (stable: per-run order kept)
        records = {n: sorted(r, key=lambda kv: int(kv[0][4:])) for n, r in records.items()}
    variants = [("base", {}), *(parse_variant(v) for v in args.variant)]
    workdir = Path(tempfile.mkdtemp(prefix="loopguard-memory-"))
    by_variant: dict[str, dict[int, list[dict[str, Any]]]] = {
        label: {n: [] for n in counts} for label, _ in variants
    }
    failed = False
    try:
        with EmbeddedBroker(log_dir=workdir) as broker:
            for i in range(workers):  # interleaved, so drift hits every N and variant alike
                for n in counts:
                    for v, (label, extra) in enumerate(variants):
                        tag = f"{n}-{i}" + (f"-v{v}" if v else "")
                        try:
                            r = await one_worker(broker, tag, records[n], workdir, args, extra)
                        except RuntimeError as exc:  # a crashed worker: its log is kept
                            print(f"# {n:,} runs, worker {i} ({label}): {exc}", file=sys.stderr)
                            failed = True
                            continue
                        print(f"# {n:,} runs, worker {i} ({label}): {r['growth'] / n:,.0f} B per"
                              f" active run (RSS {r['before'] / 2**20:.1f} ->"
                              f" {r['after'] / 2**20:.1f} MiB)", file=sys.stderr)  # fmt: skip
                        by_variant[label][n].append(r)
    except BaseException:
        print(f"# kept {workdir} (worker logs)", file=sys.stderr)
        raise
    if not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, per_run, counts, records, by_variant["base"])
    for label, extra in variants[1:]:
        compare(label, extra, counts, by_variant["base"], by_variant[label])
        if args.probe:
            for n in counts:
                print(json.dumps({**breakdown(n, by_variant[label][n]), "variant": label}))


def compare(
    label: str,
    extra: dict[str, str],
    counts: list[int],
    base: dict[int, list[dict[str, Any]]],
    results: dict[int, list[dict[str, Any]]],
) -> None:
    """One JSON line per variant: its per-run figure at each N beside the base's, same run."""
    points = []
    for n in counts:
        mine = statistics.median(r["growth"] / n for r in results[n])
        theirs = statistics.median(r["growth"] / n for r in base[n])
        settled = statistics.median((r["settled"] - r["before"]) / n for r in results[n])
        base_settled = statistics.median((r["settled"] - r["before"]) / n for r in base[n])
        points.append(
            {
                "active_runs": n,
                "median": round(mine),
                "runs": [round(r["growth"] / n) for r in results[n]],
                "base_median": round(theirs),
                "base_runs": [round(r["growth"] / n) for r in base[n]],
                "ratio_to_base": round(mine / theirs, 3),
                # 3 s later, past one more commit: what a quiet worker keeps
                "settled_median": round(settled),
                "base_settled_median": round(base_settled),
                "settled_ratio_to_base": round(settled / base_settled, 3),
            }
        )
        if all("late" in r for r in results[n] + base[n]):  # --linger
            late = statistics.median((r["late"] - r["before"]) / n for r in results[n])
            base_late = statistics.median((r["late"] - r["before"]) / n for r in base[n])
            points[-1].update(
                late_median=round(late),
                late_runs=[round((r["late"] - r["before"]) / n) for r in results[n]],
                base_late_median=round(base_late),
                base_late_runs=[round((r["late"] - r["before"]) / n) for r in base[n]],
                late_ratio_to_base=round(late / base_late, 3),
            )
    line: dict[str, Any] = {
        "workload": "memory",
        "figure": "rss_bytes_per_active_run_variant",
        "variant": label,
        "env": extra,
        "points": points,
    }
    if len(counts) > 1:
        fit = [(n, float(statistics.median(r["growth"] for r in results[n]))) for n in counts]
        slope, intercept = statistics.linear_regression(*zip(*fit, strict=True))
        line.update(slope=round(slope), intercept_bytes=round(intercept))
    print(json.dumps(line))


def report(
    args: argparse.Namespace,
    per_run: int,
    counts: list[int],
    records: dict[int, list[tuple[bytes, bytes]]],
    results: dict[int, list[dict[str, Any]]],
) -> None:
    """The base workers' lines: the figure at the largest N, the slope, the breakdowns."""
    top = counts[-1]
    values = [r["growth"] / top for r in results[top]]
    med = statistics.median(values)
    line = {
        "workload": "memory",
        "figure": "rss_bytes_per_active_run",
        "active_runs": top,
        "calls_per_run": per_run,
        "median": round(med),
        "min": round(min(values)),
        "max": round(max(values)),
        "runs": [round(v) for v in values],
        "baseline": "target 4,096 B per active run",
        "baseline_value": TARGET_BYTES,
        "ratio": round(med / TARGET_BYTES, 3),
        "state_json_bytes_mean": round(state_size(records[top])),
    }
    variant = args.table_options or args.env or args.order != "interleaved"
    if args.store != "rocksdb://" or variant:
        line["store"] = args.store
        line["order"] = args.order
        line["table_options"] = args.table_options
        line["env"] = args.env
    if args.event_ids != "workload":
        line["event_ids"] = args.event_ids
    print(json.dumps(line))
    if len(counts) > 1:
        points = [(n, float(statistics.median(r["growth"] for r in results[n]))) for n in counts]
        slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
        print(
            json.dumps(
                {
                    "workload": "memory",
                    "figure": "rss_bytes_per_active_run_slope",
                    "calls_per_run": per_run,
                    "order": args.order,
                    "slope": round(slope),
                    "intercept_bytes": round(intercept),
                    "points": [
                        {"active_runs": n, "growth_bytes": round(g), "per_run": round(g / n)}
                        for n, g in points
                    ],
                    "baseline": "target 4,096 B per active run",
                    "baseline_value": TARGET_BYTES,
                    "ratio": round(slope / TARGET_BYTES, 3),
                }
            )
        )
    if args.probe:
        for n in counts:
            print(json.dumps(breakdown(n, results[n])))


if __name__ == "__main__":
    asyncio.run(main())
