"""Chaos fixtures: the session's broker (LOOPGUARD_TEST_BROKER) and one `Cluster` per scenario.

Every test here is marked `chaos`; the figures each scenario measured (events, lost,
duplicates before dedupe) are printed at the end of the session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.chaos.harness import Cluster
from tests.chaos.invariants import FIGURES
from tests.integration.conftest import (
    SessionBroker,
    broker,  # noqa: F401  # the session broker fixture
    broker_kind,
)

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/chaos is a chaos test."""
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.chaos)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what each chaos scenario measured."""
    if FIGURES:
        terminalreporter.section(f"chaos figures ({broker_kind()})")
        for figures in FIGURES:
            terminalreporter.write_line(figures.line())


@pytest.fixture
async def cluster(broker: SessionBroker, tmp_path: Path) -> AsyncIterator[Cluster]:  # noqa: F811
    """A scenario's topics and worker launcher on the session broker; workers stopped after."""
    c = Cluster(broker, tmp_path)
    await c.create_topics()
    try:
        yield c
    finally:
        c.workers.stop_all()
