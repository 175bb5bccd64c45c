"""Per-agent policies of generated 2026.9-style openclaw.json files agree with OpenClaw's.

OpenClaw 2026.9 resolves an agent's loop detection with resolveToolLoopDetectionConfig
(`agents.entries.<id>` or `agents.list[]` over `tools.loopDetection`) and honours
`default: true` through tryResolveDefaultAgentId; LoopGuard's Policy must give every agent
the same `enabled` and post-compaction guard, and runs without an agent the default agent's.
"""

from __future__ import annotations

import random
from typing import Any

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.roster import normalize_agent_id

IDS = ["main", "safe-runner", "Safe Runner", "ops_2", "Work", " spaced ", "x.y"]


def _flag(rng: random.Random) -> dict[str, Any]:
    choice = rng.randrange(3)
    return {} if choice == 0 else {"enabled": choice == 1}


def _config(rng: random.Random) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if rng.random() < 0.7:
        cfg["tools"] = {"loopDetection": _flag(rng)}
    keyed = rng.random() < 0.75
    # List ids are matched exactly (docs/semantics.md §2): list rosters use canonical ids.
    pool = IDS if keyed else [i for i in IDS if i == i.strip().lower() and "." not in i]
    ids = rng.sample(pool, rng.randint(1, min(4, len(pool))))
    marked = rng.choice([None, *ids])
    entries: dict[str, Any] = {}
    for agent_id in ids:
        entry: dict[str, Any] = {"name": agent_id.title()}
        if rng.random() < 0.7:
            entry["tools"] = {"loopDetection": _flag(rng), "profile": "coding"}
        if agent_id == marked:
            entry["default"] = True
        elif rng.random() < 0.2:
            entry["default"] = False
        entries[agent_id] = entry
    if keyed:
        cfg["agents"] = {"entries": entries}
    else:
        cfg["agents"] = {"list": [{"id": k, **v} for k, v in entries.items()]}
    return cfg


def _unique_ids(cfg: dict[str, Any]) -> bool:
    """Configs LoopGuard rejects (ids that collide after normalisation) are left out."""
    agents = cfg["agents"]
    keys = list(agents["entries"]) if "entries" in agents else [e["id"] for e in agents["list"]]
    seen = [normalize_agent_id(k) if "entries" in agents else k for k in keys]
    return len(set(seen)) == len(seen)


def test_every_agent_gets_openclaws_loop_detection_and_guard(openclaw) -> None:
    rng = random.Random(7)
    cfgs = [c for c in (_config(rng) for _ in range(400)) if _unique_ids(c)]
    asked = [{"cfg": c, "agents": [*IDS, "nobody"]} for c in cfgs]
    theirs = openclaw({"mode": "config", "configs": asked})["configs"]
    marked = 0
    for cfg, answer in zip(cfgs, theirs, strict=True):
        policy = load_policy(cfg)
        ours = {
            agent_id: {"enabled": th.enabled, "guard": th.post_compaction_guard}
            for agent_id in [*IDS, "nobody"]
            if (th := policy.for_agent(agent_id))
        }
        if "entries" not in cfg["agents"]:
            # LoopGuard matches list ids exactly (docs/semantics.md §2); OpenClaw normalises them.
            ours = {k: v for k, v in ours.items() if k.strip().lower() == k and "." not in k}
            answer["agents"] = {k: v for k, v in answer["agents"].items() if k in ours}
        assert (cfg, ours) == (cfg, answer["agents"])
        if policy.default_agent is not None:
            marked += 1
            assert policy.default_agent == answer["default_agent"]
            default = policy.for_agent(None)
            asked_as = next(k for k in IDS if normalize_agent_id(k) == answer["default_agent"])
            assert {"enabled": default.enabled, "guard": default.post_compaction_guard} == (
                answer["agents"][asked_as]
            )
    assert marked > 50
