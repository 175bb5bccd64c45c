"""LOOPGUARD_COMMIT_INTERVAL_SECONDS: how often the worker's consumer commits, and so how often
it checkpoints (Faust's 2.8 s unless told otherwise; docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.app import build_app


@pytest.mark.parametrize(("env", "expected"), [(None, 2.8), ("10", 10.0), ("0.5", 0.5)])
def test_the_consumer_commits_as_often_as_the_setting_says(
    env: str | None, expected: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is not None:
        monkeypatch.setenv("LOOPGUARD_COMMIT_INTERVAL_SECONDS", env)
    wiring = build_app(Settings(data_dir=str(tmp_path)), Metrics())
    assert wiring.app.consumer.commit_interval == expected


@pytest.mark.parametrize("value", ["0", "-1", "3601"])
def test_an_interval_out_of_range_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_COMMIT_INTERVAL_SECONDS", value)
    with pytest.raises(ValueError, match="commit_interval_seconds"):
        Settings()
