"""Which build of the engine is loaded: the modules compiled by mypyc (setup.py,
LOOPGUARD_COMPILE=1) or the Python sources. Compiled, a module's file is an extension."""

from __future__ import annotations

from typing import Final

COMPILED: Final = not __file__.endswith(".py")


def engine_build() -> str:
    """The engine's build: "compiled" or "python"."""
    return "compiled" if COMPILED else "python"
