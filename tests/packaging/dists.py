"""Build the sdist and wheel as a release does, and install the wheel where users install it.

`python -m build` builds the sdist first and then the wheel *from that sdist*, so a wheel that
builds proves the sdist holds what a rebuild needs. The wheel goes into a fresh virtualenv
outside the checkout, with the `[embedded]` extra and PyPI's unrelated `loopguard` beside it: our
command must work in the environment where the two names once collided.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[2]
#: PyPI's unrelated project that owns the name `loopguard` (a regular package `loopguard/`).
OTHER_LOOPGUARD = "loopguard==0.2.0"


@dataclass(frozen=True)
class Dists:
    """The built sdist and wheel."""

    sdist: Path
    wheel: Path


@dataclass(frozen=True)
class Installed:
    """A virtualenv outside the checkout with the wheel installed."""

    root: Path

    @property
    def bin(self) -> Path:
        """The virtualenv's bin folder."""
        return self.root / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment: this virtualenv first on PATH, no LOOPGUARD_* or PYTHONPATH."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("LOOPGUARD_") and k not in {"PYTHONPATH", "VIRTUAL_ENV"}
        }
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env | extra


def build(out: Path) -> Dists:
    """The sdist, and the wheel built from it, in `out`."""
    # Building the sdist writes the egg-info into the checkout: `make test` runs two passes at
    # once, and two builds there at the same time would write it together.
    lock = REPO / "build" / "dists.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
            check=True, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    (sdist,) = out.glob("loopguard_fleet-*.tar.gz")
    (wheel,) = out.glob("loopguard_fleet-*.whl")
    return Dists(sdist, wheel)


def install(wheel: Path, root: Path) -> Installed:
    """A fresh virtualenv at `root` with `wheel[embedded]` and PyPI's `loopguard` installed."""
    venv.create(root, with_pip=True)
    pip = [
        str(root / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    subprocess.run(
        [*pip, f"{wheel}[embedded]", OTHER_LOOPGUARD],
        check=True, capture_output=True, text=True, timeout=900, cwd=root,
    )  # fmt: skip
    return Installed(root)
