"""A worker keeps its local store across a restart only after a clean stop
(streams/worker/unclean_stop.py): a store left by a kill may hold writes its changelog never
got, and one left by a worker that found the broker had lost its data belongs to a changelog
that is gone."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from loopguard_fleet.streams.worker.unclean_stop import (
    OPEN_MARKER,
    close_store,
    mark_data_lost,
    open_store,
)


def _store_file(data_dir: Path) -> Path:
    kept = data_dir / "v1" / "tables" / "runs-0.db"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(b"state")
    return kept


def test_a_first_start_keeps_the_dir_and_marks_it_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert open_store(data_dir) is False
    assert (data_dir / OPEN_MARKER).exists()


def test_a_start_after_a_clean_stop_keeps_the_store(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    open_store(data_dir)
    kept = _store_file(data_dir)
    close_store(data_dir)
    assert not (data_dir / OPEN_MARKER).exists()
    assert open_store(data_dir) is False
    assert kept.read_bytes() == b"state"


def test_a_start_after_an_unclean_stop_empties_the_store_and_marks_it_open_again(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    open_store(data_dir)
    kept = _store_file(data_dir)  # the worker was killed: no close_store
    assert open_store(data_dir) is True
    assert not kept.exists()
    assert sorted(p.name for p in data_dir.iterdir()) == [OPEN_MARKER]
    close_store(data_dir)
    assert open_store(data_dir) is False  # that worker stopped cleanly


@pytest.mark.parametrize("clean", [True, False])
def test_a_start_after_the_broker_lost_its_data_empties_the_store_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clean: bool
) -> None:
    data_dir = tmp_path / "data"
    open_store(data_dir)
    kept = _store_file(data_dir)
    mark_data_lost(data_dir, "the broker lost this worker's data: calls[0] committed 7")
    if clean:  # exit 75 is not a clean stop; a supervisor may have stopped the worker cleanly
        close_store(data_dir)
    with caplog.at_level(logging.WARNING):
        assert open_store(data_dir) is True
    assert not kept.exists()
    assert sorted(p.name for p in data_dir.iterdir()) == [OPEN_MARKER]
    assert "the broker lost the changelog they belong to" in caplog.text
