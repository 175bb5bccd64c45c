"""2026.9 outcome facts agree with OpenClaw's hashToolOutcome on generated outcomes."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from loopguard_fleet.detectors import Outcome, normalize_tool
from loopguard_fleet.detectors.outcome_facts import OutcomeFacts, outcome_facts, retool_2026_9
from tests.differential.outcomes import random_outcome

SEEDS = [1, 2, 3]
PER_SEED = 1500


def _ours(item: dict[str, Any]) -> dict[str, Any]:
    tool = retool_2026_9(normalize_tool(item["tool"]))
    outcome = Outcome.error(item["error"]) if "error" in item else Outcome.result(item["result"])
    facts: OutcomeFacts = outcome_facts(tool, item["args"], outcome, frozenset())
    return {
        "result_hash": facts.result_hash,
        "outcome_kind": facts.outcome_kind,
        "failure_identity": facts.failure_identity,
        "no_progress": facts.no_progress,
        "unknown_tool_name": facts.unknown_tool_name,
    }


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_every_generated_outcome_has_openclaws_facts(openclaw, seed: int) -> None:
    rng = random.Random(seed)
    items = [random_outcome(rng) for _ in range(PER_SEED)]
    theirs = openclaw({"mode": "facts", "outcomes": items})["facts"]
    ours = [_ours(item) for item in items]
    mismatches = [
        (i, items[i], o, t) for i, (o, t) in enumerate(zip(ours, theirs, strict=True)) if o != t
    ]
    assert not mismatches[:3]
    # The generated outcomes really exercise every 2026.9 rule.
    kinds = Counter(t["outcome_kind"] for t in theirs)
    assert kinds["tool-loop-veto"] > 10 and kinds["terminal-exec-failure"] > 10
    assert sum(t["no_progress"] for t in theirs) > 50
    # Some failures differ only in volatile text: one identity, several result hashes.
    hashes_by_identity: dict[str, set[str]] = {}
    for t in theirs:
        if t["failure_identity"]:
            hashes_by_identity.setdefault(t["failure_identity"], set()).add(t["result_hash"])
    assert max(len(h) for h in hashes_by_identity.values()) > 1
