"""Twenty policy versions pushed during load, with a worker SIGKILLed and a second worker
joining in the middle: every decision, and the version that made it, as `loopguard replay`
of the recorded tool-calls topic decides (docs/policy.md, "Where a switch applies").

The oracle is the replay of the topic itself, switch records included: where the switches
land among the events depends on timing (and a policy owner killed before its commit sends
some again), but live and replay read the same records in the same offsets, so they decide
alike whatever the timing. "Duplicate" here: a decision id published with two contents (an
event decided again under another version) or a decision the replay does not make; the same
message re-sent after the kill (at least once) is deduplicated by id and counted.
"""

from __future__ import annotations

import asyncio
import json
from itertools import count
from pathlib import Path
from typing import Any

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.demo.simulate import fleet_events
from tests.chaos.drive import DRAIN_DEADLINE_S, processed_events
from tests.chaos.fleet import WireEvent, is_tool_event
from tests.chaos.harness import PARTITIONS, Cluster, Record
from tests.chaos.invariants import FIGURES, Figures, by_decision_id, decision_id
from tests.integration.conftest import SessionBroker
from tests.worker_process import WorkerProcess

VERSIONS = 20
CHUNKS = 19  # of the main fleet: a push after each, and after the early fleet's
KILL_AFTER, JOIN_AFTER = 4, 11  # the chunks after which the kill, then the join, start


def version_document(i: int) -> dict[str, Any]:
    """The i-th pushed policy: criticalThreshold alternates (13, 30), so a generic repeat
    blocks under one and only warns under the next; warningThreshold climbs, so each of the
    twenty documents is a version of its own."""
    thresholds = {"warningThreshold": 3 + i // 2, "criticalThreshold": 13 if i % 2 == 0 else 30}
    return {"tools": {"loopDetection": {"enabled": True, **thresholds}}}


def _tool_events(runs: int, seed: int, prefix: str) -> list[WireEvent]:
    """A simulated fleet's tool-calls events (compactions are left out: one the worker reads
    after later results of its run judges them with its own version, docs/policy.md)."""
    return [e for e in fleet_events(runs, seed, prefix=prefix, end_runs=False) if is_tool_event(e)]


def _chunks(events: list[WireEvent], n: int) -> list[list[WireEvent]]:
    size = -(-len(events) // n)
    return [events[i : i + size] for i in range(0, len(events), size)]


async def _cli(*argv: str) -> int:
    """`loopguard …` (it runs an event loop of its own, so in a thread)."""
    return await asyncio.to_thread(main, list(argv))


async def _wait_processing(worker: WorkerProcess, at_least: int, deadline: float = 60.0) -> int:
    """Wait until `worker` processed `at_least` events; how many it had."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        assert worker.is_running, worker.log_tail()
        try:
            _, body = await asyncio.to_thread(worker.get, "/metrics")
            if (n := processed_events(body)) >= at_least:
                return n
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"worker {worker.pid} never processed {at_least} events")


async def _wait_exported(
    workers: list[WorkerProcess], version: str, deadline: float = 60.0
) -> None:
    """Wait until a running worker exports `version` (a partition of its applied it)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    wanted = f'loopguard_policy_info{{version="{version}"}} 1.0'
    while loop.time() < end:
        for w in [w for w in workers if w.is_running]:
            try:
                _, body = await asyncio.to_thread(w.get, "/metrics")
            except OSError:
                continue
            if wanted in body:
                return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no worker exported {version} within {deadline}s")


async def _wait_switched_everywhere(cluster: Cluster, version: str, deadline: float = 60.0) -> None:
    """Wait until every tool-calls partition holds the switch record of `version`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        records = await cluster.read(cluster.tool_calls, idle_s=0.5)
        if len(_switched_partitions(records, version)) == PARTITIONS:
            return
        assert loop.time() < end, f"{version} not in every partition after {deadline}s"


def _switched_partitions(records: list[Record], version: str) -> set[int]:
    """The partitions holding a switch record of `version`."""
    out = set()
    for r in records:
        obj = orjson.loads(r.value or b"null")
        if obj.get("type") == "policy_switch" and obj.get("version") == version:
            out.add(r.partition)
    return out


async def test_twenty_versions_across_a_kill_and_a_rebalance_decide_as_the_replay(
    broker: SessionBroker, tmp_path: Path
) -> None:
    cluster = Cluster(broker, tmp_path, tag="switch", follows_policy_topic=True)
    await cluster.create_topics()
    try:
        await _scenario(cluster, tmp_path)
    finally:
        cluster.workers.stop_all()


async def _scenario(cluster: Cluster, tmp_path: Path) -> None:
    assert cluster.policy_topic is not None
    documents = [version_document(i) for i in range(VERSIONS)]
    versions = [load_policy(d).version for d in documents]
    assert len(set(versions)) == VERSIONS
    # The early fleet is decided by the file's policy (produced before the first push), the
    # late one by the last version (produced once every partition holds its switch): both
    # end with stuck runs, so the oracle has decisions of each, whatever the timing between.
    chunks = [
        _tool_events(6, 11, "early"),
        *_chunks(_tool_events(120, 12, "load"), CHUNKS),
        _tool_events(6, 13, "late"),
    ]
    assert len(chunks) == VERSIONS + 1
    notes: dict[str, object] = {}
    loop = asyncio.get_running_loop()
    workers = [cluster.workers.start()]

    async def kill_and_restart() -> None:
        # Killed while events flow, 100 events after this chunk's; how much work it had not
        # committed then is measured, not awaited (it depends on where its commits fall).
        done = await _wait_processing(workers[0], 1)
        processed = await _wait_processing(workers[0], done + 100)
        await asyncio.to_thread(workers[0].kill)
        committed = sum(max(0, n) for n in (await cluster.committed()).values())
        notes["uncommitted at SIGKILL"] = processed - committed
        workers.append(cluster.workers.start(web_port=workers[0].port))

    async def join() -> None:
        workers.append(cluster.workers.start())
        notes["newcomer processed"] = await _wait_processing(workers[-1], 20)

    async def push(i: int) -> None:
        path = tmp_path / f"v{i}.json"
        path.write_text(json.dumps(documents[i]))
        code = await _cli("policy", "push", str(path), "--broker", cluster.bootstrap,
                          "--topic", cluster.policy_topic or "")  # fmt: skip
        assert code == 0, f"push of version {i} exited {code}"
        # Applied before the next chunk flows, so that the versions take turns deciding (the
        # oracle needs no such order: this only spreads the switches through the load).
        await _wait_exported(workers, versions[i])

    # Filler keeps events flowing while a fault waits for its condition (the killed worker's
    # progress, the newcomer's events of its own), however long the group takes, up to a
    # deadline: fresh runs, 50 events a chunk.
    filler = (c for n in count() for c in _chunks(_tool_events(30, 100 + n, f"fill{n}"), 20))
    filled = 0

    async def flowing(fault: asyncio.Task[None], deadline: float = 90.0) -> None:
        nonlocal filled
        end = loop.time() + deadline
        while not fault.done():
            assert loop.time() < end, f"the fault's condition did not hold in {deadline}s"
            await cluster.produce(next(filler))
            filled += 1
            await asyncio.wait({fault}, timeout=0.2)  # pacing the flow; the fault decides
        notes["filler chunks"] = filled
        await fault

    started = loop.time()
    fault: asyncio.Task[None] | None = None
    for k, chunk in enumerate(chunks):
        if k == KILL_AFTER + 1:
            fault = asyncio.create_task(kill_and_restart())
        elif k == JOIN_AFTER + 1:
            assert fault is not None
            await flowing(fault)  # the successor runs: the newcomer takes partitions from it
            fault = asyncio.create_task(join())
        elif k == len(chunks) - 1:
            assert fault is not None
            await flowing(fault)
            await _wait_switched_everywhere(cluster, versions[-1])
        await cluster.produce(chunk)
        if k < VERSIONS:
            await push(k)
    await cluster.wait_drained(DRAIN_DEADLINE_S, workers[1:])
    notes["load and faults s"] = round(loop.time() - started, 1)

    oracle_out = tmp_path / "replay.jsonl"
    code = await _cli("replay", "--topic", cluster.tool_calls, "--broker", cluster.bootstrap,
                      "--policy", str(cluster.policy_file), "--policy-topic",
                      cluster.policy_topic, "--output", str(oracle_out), "--quiet")  # fmt: skip
    assert code == 0
    lines = oracle_out.read_bytes().splitlines()
    expected = {decision_id(m): m for m in map(orjson.loads, lines)}
    assert len(expected) == len(lines), "the replay made two decisions with one id"

    inputs = await cluster.read(cluster.tool_calls)
    for v in versions:  # each version reached every partition (some twice, after the kill)
        assert len(_switched_partitions(inputs, v)) == PARTITIONS, f"{v} missing in a partition"
    control = await cluster.read(cluster.control)
    got, different, n_messages = by_decision_id(control, cluster.control)
    lost = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    changed = sorted(d for d in set(got) & set(expected) if got[d] != expected[d])
    wrong_version = [
        d for d in set(got) & set(expected)
        if got[d].get("policy_version") != expected[d].get("policy_version")
    ]  # fmt: skip
    deciding = {m["policy_version"] for m in expected.values()}
    notes["versions deciding"] = len(deciding)
    notes["wrong version"] = len(wrong_version)
    figures = Figures(
        scenario="20 policy versions + SIGKILL + rebalance",
        events=cluster.produced,
        decisions=len(expected),
        lost=len(lost),
        extra=len(extra) + len(changed) + len(different),
        duplicates=n_messages - len(got),
        control_messages=n_messages,
        states=0,  # the replay prints decisions only: invariant (d) is the other scenarios'
        state_mismatches=0,
        notes=notes,
    )
    FIGURES.append(figures)
    print(figures.line())
    assert load_policy(json.loads(cluster.policy_file.read_text())).version in deciding
    assert versions[-1] in deciding
    assert not lost, f"{len(lost)} decisions lost, e.g. {[expected[d] for d in lost[:3]]}"
    assert not extra, f"{len(extra)} decisions extra, e.g. {[got[d] for d in extra[:3]]}"
    assert not different, f"{len(different)} ids published with two contents: {different[:3]}"
    assert not changed, f"{len(changed)} differ: {[(got[d], expected[d]) for d in changed[:2]]}"
    assert not wrong_version
