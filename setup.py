"""The compiled engine: with LOOPGUARD_COMPILE=1, a wheel build compiles the per-call engine
modules with mypyc (docs/performance.md, "The compiled engine"); without it, the wheel is pure
Python. Everything else about the package is in pyproject.toml.

    LOOPGUARD_COMPILE=1 pip install --no-build-isolation .   # needs mypy, a C compiler, Python.h

The Python sources stay the reference: the compiled modules are the same files, and
`make test-compiled` runs the verdict suites against them. Not for editable installs: an
in-place build would put the extensions beside the sources, where they would shadow edits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from setuptools import setup

# Left interpreted: `errors` (its exceptions are subclassed together with built-in exceptions,
# which a compiled class's layout forbids), the package `__init__`s and the fleet windows (not
# on the per-call path).
INTERPRETED = {"__init__.py", "errors.py"}
STAGE = Path("build") / "mypyc-src"


def compiled_modules() -> list[Any]:
    """The mypyc extensions of the per-call engine, when LOOPGUARD_COMPILE=1."""
    if os.environ.get("LOOPGUARD_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    # mypy names a module by its path: a link tree lays detectors/ out as it is installed, so
    # the extensions are loopguard_fleet.detectors.*, as pyproject's package-dir maps them.
    root = Path(__file__).resolve().parent
    package = STAGE / "loopguard_fleet"
    package.mkdir(parents=True, exist_ok=True)
    link = package / "detectors"
    if not link.is_symlink():
        link.symlink_to(root / "detectors", target_is_directory=True)
    sources = sorted(
        str(path)
        for folder in (link, link / "rules")
        for path in folder.glob("*.py")
        if path.name not in INTERPRETED
    )
    # A minimal configuration: the package's own (pyproject) loads the pydantic plugin, which
    # the engine does not use and a build environment need not have.
    config = STAGE / "mypy.ini"
    config.write_text("[mypy]\nignore_missing_imports = True\nexplicit_package_bases = True\n")
    os.environ["MYPYPATH"] = str(STAGE)
    return list(mypycify(["--config-file", str(config), *sources], opt_level="3"))


setup(ext_modules=compiled_modules())
