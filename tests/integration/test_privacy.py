"""Privacy: known secrets in tool arguments, results and errors never reach a topic the worker
writes (run-state changelog, control, dead letters), except inside a dead letter's `prefix`:
the first LOOPGUARD_DEAD_LETTER_PREFIX_BYTES bytes of a refused message, kept so an operator
can see what was refused. With that setting at 0 the secrets appear nowhere.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from tests.chaos.harness import Cluster, Record

SECRETS = [f"sk-live-PRIVACY-{i}-Zq9xW" for i in range(12)]


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "details": {"echo": text}}


def _run(run_id: str, secret: str, calls: int, *, error: bool) -> list[dict[str, Any]]:
    """A run repeating one call whose args and outcome carry `secret` (it loops: decisions)."""
    out = []
    for i in range(calls):
        seq = 2 * i + 1
        base = {"run_id": run_id, "tool": "read", "tool_call_id": f"c{seq}"}
        base["args"] = {"path": f"/vault/{secret}", "token": secret}
        out.append({"type": "tool_call", "event_id": f"{run_id}:{seq}", "seq": seq, **base})
        outcome = {"error": f"denied: {secret}"} if error else {"result": _text(secret)}
        result = {"type": "tool_result", "event_id": f"{run_id}:{seq + 1}", "seq": seq + 1}
        out.append({**result, **base, **outcome})
    return out


def _refused(secret: str) -> list[tuple[bytes | None, bytes]]:
    """Refused messages with the secret early (inside a prefix) and late (past it)."""
    ev = _run("refused", secret, 1, error=False)[0]
    raw = orjson.dumps(ev)
    return [
        (b"refused", raw[: raw.index(secret.encode()) + len(secret) + 3]),  # truncated JSON
        (b"refused", orjson.dumps({"token": secret, **ev, "seq": "one"})),  # wrong type
        (b"refused", orjson.dumps({"secret": secret, "type": "tool_call"})),  # no run_id
        (b"someone-else", raw),  # key mismatch
        (b"refused", orjson.dumps({"k": secret, "pad": "x" * 5000})),  # too large
        (b"refused", b"\xff" + secret.encode() + b"\xfe"),  # not UTF-8: base64 prefix
    ]


def _leaks(data: bytes) -> list[str]:
    """Secrets found in `data`, as text or as base64 (the prefix's other encoding)."""
    found = [s for s in SECRETS if s.encode() in data]
    text = data.decode("utf-8", "replace")
    for field in ("prefix", "key"):
        marker = f'"{field}":"'
        start = text.find(marker)
        while start >= 0:
            end = text.find('"', start + len(marker))
            blob = text[start + len(marker) : end]
            try:
                decoded = base64.b64decode(blob, validate=True)
            except ValueError:
                decoded = b""
            found += [s for s in SECRETS if s.encode() in decoded]
            start = text.find(marker, end)
    return found


def _without_prefix(record: Record) -> bytes:
    obj = orjson.loads(record.value or b"{}")
    obj.pop("prefix", None)
    return (record.key or b"") + orjson.dumps(obj)


@pytest.mark.parametrize("prefix_bytes", [256, 0])
async def test_secrets_appear_nowhere_but_in_a_dead_letters_bounded_prefix(
    broker: EmbeddedBroker, tmp_path: Path, prefix_bytes: int
) -> None:
    cluster = Cluster(
        broker,
        tmp_path,
        tag="priv",
        extra_settings={"dead_letter_prefix_bytes": prefix_bytes, "max_message_bytes": 4096},
    )
    await cluster.create_topics()
    records: list[tuple[str, bytes | None, bytes]] = []
    for i, secret in enumerate(SECRETS):
        for ev in _run(f"priv-{i}", secret, 22, error=i % 2 == 0):
            records.append((cluster.tool_calls, ev["run_id"].encode(), orjson.dumps(ev)))
        records += [(cluster.tool_calls, k, v) for k, v in _refused(secret)]
    worker = cluster.workers.start()
    try:
        await cluster.produce_records(records)
        await cluster.wait_drained(90, [worker])
        control = await cluster.read(cluster.control)
        changelog = await cluster.read(cluster.changelog)
        dead = await cluster.read(cluster.dead_letter)
    finally:
        cluster.workers.stop_all()

    assert len(dead) == 6 * len(SECRETS)
    assert any(orjson.loads(r.value or b"{}")["type"] == "command" for r in control)
    assert len(changelog) > 0
    for name, topic in (("control", control), ("changelog", changelog)):
        leaked = {s for r in topic for s in _leaks((r.key or b"") + (r.value or b""))}
        assert not leaked, f"secrets in the {name} topic: {sorted(leaked)}"
    outside = {s for r in dead for s in _leaks(_without_prefix(r))}
    assert not outside, f"secrets in dead letters outside their prefix: {sorted(outside)}"
    in_prefix = {s for r in dead for s in _leaks(r.value or b"")}
    for r in dead:
        obj = orjson.loads(r.value or b"{}")
        prefix = obj["prefix"] or ""
        limit = prefix_bytes if obj["prefix_encoding"] != "base64" else -(-prefix_bytes // 3) * 4
        assert len(prefix.encode()) <= limit
    if prefix_bytes == 0:
        assert not in_prefix
    else:
        assert in_prefix == set(SECRETS)  # the one documented exception is real
