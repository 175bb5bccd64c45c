"""A seeded simulated fleet: mostly healthy runs, some stuck in each kind of loop.

`fleet_events` is pure (same arguments → same events) and doubles as a workload generator;
`simulate` publishes those events through the runtime client at a steady rate (`loopguard up
--demo`). It only emits: it does not obey block_call or abort_run, as a real runtime would.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from loopguard_fleet.detectors.values import JSON
from loopguard_fleet.streams.client.connection import TopicNames
from loopguard_fleet.streams.client.run_events import MISSING, Missing, RunEvents, WireEvent
from loopguard_fleet.streams.client.runtime import RuntimeClient

__all__ = [
    "HEALTHY",
    "LOOP_KINDS",
    "OUTAGE",
    "SimRun",
    "fleet_events",
    "fleet_plan",
    "heartbeat",
    "outage_plan",
    "simulate",
]

HEALTHY: Final = "healthy"
#: Each stuck kind is named after the detector that should catch it.
LOOP_KINDS: Final = (
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
    "unknown_tool_repeat",
    "compaction_loop_persisted",
)
#: Runs hit by one broken dependency at once: each retries the same failing call, which no
#: single run's detector stops before its 10th repeat (docs/fleet.md, "Try it").
OUTAGE: Final = "outage"
OUTAGE_START: Final = 0.05  # where in the fleet's events the outage begins, and ends
OUTAGE_END: Final = 0.45
_AGENTS: Final = ("main", "research", "ops")
_FLUSH_EVERY: Final = 1_000  # events between two flushes: a tenth of the client's buffer
_FLUSH_TIMEOUT_S: Final = 30.0
HEARTBEAT_S: Final = 0.5  # between two calls of the run that keeps the demo's time moving


@dataclass(frozen=True, slots=True)
class SimRun:
    """One simulated run: its id, agent, session and the loop it is stuck in (or healthy)."""

    run_id: str
    kind: str
    agent_id: str
    session_key: str


def fleet_plan(runs: int = 50, seed: int = 0, *, prefix: str = "sim") -> list[SimRun]:
    """Who is stuck in which loop: one compaction loop, ~4 % per rolling kind, rest healthy."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    per_kind = max(1, runs // 25)
    stuck = [k for k in LOOP_KINDS[:-1] for _ in range(per_kind)] + [LOOP_KINDS[-1]]
    kinds = (stuck + [HEALTHY] * runs)[:runs]
    random.Random(seed).shuffle(kinds)
    plan = []
    for i, kind in enumerate(kinds):
        agent = _AGENTS[i % len(_AGENTS)]
        plan.append(SimRun(f"{prefix}-{i:03d}", kind, agent, f"agent:{agent}:{prefix}-{i:03d}"))
    return plan


def outage_plan(runs: int = 12, *, prefix: str = "sim") -> list[SimRun]:
    """The runs an outage hits, spread over the demo's agents."""
    plan = []
    for i in range(runs):
        agent = _AGENTS[i % len(_AGENTS)]
        run_id = f"{prefix}-outage-{i:02d}"
        plan.append(SimRun(run_id, OUTAGE, agent, f"agent:{agent}:{run_id}"))
    return plan


def _text(text: str, **details: JSON) -> JSON:
    return {"content": [{"type": "text", "text": text}], "details": dict(details)}


class _Script:
    """Appends call/result pairs for one run."""

    def __init__(self, run: SimRun, privacy: bool) -> None:
        self.ev = RunEvents(
            run.run_id, agent_id=run.agent_id, session_key=run.session_key, privacy=privacy
        )
        self.out: list[WireEvent] = []

    def call(
        self,
        tool: str,
        args: JSON,
        *,
        result: JSON | Missing = MISSING,
        error: JSON | Missing = MISSING,
    ) -> None:
        call = self.ev.tool_call(tool, args)
        self.out.append(call)
        cid = call["tool_call_id"]
        self.out.append(self.ev.tool_result(cid, tool, args, result=result, error=error))


def _healthy_call(s: _Script, rng: random.Random, n: int) -> None:
    """One varied, progressing call: unique arguments and fresh results every time."""
    k = rng.randrange(1_000_000)
    choice = rng.randrange(6)
    if choice == 0:
        path = f"/repo/src/module_{k}.py"
        if rng.random() < 0.1:
            s.call("read", {"path": path}, error=f"ENOENT: no such file or directory, '{path}'")
        else:
            s.call("read", {"path": path}, result=_text(f"def f_{k}():\n    return {n}"))
    elif choice == 1:
        s.call("list", {"path": f"/repo/pkg_{k}"}, result=_text(f"a_{k}.py\nb_{n}.py"))
    elif choice == 2:
        cmd = f"pytest -q -k case_{k}"
        out = f"{n + k % 7} passed"
        s.call("exec", {"command": cmd}, result=_text("ok", status="completed", aggregated=out))
    elif choice == 3:
        s.call("web_search", {"query": f"asyncio pattern {k}"}, result=_text(f"{k} hits"))
    elif choice == 4:
        s.call("write", {"path": f"/repo/out_{k}.md", "content": f"v{n}"}, result=_text("ok"))
    else:
        args: JSON = {"action": "poll", "sessionId": f"proc-{k}"}
        s.call("process", args, result=_text(f"line {n}", status="running", aggregated=f"{k}"))


def _stuck(s: _Script, kind: str, calls: int) -> None:
    """The calls of one loop kind; `calls` is long enough to reach a critical at defaults."""
    if kind == "generic_repeat":
        err = "ENOENT: no such file or directory, open '/workspace/NOTES.md'"
        for _ in range(calls):
            s.call("read", {"path": "/workspace/NOTES.md"}, error=err)
    elif kind == "known_poll_no_progress":
        start = _text("started", status="running", sessionId="proc-1", tail="")
        s.call("exec", {"command": "npm run build", "background": True}, result=start)
        idle = _text("(no new output)", status="running", sessionId="proc-1", aggregated="")
        for _ in range(calls):
            s.call("process", {"action": "poll", "sessionId": "proc-1"}, result=idle)
    elif kind == "ping_pong":
        for i in range(calls):
            if i % 2 == 0:
                s.call("read", {"path": "/a"}, result=_text("alpha"))
            else:
                s.call("list", {"path": "/w"}, result=_text("a\nb"))
    elif kind == "unknown_tool_repeat":
        for i in range(calls):
            s.call("exec", {"command": f"ls -la /tmp/{i}"}, error="Tool exec not found")
    elif kind == OUTAGE:
        err = "EIO: i/o error, open '/mnt/shared/config.yaml' (mount unavailable)"
        for _ in range(calls):
            s.call("read", {"path": "/mnt/shared/config.yaml"}, error=err)
    elif kind == "compaction_loop_persisted":
        err = "ENOENT: no such file or directory, open '/workspace/plan.md'"
        for _ in range(5):
            s.call("read", {"path": "/workspace/plan.md"}, error=err)
        s.out.append(s.ev.compaction())
        for _ in range(3):  # the guard's window: the third identical outcome aborts the run
            s.call("read", {"path": "/workspace/plan.md"}, error=err)
    else:
        raise ValueError(f"unknown loop kind {kind!r}; expected one of {', '.join(LOOP_KINDS)}")


def run_events(
    run: SimRun, seed: int = 0, *, privacy: bool = False, stuck_calls: int = 25, end: bool = True
) -> list[WireEvent]:
    """One run's wire events in seq order (deterministic in the run id and seed)."""
    rng = random.Random(f"{seed}:{run.run_id}")
    s = _Script(run, privacy)
    warmup = rng.randrange(6, 25) if run.kind == HEALTHY else rng.randrange(1, 4)
    for n in range(warmup):
        _healthy_call(s, rng, n)
    if run.kind != HEALTHY:
        _stuck(s, run.kind, stuck_calls)
    if end:
        s.out.append(s.ev.end())
    return s.out


def fleet_events(
    runs: int = 50,
    seed: int = 0,
    *,
    prefix: str = "sim",
    privacy: bool = False,
    stuck_calls: int = 25,
    end_runs: bool = True,
    outage_runs: int = 0,
) -> list[WireEvent]:
    """All runs' wire events, each run in seq order, interleaved across runs by the seed;
    with `outage_runs`, that many runs retrying one broken call, all between `OUTAGE_START`
    and `OUTAGE_END` of the stream (so the fleet's later traffic sees the outage end)."""
    queues = [
        run_events(r, seed, privacy=privacy, stuck_calls=stuck_calls, end=end_runs)[::-1]
        for r in fleet_plan(runs, seed, prefix=prefix)
    ]
    events = interleave(queues, random.Random(f"{seed}:interleave"))
    if not outage_runs:
        return events
    hit = [
        run_events(r, seed, privacy=privacy, stuck_calls=stuck_calls, end=end_runs)[::-1]
        for r in outage_plan(outage_runs, prefix=prefix)
    ]
    outage = interleave(hit, random.Random(f"{seed}:outage"))
    start, end = int(len(events) * OUTAGE_START), int(len(events) * OUTAGE_END)
    during = interleave([events[start:end][::-1], outage[::-1]], random.Random(f"{seed}:during"))
    return events[:start] + during + events[end:]


def interleave(queues: list[list[WireEvent]], rng: random.Random) -> list[WireEvent]:
    """Merge queues (each popped from its end) in a seeded random order, keeping each's order."""
    out: list[WireEvent] = []
    active = [q for q in queues if q]
    while active:
        i = rng.randrange(len(active))
        out.append(active[i].pop())
        if not active[i]:
            active[i] = active[-1]
            active.pop()
    return out


async def simulate(
    bootstrap: str | list[str],
    topics: TopicNames,
    runs: int = 50,
    seed: int = 0,
    rate: float | None = 100.0,
    *,
    prefix: str | None = None,
    privacy: bool = False,
    on_event: Callable[[WireEvent], None] | None = None,
    outage_runs: int = 0,
) -> int:
    """Publish the fleet at `rate` events/s (None: as fast as possible); return the count."""
    # A fresh prefix per demo, so a worker that remembers earlier runs sees new ones.
    events = fleet_events(
        runs,
        seed,
        prefix=prefix or f"sim{secrets.token_hex(2)}",
        privacy=privacy,
        outage_runs=outage_runs,
    )
    loop = asyncio.get_running_loop()
    async with RuntimeClient(bootstrap, topics=topics, is_listening=False) as client:
        start = loop.time()
        for n, event in enumerate(events):
            if rate:
                ahead = start + n / rate - loop.time()
                if ahead > 0:
                    await asyncio.sleep(ahead)  # pacing the demo, not waiting for a result
            await client.publish(event)
            if on_event is not None:
                on_event(event)
            if n % _FLUSH_EVERY == _FLUSH_EVERY - 1:  # the demo loses nothing: keep the buffer
                await client.flush(_FLUSH_TIMEOUT_S)  # well under its bound, or say why not
        await client.flush(_FLUSH_TIMEOUT_S)
    return len(events)


async def heartbeat(bootstrap: str | list[str], topics: TopicNames, seed: int = 0) -> None:
    """Publish one healthy run's calls every `HEARTBEAT_S` until cancelled.

    Fleet windows close on event time, which only traffic moves: after the demo's fleet
    has been sent, this run is the fleet that keeps working, so the outage's signal resolves.
    """
    run = SimRun(f"hb{secrets.token_hex(2)}-heartbeat", HEALTHY, _AGENTS[0], "agent:main:hb")
    rng = random.Random(f"{seed}:{run.run_id}")
    script = _Script(run, privacy=False)
    async with RuntimeClient(bootstrap, topics=topics, is_listening=False) as client:
        n = 0
        while True:
            _healthy_call(script, rng, n)
            events, script.out = script.out, []
            for event in events:
                await client.publish(event)
            await client.flush(_FLUSH_TIMEOUT_S)
            n += 1
            await asyncio.sleep(HEARTBEAT_S)  # pacing the demo, not waiting for a result
