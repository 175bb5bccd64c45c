"""Each pass runs the engine it names: the sources by default, the mypyc-compiled modules under
`make test-compiled` (LOOPGUARD_TEST_COMPILED=1, the unpacked wheel first on the path)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.passes import COMPILED

# The per-event path, and what tells the build; setup.py lists what is compiled.
PER_EVENT = [
    *(f"detectors.{name}" for name in (
        "build_info", "canonical", "engine", "hashing", "history", "history_2026_9",
        "outcome_facts", "process", "records", "tally", "fleet.signature",
    )),
    *(f"streams.{name}" for name in (
        "processing.driver", "processing.hot", "processing.partition",
        "processing.policy_switch", "processing.stored", "wire.codec", "audit.lines",
        "audit.replay",
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


@pytest.mark.skipif(not COMPILED, reason="the compiled pass reads the compiled wheel's metadata")
def test_the_compiled_wheel_names_each_top_level_module_it_installs() -> None:
    # setup.py names mypyc's shared library for the metadata without compiling (top_level.txt).
    from importlib.metadata import Distribution

    from loopguard_fleet.detectors import engine

    # The wheel unpacked where the compiled modules are (the source tree has metadata too).
    unpacked = Path(engine.__file__ or "").parents[2]
    dist = Distribution.at(next(unpacked.glob("loopguard_fleet-*.dist-info")))
    top_level = set((dist.read_text("top_level.txt") or "").split())
    installed = {
        str(path.parts[0]).split(".")[0]
        for path in dist.files or []
        if ".dist-info" not in path.parts[0]
    }
    assert any(name.endswith("__mypyc") for name in installed), installed
    assert installed == top_level
