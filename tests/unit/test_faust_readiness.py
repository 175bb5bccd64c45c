"""`/readyz`'s condition: an input partition held, table recovered, no rebalance under way."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from loopguard_fleet.streams.worker.faust.readiness import is_consuming

INPUTS = ("loopguard.tool-calls", "loopguard.compactions")


def _app(rebalancing: bool, recovered: bool, topics: list[str]) -> Any:
    """The three parts of a Faust app that readiness reads, in the given state."""
    completed = asyncio.Event()
    if recovered:
        completed.set()
    assignment = {TP(t, 0) for t in topics}
    return SimpleNamespace(
        rebalancing=rebalancing,
        tables=SimpleNamespace(recovery=SimpleNamespace(completed=completed)),
        consumer=SimpleNamespace(assignment=lambda: assignment),
    )


def test_not_ready_before_any_assignment() -> None:
    assert not is_consuming(_app(False, False, []), INPUTS)


def test_not_ready_while_recovering_or_rebalancing() -> None:
    assert not is_consuming(_app(False, False, [INPUTS[0]]), INPUTS)
    assert not is_consuming(_app(True, True, [INPUTS[0]]), INPUTS)


def test_not_ready_holding_only_a_changelog_partition() -> None:
    assert not is_consuming(_app(False, True, ["loopguard-fleet-runs-changelog"]), INPUTS)


def test_ready_once_recovered_with_an_input_partition() -> None:
    assert is_consuming(_app(False, True, [INPUTS[1]]), INPUTS)
