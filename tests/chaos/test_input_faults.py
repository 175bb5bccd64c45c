"""Input faults: compactions arriving after later tool results; every event delivered 3 times."""

from __future__ import annotations

from loopguard_fleet.config import load_policy
from tests.chaos.drive import run_fleet, wait_uncommitted
from tests.chaos.fleet import Oracle, chaos_fleet, delay_compactions, redeliver
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import check

RUNS = 150


def _oracle() -> Oracle:
    return Oracle(load_policy(POLICY), frozenset({"telegram"}))


async def test_compactions_arriving_after_later_tool_results_match_the_oracle(
    cluster: Cluster,
) -> None:
    fleet = delay_compactions(chaos_fleet(RUNS, seed=6, prefix="late"))
    late = sum(1 for w in fleet.waves for e in w if e["type"] == "compaction")
    oracle = _oracle()
    worker = cluster.workers.start()
    await run_fleet(cluster, fleet, oracle, alive=lambda: [worker])
    aborts = sum(1 for d in oracle.decisions.values() if d.get("command") == "abort_run")
    assert aborts, "the late compactions should still abort the looping runs"
    await check("late compactions", cluster, oracle, notes={"late": late, "aborts": aborts})


async def test_every_event_redelivered_twice_changes_nothing(cluster: Cluster) -> None:
    fleet = redeliver(chaos_fleet(RUNS, seed=7, prefix="dup"), copies=2, seed=7)
    oracle = _oracle()
    worker = cluster.workers.start()
    workers = [worker]

    async def kill_and_restart() -> None:  # redelivery by the broker too, on top of the copies
        await wait_uncommitted(cluster, worker, 300)
        worker.kill()
        workers.append(cluster.workers.start(web_port=worker.port))

    await run_fleet(cluster, fleet, oracle, fault=kill_and_restart, alive=lambda: workers[-1:])
    dropped = oracle.replayer.stats.duplicates
    assert dropped >= 2 * (fleet.events // 3)
    await check("every event x3 + SIGKILL", cluster, oracle, notes={"copies dropped": dropped})
