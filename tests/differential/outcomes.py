"""Seeded generators of tool outcomes that exercise every 2026.9 outcome rule.

Each generator takes a `random.Random`, so a failing seed replays exactly. The values are what
runtimes publish on the wire: a tool name, its args, and a `result` or an `error`.
"""

from __future__ import annotations

import random
from typing import Any

HEX = "0123456789abcdef"

# Pieces of exec output that 2026.9 treats as volatile, and near-misses that it does not.
VOLATILE = [
    "2026-12-01T10:00:{s:02d}Z",
    "2026-12-01 10:00:{s:02d}.{ms}+01:00",
    "2026-12-01t10:00:{s:02d}.{ms}z",
    "{h}:{s:02d}:{s:02d}",
    "{h}:{s:02d}:{s:02d}.{ms}",
    "attempt {n}",
    "Attempt #{n}",
    "RETRY={n}",
    "retry: {n}",
    "retry\u00a0{n}",
    "took {n}ms",
    "{n}.{ms} s",
    "{n} seconds",
    "{n} minute",
    "{n}hours",
    "{n}\u017f",  # long s: an s under JavaScript's /iu
    "pid {n}",
    "PPID: {n}",
    "pid#{n}",
]
NEAR_MISSES = [
    "attempt{n}",  # no word boundary before the digits' separator
    "xattempt {n}",
    "p\u0131d {n}",  # dotless i is not an i under /iu
    "\u212aattempt {n}",  # Kelvin sign is a word character under /iu
    "{n}sx",
    "{n}\u0663 ms",  # Arabic-indic digit is not \\d
    "exit {n}",
    "line {n}",
]


def nonce(rng: random.Random) -> str:
    """A fresh 16-hex-digit marker id."""
    return "".join(rng.choice(HEX) for _ in range(16))


def marked(rng: random.Random, body: str, escapes: int = 0, well_formed: bool = True) -> str:
    """External content wrapped in markers with a fresh nonce (optionally JSON-escaped)."""
    q = "\\" * escapes + '"'
    first = nonce(rng)
    second = first if well_formed else rng.choice([nonce(rng), first.upper(), first[:15]])
    return (
        f"<<<EXTERNAL_UNTRUSTED_CONTENT id={q}{first}{q}>>>{body}"
        f"<<<END_EXTERNAL_UNTRUSTED_CONTENT id={q}{second}{q}>>>"
    )


def volatile_text(rng: random.Random, stable: str, layouts: int = 24) -> str:
    """Stable text with volatile pieces (and near misses) whose values change on every call.

    Which pieces appear, and where, is one of a few layouts per `stable` text, so failures of
    one cause often differ only in their volatile values.
    """
    layout = random.Random(f"{stable}/{rng.randrange(layouts)}")
    parts = [stable]
    for _ in range(layout.randint(1, 4)):
        pool = VOLATILE if layout.random() < 0.75 else NEAR_MISSES
        piece = layout.choice(pool).format(
            s=rng.randint(0, 59),
            ms=rng.randint(0, 999999),
            h=rng.randint(0, 23),
            n=rng.randint(0, 99999),
        )
        parts.append(piece)
    layout.shuffle(parts)
    return layout.choice([" ", "\n", " | ", ": "]).join(parts)


def text_result(text: str, **details: Any) -> dict[str, Any]:
    """A tool result with one text item and the given details."""
    return {"content": [{"type": "text", "text": text}], "details": details}


def veto_result(message: str = "CRITICAL: blocked") -> dict[str, Any]:
    """The blocked result a runtime answers the model with (docs/semantics.md §7.2)."""
    return text_result(message, status="blocked", deniedReason="tool-loop", reason=message)


def fetched_page(rng: random.Random, body: str) -> dict[str, Any]:
    """A web fetch whose external content carries a fresh marker nonce, in several places."""
    escapes = rng.choice([0, 0, 0, 1, 2, 3])
    well_formed = rng.random() < 0.85
    page = marked(rng, body, escapes, well_formed)
    where = rng.randrange(4)
    if where == 0:
        return text_result(page, status=200)
    if where == 1:
        return {"content": [], "details": {"text": page, "url": "https://example.com"}}
    if where == 2:
        return {"content": [], "details": {page: "as a key", "other": 1}}
    return text_result('{"wrapped":"' + page.replace('"', '\\"') + '"}')


def exec_result(rng: random.Random, stable: str) -> dict[str, Any]:
    """An exec result: terminal failures with volatile output, successes, runs, approvals."""
    kind = rng.randrange(7)
    if kind <= 2:
        # Mostly one exit code and status per cause, so failures repeat with volatile text.
        pick = random.Random(stable) if rng.random() < 0.7 else rng
        code = pick.choice([1, 2, 127, -1, 1.5, 0, 1e21])
        output = volatile_text(rng, stable)
        if rng.random() < 0.1:
            output = f"(Command exited with code {code})"
        details: dict[str, Any] = {
            "status": pick.choice(["failed", "completed"]),
            "exitCode": code,
            "aggregated": rng.choice([output, output, "  " + output + "\n", "", "   "]),
            "durationMs": rng.randint(1, 5000),
            "pid": rng.randint(100, 9999),
        }
        if rng.random() < 0.15:
            details["timedOut"] = rng.choice([True, False, "true"])
        if rng.random() < 0.1:
            details["exitCode"] = rng.choice([None, "1", True])
        return text_result(rng.choice(["", output]), **details)
    if kind == 3:
        return text_result("", status="running", tail=rng.choice(["", "...", stable]), pid=7)
    if kind == 4:
        return text_result(
            "approval needed",
            status=rng.choice(["approval-pending", "approval-unavailable"]),
            reason=rng.choice(["allowlist-miss", None, 3]),
            host=rng.choice(["gateway", "node"]),
            command=rng.choice(["rm -rf /tmp/x", None]),
            warningText=rng.choice(["", "dangerous", None]),
            approvalId=nonce(rng),
        )
    if kind == 5:
        return text_result(stable, status="", exitCode=1)
    return text_result(stable, status="completed", exitCode=0, aggregated=stable)


def failing_exec(rng: random.Random, stable: str) -> dict[str, Any]:
    """Mostly a terminal exec failure of one cause with volatile output, now and then not."""
    if rng.random() < 0.08:
        return exec_result(rng, stable)
    output = volatile_text(rng, stable, layouts=1)
    return text_result(
        "", status="failed", exitCode=1, aggregated=output, durationMs=rng.randint(1, 900)
    )


def random_outcome(rng: random.Random) -> dict[str, Any]:
    """One wire outcome (tool, args, result or error) covering every 2026.9 hashing rule."""
    stable = rng.choice(["npm ERR! missing script: build", "boom", "Error: ENOENT", "ok"])
    kind = rng.randrange(12)
    if kind == 0:
        error: Any = rng.choice(
            [
                "Tool exec not found",
                "Unknown tool: 'web.search'",
                f"fetch failed {marked(rng, 'x')}",
                {"message": "boom", "id": nonce(rng)},
                None,
                42,
            ]
        )
        return {"tool": rng.choice(["read", "exec", "web_fetch"]), "args": {"p": 1}, "error": error}
    if kind == 1:
        return {"tool": "web_fetch", "args": {"url": "u"}, "result": fetched_page(rng, stable)}
    if kind in (2, 3):
        return {
            "tool": rng.choice(["exec", "bash", "Exec "]),
            "args": {"command": stable},
            "result": exec_result(rng, stable),
        }
    if kind == 4:
        changed = rng.choice([False, False, True, None, 0])
        return {
            "tool": "write",
            "args": {"path": "/a"},
            "result": text_result("wrote", changed=changed, bytes=rng.randint(0, 9)),
        }
    if kind == 5:
        return {"tool": rng.choice(["read", "write", "exec"]), "args": {}, "result": veto_result()}
    if kind == 6:
        action = rng.choice(["poll", "log"])
        return {
            "tool": "process",
            "args": {"action": action, "sessionId": "s"},
            "result": text_result(marked(rng, stable), status="running", totalLines=3),
        }
    if kind == 7:
        tool = rng.choice(["sessions_send", "conversations_send", "conversations_turn", "message"])
        return {
            "tool": tool,
            "args": {"action": "send"},
            "result": text_result("sent", messageId=nonce(rng), ok=True, note=marked(rng, "n")),
        }
    if kind == 8:
        return {
            "tool": "read",
            "args": {},
            "result": rng.choice([None, [marked(rng, "a"), 1], marked(rng, stable), 3.5, True]),
        }
    if kind == 9:
        return {
            "tool": "write",
            "args": {},
            "result": text_result(
                "blocked",
                status="blocked",
                deniedReason=rng.choice(["plugin-before-tool-call", None]),
            ),
        }
    if kind == 10:
        return {"tool": "cron", "args": {"x": 1}, "result": text_result(stable, n=rng.random())}
    return {"tool": "read", "args": {}, "result": text_result(stable, status="ok")}
