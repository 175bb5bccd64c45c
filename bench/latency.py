"""Workload L (docs/benchmarks.md): produce -> verdict latency of one worker vs an echo relay.

    python bench/latency.py            # 1,000 calls/s; 40 s warm-up + 3 x 60 s per side
    python bench/latency.py --quick    # 2 s warm-up + 2 x 5 s per side
    python bench/latency.py --fetch-max-wait-ms 0,5,20,100   # sweep the worker's setting
    python bench/latency.py --broker kafka                   # on Apache Kafka
    python bench/latency.py --worker-env LOOPGUARD_FAUST_CONSUMER_THREAD=true  # a setting
    python bench/latency.py --background-load 1              # on a loaded host
    python bench/latency.py --variant 'c1:LOOPGUARD_COMMIT_INTERVAL_SECONDS=1'  # A/B, same run

Starts, each on a broker of its own (`--broker`: embedded Tansu, or Apache Kafka) on
127.0.0.1, a worker (subprocess, LOOPGUARD_FETCH_MAX_WAIT_MS as given) and, as the same-run
baseline, a plain aiokafka echo relay (subprocess: consume -> produce the value unchanged, same
fetch max-wait). Their measured windows alternate (worker, relay, worker, ...), so window i of
one side and window i of the other saw the same host. A paced producer sends `tool_call`
events with `want_verdict: true` (run = i mod 1000); a group-less consumer on the output topic
matches answers by tool_call_id. `--background-load N` starts N busy processes of its own for
the whole measurement. `--variant LABEL:NAME=VALUE ...` (repeatable) adds a worker with that
environment, on a broker of its own, its windows between the worker's and the relay's; its
figures name the variant and carry `ratio_to_base` (to the worker's, same rounds) besides
their ratio to the relay. Every child is stopped by PID. Per-window lines (with the 1-minute load
average) on stderr, one JSON line per figure on stdout.

Where the worker's time goes: before and after each worker window the bench reads the
worker's `/metrics`, and each window's line gives the p50 and p99 of every verdict stage
(`loopguard_verdict_stage_seconds`: fetch, queue, engine, send, ack) from the histogram's increase,
as the bucket bound the quantile falls in; the JSON lines carry them per window. Each window
also gives each side's CPU time a call (its process's user + system time over the window,
from /proc, divided by the calls answered): at a fixed rate the side that spends more of a
core per call waits longer behind its own work at every quantile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.brokers import (  # noqa: E402
    add_broker_argument,
    bench_broker,
    client_options,
    security,
    worker_env,
)
from bench.python_build import python_build  # noqa: E402
from bench.variants import parse_variant  # noqa: E402
from loopguard_fleet.streams.embedded.child import free_port  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402
from loopguard_fleet.streams.kafka.admin import create_topics  # noqa: E402
from loopguard_fleet.streams.kafka.security import ClientSecurity  # noqa: E402
from loopguard_fleet.streams.processing.metrics import VERDICT_STAGES  # noqa: E402

PARTITIONS = 4
RUNS = 1000
RATE = 1000
# Each side's unmeasured first seconds: brokers and clients just started answer slower, on
# both sides, and 40 s keeps that start-up out of the windows, which measure the steady state
# (the measurement: docs/performance.md, "How each benchmark works").
WARMUP_S = 40.0
POLICY = {"tools": {"loopDetection": {"enabled": True}}}


class Probe:
    """Paced want_verdict producer plus the answer listener; latencies in ms per window."""

    def __init__(
        self, bootstrap: str, source: str, answers: str, fetch_wait_ms: int,
        options: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.bootstrap, self.source, self.answers = bootstrap, source, answers
        self.options = options or {}
        self.fetch_wait_ms = fetch_wait_ms
        self.metrics_url: str | None = None  # the worker's /metrics (none for the relay)
        self.stages: list[dict[str, dict[str, float | None]]] = []  # per window
        self.pid: int | None = None  # the side's process, for its CPU time
        self.cpu_ms_per_call: list[float | None] = []  # per window
        self.sent: dict[str, float] = {}
        self.latencies: list[float] = []
        self.seqs = [0] * RUNS
        self.n = 0
        self._drained = asyncio.Event()

    async def __aenter__(self) -> Probe:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks=1, linger_ms=0, **self.options
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=self.fetch_wait_ms, **self.options,
        )  # fmt: skip
        await self.producer.start()
        await self.consumer.start()
        tps = [TopicPartition(self.answers, p) for p in range(PARTITIONS)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now, not at the first answer
            await self.consumer.position(tp)
        self._listener = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._listener.cancel()
        await asyncio.gather(self._listener, return_exceptions=True)
        await self.consumer.stop()
        await self.producer.stop()

    async def _listen(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=1000)
            now = time.perf_counter()
            for records in batches.values():
                for rec in records:
                    msg = orjson.loads(rec.value)
                    if msg.get("type") not in ("verdict", "tool_call"):
                        continue
                    sent = self.sent.pop(msg.get("tool_call_id"), None)
                    if sent is not None:
                        self.latencies.append((now - sent) * 1000)
            if not self.sent:
                self._drained.set()

    def _event(self) -> tuple[bytes, bytes, str]:
        i = self.n
        self.n += 1
        run = i % RUNS
        self.seqs[run] += 1
        run_id = f"lat-{run}"
        tcid = f"call-{i}"
        event = {
            "type": "tool_call", "event_id": f"e{i}", "run_id": run_id, "seq": self.seqs[run],
            "tool_call_id": tcid, "tool": "read", "args": {"path": f"/f/{i}.txt"},
            "want_verdict": True,
        }  # fmt: skip
        return run_id.encode(), orjson.dumps(event), tcid

    async def window(self, seconds: float) -> list[float]:
        """Send at RATE for `seconds`, wait for the stragglers; the window's latencies (and,
        for the worker, its verdict stages in `stages`)."""
        before = await _scrape(self.metrics_url)
        cpu_before = cpu_seconds(self.pid)
        latencies = await self._window(seconds)
        cpu_after = cpu_seconds(self.pid)
        after = await _scrape(self.metrics_url)
        used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        self.cpu_ms_per_call.append(
            None if used is None or not latencies else round(used * 1000 / len(latencies), 3)
        )
        if self.metrics_url is not None:
            self.stages.append(stage_quantiles(before, after))
        return latencies

    async def _window(self, seconds: float) -> list[float]:
        self.latencies = []
        self.sent.clear()
        loop = asyncio.get_running_loop()
        start = loop.time()
        count = int(seconds * RATE)
        done = 0
        while done < count:
            due = min(count, int((loop.time() - start) * RATE) + 1)
            while done < due:
                key, value, tcid = self._event()
                self.sent[tcid] = time.perf_counter()
                await self.producer.send(self.source, value, key=key)
                done += 1
            await asyncio.sleep(0.001)
        self._drained.clear()
        if self.sent:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), 5)
        # An answer still missing after 5 s counts as slower than any answered one.
        return list(self.latencies) + [float("inf")] * len(self.sent)


def cpu_seconds(pid: int | None) -> float | None:
    """The user and system CPU time a process has used (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None  # no pid, no /proc, or the process is gone
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, timeout=30)


async def _ready(probe: Probe, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the side answers (a consumer group joins in ~3 s on Tansu)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while loop.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"child exited, see {log}")
        if any(x != float("inf") for x in await probe._window(0.05)):
            return
    raise RuntimeError(f"no answer within 60 s, see {log}")


@contextlib.asynccontextmanager
async def side_probe(
    name: str, cmd: list[str], env: dict[str, str], bootstrap: str, source: str, answers: str,
    fetch_wait_ms: int, workdir: Path, options: dict[str, Any] | None = None,
) -> AsyncIterator[Probe]:  # fmt: skip
    """One side started and answering; yields its probe, stops the side by PID on exit."""
    log = workdir / f"{name}.log"
    proc = _start(cmd, env, log)
    try:
        async with Probe(bootstrap, source, answers, fetch_wait_ms, options) as probe:
            probe.pid = proc.pid
            await _ready(probe, proc, log)
            yield probe
    finally:
        _stop(proc)


@contextlib.contextmanager
def background_load(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """N busy processes of our own for the duration (a loaded host), stopped by PID."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(0, n))]
    try:
        yield busy
    finally:
        for proc in busy:
            _stop(proc)


Buckets = dict[str, list[tuple[float, float]]]  # stage -> cumulative (upper bound s, count)


async def _scrape(url: str | None) -> Buckets:
    """The verdict stages' cumulative buckets from a worker's /metrics ({} without a url)."""
    if url is None:
        return {}

    def read() -> str:
        with urllib.request.urlopen(url, timeout=5) as resp:  # 127.0.0.1 only
            return str(resp.read().decode())

    return stage_buckets(await asyncio.to_thread(read))


def stage_buckets(text: str) -> Buckets:
    """Each verdict stage's cumulative histogram buckets in a Prometheus text exposition."""
    out: Buckets = {}
    prefix = "loopguard_verdict_stage_seconds_bucket{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, value = line[len(prefix) :].rsplit("} ", 1)
        fields = dict(item.split("=", 1) for item in labels.split(","))
        stage, bound = fields["stage"].strip('"'), fields["le"].strip('"')
        out.setdefault(stage, []).append((float(bound), float(value)))
    return out


def stage_quantiles(before: Buckets, after: Buckets) -> dict[str, dict[str, float | None]]:
    """Per stage, the p50 and p99 (ms, as the upper bound of their bucket) of what was
    observed between two scrapes; None where nothing was."""
    out: dict[str, dict[str, float | None]] = {}
    for stage in VERDICT_STAGES:
        was = dict(before.get(stage, []))
        grown = [(bound, n - was.get(bound, 0.0)) for bound, n in after.get(stage, [])]
        total = grown[-1][1] if grown else 0.0
        out[stage] = {
            f"p{int(q * 100)}": next(
                (round(b * 1000, 3) for b, n in grown if n >= q * total), None
            ) if total else None
            for q in (0.5, 0.99)
        }  # fmt: skip
    return out


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _num(value: float) -> float | None:
    """JSON-safe: an unanswered percentile (infinite) prints as null."""
    return None if value == float("inf") else round(value, 2)


def _lost(windows: list[list[float]]) -> list[int]:
    return [sum(1 for x in w if x == float("inf")) for w in windows]


def _window_p99_ratios(side: list[list[float]], relay: list[list[float]]) -> list[float | None]:
    """Each window's p99 over the relay's in the same round (None: a call unanswered)."""
    ratios = [_pct(a, 0.99) / max(_pct(b, 0.99), 1e-9) for a, b in zip(side, relay, strict=True)]
    return [None if x == float("inf") else round(x, 2) for x in ratios]


def _figure(
    name: str, fetch_wait: int, worker: list[float], relay: list[float], **extra: object
) -> str:
    w_med, r_med = statistics.median(worker), statistics.median(relay)
    ratio = w_med / max(r_med, 1e-9) if float("inf") not in (w_med, r_med) else None
    return json.dumps(
        {
            "workload": "L",
            "figure": name,
            "unit": "ms",
            "fetch_max_wait_ms": fetch_wait,
            "median": _num(w_med),
            "min": _num(min(worker)),
            "max": _num(max(worker)),
            "runs": [_num(v) for v in worker],
            "baseline": "aiokafka echo relay (consume -> produce)",
            "baseline_median": _num(r_med),
            "baseline_runs": [_num(v) for v in relay],
            "ratio": None if ratio is None else round(ratio, 3),
            **extra,
        }
    )


async def _bench(args: argparse.Namespace, workdir: Path) -> None:
    warmup, window, runs = (2.0, 5.0, 2) if args.quick else (args.warmup, args.seconds, args.runs)
    waits = [int(w) for w in str(args.fetch_max_wait_ms).split(",")]
    variants = [parse_variant(v) for v in args.variant]
    policy = workdir / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    with background_load(args.background_load):
        for wait in waits:
            async with contextlib.AsyncExitStack() as stack:
                worker = await stack.enter_async_context(
                    _side(args, "worker", wait, policy, workdir, stack)
                )
                others = [
                    await stack.enter_async_context(
                        _side(args, f"variant{i}", wait, policy, workdir, stack, env)
                    )
                    for i, (_, env) in enumerate(variants)
                ]
                relay = await stack.enter_async_context(
                    _side(args, "relay", wait, policy, workdir, stack)
                )
                for probe in (worker, *others, relay):
                    await probe.window(warmup)
                w: list[list[float]] = []
                v: list[list[list[float]]] = [[] for _ in variants]
                r: list[list[float]] = []
                # The host's 1-minute load after each round of windows: on a shared box it
                # says how far the figures are the code's and how far the other jobs'.
                load: list[float] = []
                for _ in range(runs):  # one window of each side in turn: the same host
                    w.append(await worker.window(window))
                    for i, probe in enumerate(others):
                        v[i].append(await probe.window(window))
                    r.append(await relay.window(window))
                    load.append(round(os.getloadavg()[0], 2))
                stages = worker.stages[-runs:]
                cpu = {
                    "worker": worker.cpu_ms_per_call[-runs:],
                    "relay": relay.cpu_ms_per_call[-runs:],
                }
            _report(wait, w, r, args.broker, load, args.background_load, stages, cpu)
            for (label, env), windows, probe in zip(variants, v, others, strict=True):
                _report_variant(
                    label, env, wait, w, windows, r, probe.cpu_ms_per_call[-runs:],
                    probe.stages[-runs:], load,
                )  # fmt: skip


@contextlib.asynccontextmanager
async def _side(
    args: argparse.Namespace, side: str, wait: int, policy: Path, workdir: Path,
    stack: contextlib.AsyncExitStack, variant_env: dict[str, str] | None = None,
) -> AsyncIterator[Probe]:  # fmt: skip
    """One side on its own fresh broker (Tansu slows down as its memory store fills): the
    relay, the worker, or a worker with a variant's environment on top of --worker-env."""
    broker = stack.enter_context(bench_broker(args.broker, workdir / f"{side}{wait}"))
    tag = f"l{wait}"
    names = [f"{tag}.{n}" for n in ("tool-calls", "compactions", "control", "dead")]
    relay_in, relay_out = f"{tag}.relay-in", f"{tag}.relay-out"
    await create_topics(
        broker.bootstrap, [*names, relay_in, relay_out], PARTITIONS, security=security(broker)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env.update(
        LOOPGUARD_BROKER=broker.url, LOOPGUARD_TOPIC_TOOL_CALLS=names[0],
        LOOPGUARD_TOPIC_COMPACTIONS=names[1], LOOPGUARD_TOPIC_CONTROL=names[2],
        LOOPGUARD_TOPIC_DEAD_LETTER=names[3], LOOPGUARD_APP_ID=f"lat{tag}",
        LOOPGUARD_DATA_DIR=str(workdir / f"data-{side}"), LOOPGUARD_WEB_PORT=str(free_port()),
        LOOPGUARD_POLICY_FILE=str(policy), LOOPGUARD_FETCH_MAX_WAIT_MS=str(wait),
        LOOPGUARD_LOG_LEVEL="warning", **worker_env(broker),
    )  # fmt: skip
    is_worker = side != "relay"
    if is_worker:
        env.update(item.split("=", 1) for item in args.worker_env)
        env.update(variant_env or {})
        cmd = [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"]
        source, answers = names[0], names[2]
    else:
        cmd = [sys.executable, __file__, "--echo-relay", broker.bootstrap, relay_in,
               relay_out, str(wait)]  # fmt: skip
        source, answers = relay_in, relay_out
    async with side_probe(
        f"{side}-{tag}", cmd, env, broker.bootstrap, source, answers, wait, workdir,
        client_options(broker),
    ) as probe:  # fmt: skip
        if is_worker:
            probe.metrics_url = f"http://127.0.0.1:{env['LOOPGUARD_WEB_PORT']}/metrics"
        yield probe


def _report(
    wait: int, w: list[list[float]], r: list[list[float]], broker: str, load: list[float],
    background: int, stages: list[dict[str, dict[str, float | None]]],
    cpu: dict[str, list[float | None]],
) -> None:  # fmt: skip
    """Per-window lines on stderr, one JSON line per figure on stdout."""
    for i, (wl, rl) in enumerate(zip(w, r, strict=True)):
        print(
            f"# fetch {wait} ms window {i + 1}: worker p50 {_pct(wl, 0.5):.1f} "
            f"p99 {_pct(wl, 0.99):.1f} max {max(wl):.1f} ms (lost {_lost([wl])[0]}); relay "
            f"p50 {_pct(rl, 0.5):.1f} p99 {_pct(rl, 0.99):.1f} max {max(rl):.1f} ms "
            f"(lost {_lost([rl])[0]}); p99 ratio "
            f"{_pct(wl, 0.99) / max(_pct(rl, 0.99), 1e-9):.2f}; load {load[i]}; CPU ms a call: "
            f"worker {cpu['worker'][i]}, relay {cpu['relay'][i]}",
            file=sys.stderr,
        )
        if i < len(stages):
            line = ", ".join(f"{s} {q['p50']} / {q['p99']}" for s, q in stages[i].items())
            print(f"#   worker stages p50 / p99 ms: {line}", file=sys.stderr)
    lost = {
        "lost_per_run": _lost(w),
        "baseline_lost_per_run": _lost(r),
        "broker": broker,
        "python": python_build(),  # worker's and relay's interpreter (python_build.py)
        "background_load": background,
        "loadavg_1m_per_window": load,
        # The target's tail check: no window's p99 above 3 x the relay's in the same window.
        "window_p99_ratios": _window_p99_ratios(w, r),
        "worker_stages_ms_per_window": stages,
        # Each side's process CPU time (user + system) in its window over the calls answered.
        "cpu_ms_per_call_per_window": cpu,
    }
    for fig, q in (("verdict_p50_ms", 0.5), ("verdict_p99_ms", 0.99)):
        print(_figure(fig, wait, [_pct(x, q) for x in w], [_pct(x, q) for x in r], **lost))
    print(_figure("verdict_max_ms", wait, [max(x) for x in w], [max(x) for x in r], **lost))


def _report_variant(
    label: str, env: dict[str, str], wait: int, base: list[list[float]],
    variant: list[list[float]], relay: list[list[float]], cpu: list[float | None],
    stages: list[dict[str, dict[str, float | None]]], load: list[float],
) -> None:  # fmt: skip
    """A variant's per-window lines on stderr and its figures on stdout."""
    for i, (vl, rl) in enumerate(zip(variant, relay, strict=True)):
        print(
            f"# fetch {wait} ms window {i + 1}: variant {label} p50 {_pct(vl, 0.5):.1f} "
            f"p99 {_pct(vl, 0.99):.1f} max {max(vl):.1f} ms (lost {_lost([vl])[0]}); p99 "
            f"ratio {_pct(vl, 0.99) / max(_pct(rl, 0.99), 1e-9):.2f}; CPU ms a call {cpu[i]}",
            file=sys.stderr,
        )
    extra = {"loadavg_1m_per_window": load, "cpu_ms_per_call_per_window": cpu,
             "worker_stages_ms_per_window": stages}  # fmt: skip
    for line in variant_figures(label, env, wait, base, variant, relay, **extra):
        print(line)


def variant_figures(
    label: str, env: dict[str, str], wait: int, base: list[list[float]],
    variant: list[list[float]], relay: list[list[float]], **extra: object,
) -> list[str]:  # fmt: skip
    """A variant's p50, p99 and max figures (JSON lines): against the relay as the base's
    are, and against the base worker's (`ratio_to_base`), all from the same rounds."""
    out = []
    picks: tuple[tuple[str, Callable[[list[float]], float]], ...] = (
        ("verdict_p50_ms", lambda x: _pct(x, 0.5)),
        ("verdict_p99_ms", lambda x: _pct(x, 0.99)),
        ("verdict_max_ms", max),
    )
    for name, pick in picks:
        mine = [pick(x) for x in variant]
        theirs = [pick(x) for x in base]
        figure = json.loads(_figure(name, wait, mine, [pick(x) for x in relay], **extra))
        v_med, b_med = statistics.median(mine), statistics.median(theirs)
        finite = float("inf") not in (v_med, b_med)
        figure.update(
            variant=label,
            variant_env=env,
            base_worker_median=_num(b_med),
            base_worker_runs=[_num(x) for x in theirs],
            ratio_to_base=round(v_med / max(b_med, 1e-9), 3) if finite else None,
            window_p99_ratios=_window_p99_ratios(variant, relay),
            lost_per_run=_lost(variant),
        )
        out.append(json.dumps(figure))
    return out


async def echo_relay(bootstrap: str, source: str, sink: str, fetch_wait_ms: int) -> None:
    """The baseline child: consume every partition of `source`, produce each value to `sink`."""
    options = ClientSecurity.from_env().aiokafka_kwargs()  # the worker's login (worker_env)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        fetch_max_wait_ms=fetch_wait_ms, **options,
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0, **options)
    await consumer.start()
    await producer.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for rec in records:
                    await producer.send(sink, rec.value, key=rec.key)
    finally:
        await consumer.stop()
        await producer.stop()


def main() -> None:
    """Run workload L (or, with --echo-relay, be the baseline child)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 s warm-up + 2 x 5 s per side")
    ap.add_argument("--runs", type=int, default=3, help="measured windows per side")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of a measured window")
    ap.add_argument(
        "--warmup", type=float, default=WARMUP_S, metavar="SECONDS",
        help=f"unmeasured seconds per side before its first window (default {WARMUP_S:g})",
    )  # fmt: skip
    ap.add_argument("--fetch-max-wait-ms", default="5", help="worker and relay; comma list")
    ap.add_argument(
        "--worker-env", action="append", default=[], metavar="NAME=VALUE",
        help="extra environment for the worker only (repeatable), e.g. a setting to compare",
    )  # fmt: skip
    ap.add_argument(
        "--variant", action="append", default=[], metavar="LABEL:NAME=VALUE ...",
        help="also a worker with this environment (repeatable), its windows between the "
        "worker's and the relay's: a candidate setting against the base, same run",
    )  # fmt: skip
    ap.add_argument(
        "--background-load", type=int, default=0, metavar="N",
        help="start N busy processes of our own for the whole run (a loaded host)",
    )  # fmt: skip
    ap.add_argument("--echo-relay", nargs=4, metavar=("BOOTSTRAP", "IN", "OUT", "WAIT_MS"))
    add_broker_argument(ap)
    args = ap.parse_args()
    if args.echo_relay:
        bootstrap, source, sink, wait = args.echo_relay
        asyncio.run(echo_relay(bootstrap, source, sink, int(wait)))
        return
    workdir = Path(tempfile.mkdtemp(prefix="loopguard-latency-"))
    try:
        asyncio.run(_bench(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
