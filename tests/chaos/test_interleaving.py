"""Topic interleaving on the real broker (docs/reliability.md, guarantee 4): a worker that reads
a backlog's compactions topic before its tool-calls topic decides exactly as seq order does."""

from __future__ import annotations

from loopguard_fleet.config import load_policy
from tests.chaos.drive import DRAIN_DEADLINE_S, produce_paced
from tests.chaos.fleet import Oracle, chaos_fleet, in_seq_order, is_tool_event
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import check

RUNS = 150


async def test_a_backlog_read_compactions_topic_first_gives_the_seq_order_decisions(
    cluster: Cluster,
) -> None:
    fleet = chaos_fleet(RUNS, seed=8, prefix="order")
    events = [e for wave in fleet.waves for e in wave]
    lives = [e for e in events if not is_tool_event(e)]
    tools = [e for e in events if is_tool_event(e)]
    oracle = Oracle(load_policy(POLICY), frozenset({"telegram"}))
    oracle.feed(in_seq_order(events))
    aborts = sum(1 for d in oracle.decisions.values() if d.get("command") == "abort_run")
    ends = sum(1 for e in lives if e["type"] == "run_end")
    assert aborts and ends, "the fleet must hold guard aborts and run_ends for this to mean much"

    await cluster.produce(lives)
    worker = cluster.workers.start()
    # Every compaction and run_end is processed (and committed) before any tool event exists.
    await cluster.wait_drained(DRAIN_DEADLINE_S, [worker])
    await produce_paced(cluster, tools, chunk=500, pace_s=0)
    await cluster.wait_drained(DRAIN_DEADLINE_S, [worker])
    notes = {"life events first": len(lives), "run_ends": ends, "aborts": aborts}
    await check("compactions topic read first", cluster, oracle, notes=notes)
