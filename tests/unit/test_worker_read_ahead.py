"""What the worker reads ahead and keeps unpacked comes from its settings: a poll hands it at
most one batch unless LOOPGUARD_FETCH_MAX_RECORDS says otherwise, and the driver keeps
LOOPGUARD_RUN_CACHE_HOT_RUNS runs as objects (docs/performance.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.agent import driver_limits
from loopguard_fleet.streams.worker.app import build_app


@pytest.mark.parametrize(
    ("settings", "max_records"),
    [
        ({}, 2_000),
        ({"batch_max_events": 500}, 500),
        ({"fetch_max_records": 10_000}, 10_000),
    ],
)
def test_a_poll_hands_the_worker_one_batch_unless_told_otherwise(
    settings: dict[str, int], max_records: int, tmp_path: Path
) -> None:
    wiring = build_app(Settings(data_dir=str(tmp_path), **settings), Metrics())
    assert wiring.app.conf.broker_max_poll_records == max_records


@pytest.mark.parametrize(("hot", "expected"), [(None, 1_024), (0, 0), (50, 50)])
def test_the_driver_keeps_the_configured_runs_unpacked(hot: int | None, expected: int) -> None:
    settings = Settings() if hot is None else Settings(run_cache_hot_runs=hot)
    assert driver_limits(settings).hot_runs == expected
