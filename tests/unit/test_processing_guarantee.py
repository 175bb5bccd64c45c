"""LOOPGUARD_PROCESSING_GUARANTEE: Faust's guarantee, and the output path it needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.outbox import BatchOutbox
from loopguard_fleet.streams.worker.exactly_once import TransactionalOutbox
from loopguard_fleet.streams.worker.run import assemble


def test_at_least_once_is_the_default_and_exactly_once_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().processing_guarantee == "at_least_once"
    monkeypatch.setenv("LOOPGUARD_PROCESSING_GUARANTEE", "exactly_once")
    assert Settings().processing_guarantee == "exactly_once"


def test_an_unknown_guarantee_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValidationError, match=r"'at_least_once' or 'exactly_once'"):
        Settings(processing_guarantee="at_most_once")


@pytest.mark.parametrize(
    ("guarantee", "outbox"),
    [
        pytest.param("at_least_once", BatchOutbox, id="at-least-once-batches-by-hand"),
        pytest.param("exactly_once", TransactionalOutbox, id="exactly-once-held-until-commit"),
    ],
)
def test_the_worker_hands_faust_the_guarantee_and_sends_decisions_the_way_it_needs(
    tmp_path: Path, guarantee: str, outbox: type
) -> None:
    settings = Settings(processing_guarantee=guarantee, data_dir=tmp_path, store="memory://")
    wiring, processor = assemble(settings)
    assert wiring.app.conf.processing_guarantee.value == guarantee
    assert type(processor._outbox) is outbox
