"""The CPython the benches ran LoopGuard on, printed beside their figures as `openclaw_node` is.

One version built two ways differs by more than a host does between hours: pyenv's default
build (no profile-guided or link-time optimisation) replays workload M at 0.89-0.93 x the
events/s of Debian's optimised `python3.11`, whose build is like the image's `python:3.11-slim`
(docs/performance.md, "The interpreter"). A bench runs its workers, relay and replay on the
interpreter that runs it (`sys.executable`), so one name covers every side of its figures.
"""

from __future__ import annotations

import os
import platform
import sys


def python_build() -> str:
    """`<version> <resolved interpreter path>`, e.g. `3.11.2 /usr/bin/python3.11`."""
    return f"{platform.python_version()} {os.path.realpath(sys.executable)}"
