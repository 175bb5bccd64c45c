"""The compiled engine: with LOOPGUARD_COMPILE=1, a wheel build compiles the modules on the
per-event path (the engine and the processing core that drives it) with mypyc
(docs/performance.md, "The compiled engine"); without it, the wheel is pure Python.
Everything else about the package is in pyproject.toml.

    LOOPGUARD_COMPILE=1 pip install --no-build-isolation .   # needs mypy, a C compiler, Python.h

The Python sources stay the reference: the compiled modules are the same files, and
`make test-compiled` runs the verdict suites against them. Not for editable installs: an
in-place build would put the extensions beside the sources, where they would shadow edits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup

# Left interpreted among them: `errors` (its exceptions are subclassed together with built-in
# exceptions, which a compiled class's layout forbids) and the package `__init__`s.
INTERPRETED = {"__init__.py", "errors.py"}
STAGE = Path("build") / "mypyc-src"
# The modules on the per-event path, as the package installs them (the staging tree below):
# the engine, and the processing core that replay and the worker drive it through. The worker's
# Faust glue (streams/worker/) stays interpreted: it patches and subclasses Faust's classes.
COMPILED = (
    "detectors/*.py",
    "detectors/rules/*.py",
    "detectors/fleet/*.py",
    "streams/processing/driver.py",
    "streams/processing/hot.py",
    "streams/processing/partition.py",
    "streams/processing/policy_switch.py",
    "streams/processing/stored.py",
    "streams/wire/codec.py",
    "streams/audit/lines.py",
    "streams/audit/replay.py",
)
# The build backend runs this file for the metadata too (`dist_info`, `egg_info`) before the
# wheel's build runs it again. The metadata needs only the extensions' top-level names (for
# top_level.txt), not mypyc's type check and code generation (~10 s of the ~90 s build).
METADATA_ONLY = {"dist_info", "egg_info"}


def compiled_modules() -> list[Any]:
    """The mypyc extensions of the per-event modules, when LOOPGUARD_COMPILE=1."""
    if os.environ.get("LOOPGUARD_COMPILE") != "1":
        return []
    from mypyc.build import group_name, mypycify
    from mypyc.common import shared_lib_name
    from setuptools import Extension

    # mypy names a module by its path: a link tree lays detectors/ and streams/ out as they are
    # installed, so the extensions are loopguard_fleet.*, as pyproject's package-dir maps them.
    root = Path(__file__).resolve().parent
    package = STAGE / "loopguard_fleet"
    package.mkdir(parents=True, exist_ok=True)
    for folder in ("detectors", "streams"):
        link = package / folder
        if not link.is_symlink():
            link.symlink_to(root / folder, target_is_directory=True)
    sources = sorted(
        str(path)
        for pattern in COMPILED
        for path in package.glob(pattern)
        if path.name not in INTERPRETED
    )
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in METADATA_ONLY:
        # mypyc's one shared library for all the modules, named as mypycify names it; the
        # modules' own extensions are under loopguard_fleet, a top-level name already.
        modules = [".".join(Path(s).relative_to(STAGE).with_suffix("").parts) for s in sources]
        return [Extension(shared_lib_name(group_name(modules)), sources=[])]
    # A minimal configuration: the package's own (pyproject) loads the pydantic plugin, which
    # the engine does not use and a build environment need not have.
    config = STAGE / "mypy.ini"
    config.write_text("[mypy]\nignore_missing_imports = True\nexplicit_package_bases = True\n")
    os.environ["MYPYPATH"] = str(STAGE)
    return list(mypycify(["--config-file", str(config), *sources], opt_level="3"))


setup(ext_modules=compiled_modules())
