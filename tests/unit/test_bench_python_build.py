"""`python` in the benches' figures: the interpreter that ran LoopGuard, named so that it can
be run again to reproduce them."""

from __future__ import annotations

import subprocess
import sys

from bench.python_build import python_build


def test_the_named_interpreter_is_the_one_running_and_runs() -> None:
    version, path = python_build().split(" ", 1)
    shown = subprocess.run(
        [path, "-c", "import platform, sys; print(platform.python_version(), sys.base_prefix)"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    # The same version of the same installation (a venv's python resolves to its base's).
    assert shown == [version, sys.base_prefix]
