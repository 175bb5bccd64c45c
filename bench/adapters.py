"""Adapter overhead: a framework adapter's gated tool call vs a bare RuntimeClient round trip.

    python bench/adapters.py            # 300 calls per side
    python bench/adapters.py --quick    # 60 calls per side

Starts the embedded broker and a worker (subprocess, stopped by PID). In one run, alternating
call by call so both sides see the same broker and load:
- bare: `RunHandle.tool_call(want_verdict=True)`, `verdict()`, `tool_result()`;
- each adapter: its own tool hook with a no-op tool (LangChain's `awrap_tool_call`,
  pydantic-ai's `wrap_tool_execute`, the Agents SDK's input and output guardrails, ADK's
  `before_tool` / `after_tool`), the worker answering allow.
Reports p50/p99 per side and the overhead: an adapter's p50 minus the bare p50. The worker
and the client fetch with a 5 ms max-wait, as `loopguard up` and `RuntimeClient` do by
default; each call first waits a random 0-10 ms so no side sits in one phase of the fetch
cycle. Broker noise can still hide a sub-ms difference at a small sample; the first figure
isolates the adapters' own cost: the same calls against a client whose verdict
answers allow at once (no broker). One JSON line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loopguard_fleet.adapters.core import LoopGuard  # noqa: E402
from loopguard_fleet.streams.client import RuntimeClient, Topics, VerdictReply  # noqa: E402
from loopguard_fleet.streams.embedded.child import free_port  # noqa: E402
from loopguard_fleet.streams.embedded.processes import stop_process  # noqa: E402
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker  # noqa: E402
from loopguard_fleet.streams.kafka.admin import create_topics  # noqa: E402

POLICY = {"tools": {"loopDetection": {"enabled": True}}}
Call = Callable[[int], Awaitable[None]]


class InstantClient(RuntimeClient):
    """A client that publishes nowhere and answers every verdict allow at once."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:9")

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def publish(self, event: Mapping[str, Any]) -> None:
        orjson.dumps(dict(event))  # what the real client does to every event before sending

    async def verdict(self, run_id: str, tool_call_id: str, timeout: float = 2.0) -> VerdictReply:  # noqa: ASYNC109
        return VerdictReply.from_payload({"decision": "allow"})

    async def commands(self) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


def bare(guard: LoopGuard, run_id: str) -> Call:
    """The bare client's gated call, on the run (so the partition) an adapter also uses."""
    run = guard.run(run_id)  # the same handle: one seq for both sides of the run

    async def one(i: int) -> None:
        args = {"path": f"/f{i}"}
        cid = await run.tool_call("read", args, want_verdict=True)
        await run.verdict(cid, timeout=5.0)
        await run.tool_result(cid, "read", args, result="ok")

    return one


def langchain_call(guard: LoopGuard, run_id: str) -> Call:
    """LangChain's middleware around a no-op tool."""
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from loopguard_fleet.adapters.langchain import RUN_KEY, LoopGuardMiddleware

    mw = LoopGuardMiddleware(guard)

    async def handler(req: ToolCallRequest) -> ToolMessage:
        return ToolMessage(content="ok", tool_call_id=req.tool_call["id"] or "", name="read")

    async def one(i: int) -> None:
        call = {"name": "read", "args": {"path": f"/f{i}"}, "id": f"c{i}", "type": "tool_call"}
        req = ToolCallRequest(tool_call=call, tool=None, state={RUN_KEY: run_id}, runtime=None)  # type: ignore[arg-type]
        await mw.awrap_tool_call(req, handler)

    return one


def pydantic_ai_call(guard: LoopGuard, run_id: str) -> Call:
    """pydantic-ai's capability around a no-op tool."""
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RunUsage

    from loopguard_fleet.adapters.pydantic_ai import LoopGuardCapability

    cap = LoopGuardCapability(guard)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), run_id=run_id)
    tool_def = ToolDefinition(name="read")

    async def handler(args: dict[str, Any]) -> str:
        return "ok"

    async def one(i: int) -> None:
        args = {"path": f"/f{i}"}
        part = ToolCallPart("read", args, tool_call_id=f"c{i}")
        await cap.wrap_tool_execute(ctx, call=part, tool_def=tool_def, args=args, handler=handler)

    return one


def openai_agents_call(guard: LoopGuard, run_id: str) -> Call:
    """The Agents SDK's input and output guardrails around a no-op tool."""
    from agents import Agent, RunConfig, ToolInputGuardrailData, ToolOutputGuardrailData
    from agents.tool_context import ToolContext

    from loopguard_fleet.adapters.openai_agents import LoopGuardGuardrails

    rails = LoopGuardGuardrails(guard)
    agent: Agent[Any] = Agent(name="bench")
    config = RunConfig(trace_id=run_id, tracing_disabled=True)

    async def one(i: int) -> None:
        ctx = ToolContext(
            context=None, tool_name="read", tool_call_id=f"c{i}",
            tool_arguments=json.dumps({"path": f"/f{i}"}), run_config=config,
        )  # fmt: skip
        await rails.input.run(ToolInputGuardrailData(context=ctx, agent=agent))
        await rails.output.run(ToolOutputGuardrailData(context=ctx, agent=agent, output="ok"))

    return one


def google_adk_call(guard: LoopGuard, run_id: str) -> Call:
    """ADK's before_tool / after_tool callbacks around a no-op tool (a stand-in context)."""
    from types import SimpleNamespace

    from loopguard_fleet.adapters.google_adk import LoopGuardCallbacks

    cb = LoopGuardCallbacks(guard)
    tool = SimpleNamespace(name="read")

    async def one(i: int) -> None:
        ctx = SimpleNamespace(
            invocation_id=run_id, function_call_id=f"c{i}", agent_name="bench",
            session=SimpleNamespace(id="s"),
        )  # fmt: skip
        args = {"path": f"/f{i}"}
        await cb.before_tool(tool, args, ctx)  # type: ignore[arg-type]
        await cb.after_tool(tool, args, ctx, {"content": "ok"})  # type: ignore[arg-type]

    return one


ADAPTERS: dict[str, Callable[[LoopGuard, str], Call]] = {
    "langchain": langchain_call,
    "pydantic-ai": pydantic_ai_call,
    "openai-agents": openai_agents_call,
    "google-adk": google_adk_call,
}


def both(guard: LoopGuard, prefix: str) -> dict[str, tuple[Call, Call]]:
    """Per adapter: the bare call and the adapter's, on one run of their own."""
    return {
        name: (bare(guard, f"{prefix}-{name}"), make(guard, f"{prefix}-{name}"))
        for name, make in ADAPTERS.items()
    }


async def timed(call: Call, i: int) -> float:
    """One call's wall time in ms."""
    start = time.perf_counter()
    await call(i)
    return (time.perf_counter() - start) * 1000


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def pairs(sides_of: dict[str, tuple[Call, Call]], n: int, jitter: float) -> dict[str, Any]:
    """Alternate bare and adapter calls on each adapter's run; p50/p99 per side, overhead =
    the adapter's p50 minus the bare p50 of the same run.

    `jitter` (s): a seeded random pause before each call, so no side stays in one phase of the
    client's fetch cycle (calls started right after a verdict would all land in the same one).
    """
    rng = random.Random(36)
    base: dict[str, list[float]] = {name: [] for name in sides_of}
    sides: dict[str, list[float]] = {name: [] for name in sides_of}
    for i in range(n):
        for name, (bare_call, call) in sides_of.items():
            pair = [(base[name], bare_call), (sides[name], call)]
            rng.shuffle(pair)  # neither side always comes first after the other's result
            for k, (times, one) in enumerate(pair):
                await asyncio.sleep(rng.uniform(0, jitter))
                times.append(await timed(one, 2 * i + k))
    figures = {}
    for name, v in sides.items():
        b = base[name]
        figures[name] = {
            "bare_p50_ms": round(statistics.median(b), 3), "bare_p99_ms": pct(b, 0.99),
            "p50_ms": round(statistics.median(v), 3), "p99_ms": pct(v, 0.99),
            "overhead_p50_ms": round(statistics.median(v) - statistics.median(b), 3),
        }  # fmt: skip
    return {"adapters": figures}


async def isolated(n: int) -> dict[str, Any]:
    """The adapters' own cost: the same calls against a client that answers at once."""
    async with LoopGuard(InstantClient(), verdict_timeout=5.0) as guard:
        return await pairs(both(guard, "iso"), n, 0.0)


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The worker subprocess, its output in `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def live(n: int, workdir: Path) -> dict[str, Any]:
    """Against a real worker on the embedded broker."""
    policy = workdir / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    with EmbeddedBroker(log_dir=workdir) as broker:
        names = [f"ad.{n}" for n in ("tool-calls", "compactions", "control", "dead")]
        await create_topics(broker.bootstrap, names, 4)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
        env.update(
            LOOPGUARD_BROKER=broker.url, LOOPGUARD_TOPIC_TOOL_CALLS=names[0],
            LOOPGUARD_TOPIC_COMPACTIONS=names[1], LOOPGUARD_TOPIC_CONTROL=names[2],
            LOOPGUARD_TOPIC_DEAD_LETTER=names[3], LOOPGUARD_APP_ID="bench-adapters",
            LOOPGUARD_DATA_DIR=str(workdir / "data"), LOOPGUARD_WEB_PORT=str(free_port()),
            LOOPGUARD_POLICY_FILE=str(policy), LOOPGUARD_LOG_LEVEL="warning",
            LOOPGUARD_RECOVERY_CONSISTENCY_CHECK="false", LOOPGUARD_FETCH_MAX_WAIT_MS="5",
        )  # fmt: skip
        log = workdir / "worker.log"
        proc = start_worker(env, log)
        try:
            client = RuntimeClient(broker.bootstrap, topics=Topics(*names[:3]))
            async with LoopGuard(client, verdict_timeout=5.0) as guard:
                probe = client.run("bench-ready")
                while True:  # the worker joins its group in ~3 s on Tansu
                    if proc.poll() is not None:
                        raise RuntimeError(f"worker exited, see {log}")
                    cid = await probe.tool_call("read", {"path": "/r"}, want_verdict=True)
                    if not (await probe.verdict(cid, timeout=2.0)).is_timeout:
                        break
                return await pairs(both(guard, "live"), n, 0.01)
        finally:
            stop_process(proc, timeout=30)


def main() -> None:
    """Run both figures and print them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 calls per side instead of 300")
    args = ap.parse_args()
    n = 60 if args.quick else 300
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "true")
    print(
        json.dumps({"figure": "adapter_overhead_isolated", "calls": n, **asyncio.run(isolated(n))})
    )
    with tempfile.TemporaryDirectory(prefix="lg-bench-adapters-") as tmp:
        figure = asyncio.run(live(n, Path(tmp)))
    print(json.dumps({"figure": "adapter_overhead_live", "calls": n, "broker": "tansu", **figure}))


if __name__ == "__main__":
    main()
