"""LOOPGUARD_COMMIT_INTERVAL_SECONDS: how often the worker's consumer commits, and so how often
it checkpoints (unset: 10 s at-least-once, 2.8 s under exactly_once; docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.app import build_app


@pytest.mark.parametrize(
    ("env", "guarantee", "expected"),
    [
        (None, "at_least_once", 10.0),
        (None, "exactly_once", 2.8),
        ("10", "exactly_once", 10.0),
        ("2.8", "at_least_once", 2.8),
        ("0.5", "at_least_once", 0.5),
    ],
)
def test_the_consumer_commits_as_often_as_the_setting_says(
    env: str | None,
    guarantee: str,
    expected: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env is not None:
        monkeypatch.setenv("LOOPGUARD_COMMIT_INTERVAL_SECONDS", env)
    monkeypatch.setenv("LOOPGUARD_PROCESSING_GUARANTEE", guarantee)
    wiring = build_app(Settings(data_dir=str(tmp_path)), Metrics())
    assert wiring.app.consumer.commit_interval == expected


@pytest.mark.parametrize("value", ["0", "-1", "3601"])
def test_an_interval_out_of_range_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_COMMIT_INTERVAL_SECONDS", value)
    with pytest.raises(ValueError, match="commit_interval_seconds"):
        Settings()
