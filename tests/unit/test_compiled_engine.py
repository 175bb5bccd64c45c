"""Each pass runs the engine it names: the sources by default, the mypyc-compiled modules under
`make test-compiled` (LOOPGUARD_TEST_COMPILED=1, the unpacked wheel first on the path)."""

from __future__ import annotations

import importlib

import pytest

from tests.passes import COMPILED

# The per-event path, and what tells the build; setup.py lists what is compiled.
PER_EVENT = [
    *(f"detectors.{name}" for name in (
        "build_info", "canonical", "engine", "hashing", "history", "history_2026_9",
        "outcome_facts", "process", "records", "tally", "fleet.signature",
    )),
    *(f"streams.{name}" for name in (
        "processing.driver", "processing.hot", "processing.partition", "processing.stored",
        "wire.codec", "audit.lines", "audit.replay",
    )),
]  # fmt: skip


@pytest.mark.parametrize("name", PER_EVENT)
def test_the_pass_runs_the_engine_it_names(name: str) -> None:
    module = importlib.import_module(f"loopguard_fleet.{name}")
    path = module.__file__ or ""
    assert path.endswith(".py") is not COMPILED, path


def test_the_engine_says_which_build_it_is() -> None:
    from loopguard_fleet.detectors import engine_build

    assert engine_build() == ("compiled" if COMPILED else "python")


def test_tool_names_lower_case_with_the_final_sigma() -> None:
    # mypyc's own `str.lower` misses it ('ασ'); hashing.py calls CPython's (JavaScript agrees).
    from loopguard_fleet.detectors.hashing import normalize_tool

    assert normalize_tool(" ΟΔΥΣΣΕΥΣ ") == "οδυσσευς"
