"""Seeded generators of whole runs that exercise every 2026.9 verdict rule, and the old ones.

A run is a list of wire events. Generation is interactive: after each `tool_call` the
generator asks a `blocked(event)` oracle (LoopGuard) whether the call was blocked, and then
behaves like a runtime would — no result, the echo of the veto it answered the model with, or
the real result of a call it ran anyway. Both engines then read the same finished run, so the
oracle choosing the run cannot hide a disagreement.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from tests.differential.outcomes import (
    failing_exec,
    fetched_page,
    text_result,
    veto_result,
)

Event = dict[str, Any]
Outcome = dict[str, Any]  # {"result": …} or {"error": …}
Call = tuple[str, Any, Callable[[random.Random], Outcome]]  # tool, args, its outcome


def _same(outcome: Outcome) -> Callable[[random.Random], Outcome]:
    return lambda rng: outcome


def repeat(rng: random.Random) -> Iterator[Call]:
    """One call again and again; its outcome mostly the same error (generic repeat, breaker)."""
    tool = rng.choice(["read", "web_search", "bash", "list"])
    args = {"path": f"/missing/{rng.randint(0, 3)}"}
    error = {"error": f"ENOENT: no such file {args['path']}"}
    for _ in range(rng.randint(12, 45)):
        yield tool, args, (lambda r: error if r.random() < 0.93 else {"result": text_result("ok")})


def poll(rng: random.Random) -> Iterator[Call]:
    """A known poll that never progresses, or sometimes does."""
    tool, args = rng.choice(
        [
            ("process", {"action": "poll", "sessionId": "s1"}),
            ("command_status", {"id": 3}),
            ("process", {"action": "log", "sessionId": "s1"}),
        ]
    )
    moving = rng.random() < 0.2
    for i in range(rng.randint(12, 35)):
        result = text_result(f"line {i if moving else 0}", status="running", totalLines=1)
        yield tool, args, _same({"result": result})


def ping_pong(rng: random.Random) -> Iterator[Call]:
    """Two calls alternating, with stable (or, on one side, changing) results."""
    first = ("read", {"path": "/a"})
    second = rng.choice([("list", {"dir": "/w"}), ("read", {"path": "/b"})])
    changing = rng.random() < 0.25
    for i in range(rng.randint(14, 34)):
        tool, args = first if i % 2 == 0 else second
        text = f"v{i}" if changing and i % 2 else "stable"
        yield tool, args, _same({"result": text_result(text)})


def unknown(rng: random.Random) -> Iterator[Call]:
    """A missing tool retried with changing arguments."""
    tool = rng.choice(["exec", "browser", "web.search"])
    for i in range(rng.randint(10, 16)):
        yield tool, {"q": i}, _same({"error": f"Tool {tool} not found"})


def churn(rng: random.Random) -> Iterator[Call]:
    """A few argument variants cycling to one no-progress outcome (argument churn)."""
    kind = rng.randrange(3)
    variants = rng.randint(2, 4)
    for i in range(rng.randint(10, 40)):
        v = rng.randrange(variants) if rng.random() < 0.4 else i % variants
        if kind == 0:
            yield (
                "write",
                {"path": f"/f{v}", "content": "x"},
                _same({"result": text_result("unchanged", changed=False)}),
            )
        elif kind == 1:
            yield "read", {"path": f"/p{v}"}, _same({"error": "permission denied"})
        else:
            yield "process", {"action": "poll", "sessionId": f"s{v}"}, _same({"error": "gone"})


def exec_failures(rng: random.Random) -> Iterator[Call]:
    """exec failing for one cause under changing commands, with volatile output.

    Commands come in stretches (a few tries of one, then another), so the terminal-failure
    walk meets both long runs across commands and a return to the current command.
    """
    cause = rng.choice(["npm ERR! missing script: build", "error TS2304: Cannot find name"])
    commands = [f"npm run build{s}" for s in rng.sample(["", " --x", " -w", ":ci"], 3)]
    left = rng.randint(8, 45)
    while left > 0:
        command = rng.choice(commands)
        for _ in range(min(left, rng.randint(1, 22))):
            left -= 1
            yield "exec", {"command": command}, lambda r, c=cause: {"result": failing_exec(r, c)}


def approvals(rng: random.Random) -> Iterator[Call]:
    """An exec waiting for approval, asked again and again."""
    for _ in range(rng.randint(10, 30)):
        result = text_result(
            "Approval required",
            status="approval-pending",
            reason="allowlist-miss",
            host="gateway",
            command="rm -rf build",
            warningText="",
            approvalId=f"ap-{rng.randint(0, 1 << 30)}",
        )
        yield "exec", {"command": "rm -rf build"}, _same({"result": result})


def fetches(rng: random.Random) -> Iterator[Call]:
    """The same page fetched again, wrapped in markers with a fresh nonce each time."""
    changing = rng.random() < 0.2
    for i in range(rng.randint(10, 30)):
        body = f"page {i}" if changing else "the same page"
        yield (
            "web_fetch",
            {"url": "https://example.com"},
            lambda r, b=body: {"result": fetched_page(r, b)},
        )


def noise(rng: random.Random) -> Iterator[Call]:
    """Healthy calls with changing results."""
    for i in range(rng.randint(3, 10)):
        yield (
            rng.choice(["read", "exec", "write"]),
            {"n": rng.randint(0, 5)},
            _same({"result": text_result(f"fresh {i} {rng.random()}")}),
        )


SCENARIOS = [repeat, poll, ping_pong, unknown, churn, exec_failures, approvals, fetches, noise]


def generate_run(rng: random.Random, run_id: str, decide: Callable[[Event], bool]) -> list[Event]:
    """One run: a few scenarios in a row, results as a runtime would send them.

    `decide` sees every event as it is emitted and says whether a tool_call was blocked.
    """
    events: list[Event] = []
    seq = 0
    call_no = 0
    held: list[Event] = []  # results a runtime sends later (overlapping calls)

    def emit(event: Event) -> bool:
        nonlocal seq
        seq += 1
        event.update(run_id=run_id, seq=seq, event_id=f"{run_id}:{seq}")
        events.append(event)
        return decide(event)

    def flush() -> None:
        while held:
            emit(held.pop(0))

    for scenario in rng.sample(SCENARIOS, rng.randint(1, 3)):
        for tool, args, outcome_of in scenario(rng):
            call_no += 1
            tcid = f"call-{call_no}" if rng.random() < 0.9 else None
            call = {"type": "tool_call", "tool": tool, "args": args, "tool_call_id": tcid}
            result = {"type": "tool_result", "tool": tool, "args": args, "tool_call_id": tcid}
            if emit(call):
                flush()
                roll = rng.random()
                if roll < 0.3:
                    emit({**result, "result": veto_result("CRITICAL: blocked")})
                elif roll < 0.4:
                    emit({**result, **outcome_of(rng)})  # the runtime ran it anyway
                continue
            if rng.random() < 0.03:
                continue  # its result never arrives
            result.update(outcome_of(rng))
            held.append(result)
            if rng.random() < 0.75 or len(held) > 2:
                flush()
            if rng.random() < 0.02:
                # A veto the runtime made itself (a rejected sibling in an assistant batch).
                sibling = {"type": "tool_result", "tool": tool, "args": args}
                sibling.update(tool_call_id=f"sibling-{call_no}", result=veto_result())
                emit(sibling)
        flush()
    return events


def decided_runs(seed: int, count: int, th: Thresholds) -> list[list[Event]]:
    """`count` seeded runs, each shaped by LoopGuard's live decisions under `th` (a blocked
    call gets no result, the veto's echo or a result of its running anyway)."""
    rng = random.Random(seed)
    runs = []
    for n in range(count):
        state = RunState()

        def blocked(event: Event, state: RunState = state) -> bool:
            return any(
                d.kind == "loop_event" and d.payload["action"] == "block"
                for d in process_event(state, event, th)
            )

        runs.append(generate_run(rng, f"s{seed}-r{n}", blocked))
    return runs
