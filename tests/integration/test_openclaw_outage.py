"""The OpenClaw plugin's real transport when its broker dies while a call waits for a verdict.

The test starts and kills a Tansu of its own, so it does not depend on the pass's broker: the
Makefile runs it in the Tansu pass only (TANSU_ONLY).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.kafka.admin import create_topics

from .conftest import TopicSet
from .test_openclaw_plugin import NODE, PLUGIN, plugin_config


async def test_a_broker_that_dies_while_a_call_waits_fails_it_open_at_once(tmp_path: Path) -> None:
    """The real transport: the call waiting when the broker dies, and every later one, fail
    open without waiting for a verdict nobody can give (each would cost verdictTimeoutMs)."""
    assert NODE.exists(), f"run `npm ci` in {PLUGIN} first (it installs node >= 24)"
    dying = EmbeddedBroker().start()
    proc: asyncio.subprocess.Process | None = None
    try:
        ts = TopicSet.fresh("outage")
        await create_topics(dying.bootstrap, ts.names, 1)
        config = {**plugin_config(dying, ts, 5000), "flushTimeoutMs": 200}
        proc = await asyncio.create_subprocess_exec(
            str(NODE), "scripts/drive-outage.mjs", json.dumps(config),
            cwd=PLUGIN, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        assert ready["phase"] == "calling"
        assert ready["stats"]["verdictTimeouts"] == 1, "the broker was up: the call waited"
        dying.stop(timeout=0.1)  # it crashes (SIGKILL) while c2 waits for its verdict
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        dying.stop()
    report = json.loads(out.decode().splitlines()[-1])
    assert [c["result"] for c in report["calls"]] == [None] * 4
    assert report["stats"]["verdictTimeouts"] == 1, "\n".join(report["logs"])
    assert report["stats"]["failOpenDisconnected"] == 3
    assert report["stats"]["lostAtShutdown"] >= 1, "c2..c4 could not be sent: counted"
    assert any("lost at shutdown" in line for line in report["logs"])
