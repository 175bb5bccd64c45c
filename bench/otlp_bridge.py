"""Workload O of docs/benchmarks.md: the OTLP bridge's core (`SpanBridge`: decode, order, map
to wire events), no broker, against the protobuf parse of the same payloads as its floor.

    python bench/otlp_bridge.py            # 200,000 tool spans; 3 alternations
    python bench/otlp_bridge.py --quick    # 20,000 tool spans; 3 alternations
    python bench/otlp_bridge.py --with-p   # also P's worker on Tansu, alternated with the bridge

The payloads are built beforehand as the Collector's Kafka exporter writes them (`otlp_proto`
`ExportTraceServiceRequest`s from opentelemetry-proto): 1,000 runs, 100 GenAI `execute_tool`
spans per payload with captured arguments and results, shuffled within each payload (spans
reach the Collector when they end), each run's spans 1 s apart, the live default reorder
window (2 s). The bridge pass feeds every payload then `finish`es, as the worker's agent and an
audit do; it must release two events per span.

Baseline, alternated pass by pass in the same run after one warm-up each: the floor, parsing
each payload with protobuf (`ParseFromString`, the decoder the bridge must use) and walking its
spans. It isolates what the bridge adds over decoding; `replay --input-format otlp` would add the
detection engine on top, which bench/replay.py measures. Prints one JSON line: median spans/s
of each side, the ratio, and the events/s the bridge feeds the worker (two per span), to read
beside P's events/s (bench/pipeline.py; the target is ≥ 0.5 × P). `--with-p` measures that
ratio in the same run: each floor and bridge pass is followed by one worker run of workload P
(bench/pipeline.py's, on an embedded Tansu), and a second JSON line gives, from the same
bridge passes, the bridge's events/s against P's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span  # noqa: E402

from loopguard_fleet.streams.otlp.core import SpanBridge  # noqa: E402
from loopguard_fleet.streams.otlp.options import OtlpOptions  # noqa: E402

RUNS = 1_000  # live runs, as in P
PER_PAYLOAD = 100  # tool spans per Kafka message
STEP_NS = 1_000_000_000  # a run's spans start 1 s apart: about 2,000 held by the window
T0_NS = 1_796_119_200_000_000_000
MAX_BYTES = 64 << 20
TOOLS = ("read", "exec", "web_search", "process")
LOAD = [round(x, 2) for x in os.getloadavg()]  # the host's load when the bench started


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _span(run: int, n: int) -> Span:
    """Run `run`'s `n`-th tool call: a GenAI `execute_tool` span with content captured."""
    tool = TOOLS[(run + n) % len(TOOLS)]
    start = T0_NS + n * STEP_NS + run * 1_000
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": f"call-{run}-{n}",
        "gen_ai.tool.call.arguments": json.dumps({"path": f"/srv/{run}/{n % 7}", "limit": 50}),
        "gen_ai.tool.call.result": f"{n % 5} lines",
        "gen_ai.conversation.id": f"run-{run}",
        "gen_ai.agent.id": f"agent-{run % 10}",
    }
    return Span(
        trace_id=run.to_bytes(16, "big"),
        span_id=(run << 32 | n).to_bytes(8, "big"),
        name=f"execute_tool {tool}",
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=start + STEP_NS * 2 // 5,
        attributes=[_kv(k, v) for k, v in attrs.items()],
    )


def payloads(spans: int, seed: int = 7) -> list[bytes]:
    """`spans` tool spans of `RUNS` runs, in start order overall, as serialised requests of
    `PER_PAYLOAD` spans each, shuffled within each request."""
    rng = random.Random(seed)
    ordered = [(n, run) for n in range(spans // RUNS + 1) for run in range(RUNS)][:spans]
    out: list[bytes] = []
    for i in range(0, spans, PER_PAYLOAD):
        batch = [_span(run, n) for n, run in ordered[i : i + PER_PAYLOAD]]
        rng.shuffle(batch)
        resource = Resource(attributes=[_kv("service.name", "bench-agent")])
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=batch)])]
        )
        out.append(request.SerializeToString())
    return out


def bridge_pass(data: list[bytes]) -> tuple[float, int]:
    """Seconds to feed every payload through a fresh bridge and finish; the events it made."""
    bridge = SpanBridge.of_options(OtlpOptions(), MAX_BYTES)
    events = 0
    t0 = time.perf_counter()
    for raw in data:
        events += len(bridge.feed(raw).events)
    events += len(bridge.finish().events)
    return time.perf_counter() - t0, events


def floor_pass(data: list[bytes]) -> tuple[float, int]:
    """Seconds to parse every payload with protobuf and walk its spans; the spans seen."""
    seen = 0
    t0 = time.perf_counter()
    for raw in data:
        request = ExportTraceServiceRequest()
        request.ParseFromString(raw)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    seen += len(span.attributes) > 0
    return time.perf_counter() - t0, seen


P_BASELINE = "P: the worker's events/s (bench/pipeline.py), alternated in the same run"
PRun = Callable[[int], Awaitable[float]]  # one P worker run (its index): its events/s


async def measure(spans: int, runs: int, with_p: bool = False) -> list[dict[str, Any]]:
    """Median spans/s of the bridge and of its floor over `runs` alternating passes; with
    `with_p`, P's worker runs after each pair of passes, and a second figure gives the
    bridge's events/s against the worker's, from the same passes."""
    data = payloads(spans)
    sides: dict[str, Callable[[list[bytes]], tuple[float, int]]] = {
        "floor": floor_pass,
        "bridge": bridge_pass,
    }
    expect = {"floor": spans, "bridge": 2 * spans}  # every span seen; two events per span
    rates: dict[str, list[float]] = {name: [] for name in sides}
    worker: list[float] = []
    async with p_worker(spans) if with_p else _no_p() as p:
        run_p = None if p is None else p[0]
        p_events = 0 if p is None else p[1]
        gc.collect()
        gc.freeze()  # the prebuilt payloads are harness data: keep the collector off them
        try:
            for i in range(runs + 1):  # pass 0 warms every side up
                for name, side in sides.items():
                    dt, count = side(data)
                    if count != expect[name]:
                        raise SystemExit(f"{name}: {count} instead of {expect[name]}")
                    if i:
                        rates[name].append(spans / dt)
                if run_p is not None:
                    rate = await run_p(i)
                    if i:
                        worker.append(rate)
        finally:
            gc.unfreeze()
    bridge, floor = statistics.median(rates["bridge"]), statistics.median(rates["floor"])
    figures: list[dict[str, Any]] = [
        {
            "load_avg_1m": LOAD[0],
            "workload": "O",
            "figure": "otlp_bridge_spans_per_s",
            "median": round(bridge),
            "runs": [round(r) for r in rates["bridge"]],
            "baseline": "protobuf parse of the same payloads (the floor)",
            "baseline_median": round(floor),
            "baseline_runs": [round(r) for r in rates["floor"]],
            "ratio": round(bridge / floor, 3),
            "events_per_s": round(2 * bridge),
            "spans": spans,
            "spans_per_payload": PER_PAYLOAD,
            "payload_bytes": sum(map(len, data)),
        }
    ]
    if worker:
        events = [2 * r for r in rates["bridge"]]
        b, w = statistics.median(events), statistics.median(worker)
        figures.append(
            {
                "load_avg_1m": LOAD[0],
                "workload": "O",
                "figure": "otlp_bridge_events_per_s",
                "median": round(b),
                "runs": [round(r) for r in events],
                "baseline": P_BASELINE,
                "baseline_median": round(w),
                "baseline_runs": [round(r) for r in worker],
                "ratio": round(b / w, 3),
                "target": 0.5,
                "spans": spans,
                "p_events": p_events,
            }
        )
    return figures


@contextlib.asynccontextmanager
async def _no_p() -> AsyncIterator[tuple[PRun, int] | None]:
    yield None


@contextlib.asynccontextmanager
async def p_worker(spans: int) -> AsyncIterator[tuple[PRun, int]]:
    """P's workload on an embedded Tansu, prefilled once; yields one worker run by index and
    the events each run reads."""
    sys.path.insert(0, str(REPO / "bench"))
    import pipeline  # bench/pipeline.py: P's workload, broker and worker run

    records = pipeline.workload(20_000 if spans < 200_000 else 100_000, pipeline.RUNS)
    workdir = Path(tempfile.mkdtemp(prefix="loopguard-bench-otlp-"))
    try:
        with pipeline.bench_broker("tansu", workdir) as broker:
            source = "bench.tool-calls"
            names = [source, *(f"{source}.{t}" for t in ("compactions", "control", "dead-letter"))]
            await pipeline.create_topics(broker.bootstrap, names, pipeline.PARTITIONS)
            await pipeline.prefill(broker.bootstrap, source, records)

            async def run(i: int) -> float:
                rate, _ = await pipeline.run_worker(
                    broker, source, f"otlp{i}", len(records), workdir, None, {}
                )
                return float(rate)

            yield run, len(records)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    """Measure and print one JSON line (two with `--with-p`)."""
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="20,000 spans instead of 200,000")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--with-p", action="store_true",
        help="also run P's worker on Tansu, alternated with the bridge: the ratio to P",
    )  # fmt: skip
    a = p.parse_args()
    spans = 20_000 if a.quick else 200_000
    for figure in asyncio.run(measure(spans, a.runs, a.with_p)):
        print(json.dumps(figure), flush=True)


if __name__ == "__main__":
    main()
