"""The package as users get it: built, checked, installed outside the checkout, and run there."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from tests.packaging.dists import REPO, Dists, Installed

TRACE = REPO / "tests" / "data" / "traces" / "openclaw-P2-r7.jsonl"
POLICY = REPO / "examples" / "policy.json5"


def _version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_wheel_holds_our_root_the_pom_and_nothing_named_loopguard(dists: Dists) -> None:
    names = zipfile.ZipFile(dists.wheel).namelist()
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"loopguard_fleet"}
    assert "loopguard_fleet/deploy/kafka/pom.xml" in names
    assert "loopguard_fleet/streams/cli.py" in names
    assert "loopguard_fleet/detectors/py.typed" in names
    assert "loopguard_fleet/adapters/langchain.py" in names


def test_the_sdist_holds_what_a_rebuild_needs(dists: Dists) -> None:
    # `python -m build` made the wheel from this sdist; the listing says why that worked.
    with tarfile.open(dists.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    needed = {"pyproject.toml", "setup.py", "README.md", "LICENSE", "deploy/kafka/pom.xml"}
    assert needed | {"streams/cli.py"} <= names


def test_the_default_wheel_is_pure_python(dists: Dists) -> None:
    # The compiled engine is opt-in (setup.py: LOOPGUARD_COMPILE=1), so one wheel serves every
    # platform.
    assert dists.wheel.name.endswith("-py3-none-any.whl")


def test_the_metadata_a_package_index_shows(dists: Dists) -> None:
    meta = _metadata(dists.wheel)
    assert (meta["Name"], meta["Version"]) == ("loopguard-fleet", _version())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["License"] is None  # the deprecated free-text field is gone
    assert any(
        c.startswith("Programming Language :: Python :: 3.11") for c in meta.get_all("Classifier")
    )
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Changelog"}
    assert meta["Description-Content-Type"] == "text/markdown"
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert twine.returncode == 0, twine.stdout + twine.stderr


def test_both_loopguards_import_side_by_side(installed: Installed, tmp_path: Path) -> None:
    probe = (
        "import json, loopguard, loopguard_fleet.detectors, loopguard_fleet.streams.cli\n"
        "print(json.dumps([loopguard.__file__, loopguard_fleet.detectors.__file__]))"
    )
    out = subprocess.run(
        [str(installed.bin / "python"), "-c", probe],
        cwd=tmp_path, env=installed.env(), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    theirs, ours = (Path(p) for p in __import__("json").loads(out))
    assert theirs.parts[-2:] == ("loopguard", "__init__.py")
    assert installed.root in theirs.parents and installed.root in ours.parents
    assert ours.parts[-3:] == ("loopguard_fleet", "detectors", "__init__.py")


def test_the_command_prints_its_version(installed: Installed, tmp_path: Path) -> None:
    out = subprocess.run(
        [str(installed.bin / "loopguard"), "--version"],
        cwd=tmp_path, env=installed.env(), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == f"loopguard {_version()} (python engine)"  # the default wheel


def _both(installed: Installed, tmp_path: Path, *argv: str) -> tuple[str, str]:
    """stdout of the installed command and of the checkout's, run on the same files."""
    got = subprocess.run(
        [str(installed.bin / "loopguard"), *argv],
        cwd=tmp_path, env=installed.env(), capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    want = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", *argv],
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return got, want


def test_replay_and_policy_check_run_outside_the_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    shutil.copy(TRACE, tmp_path / "trace.jsonl")
    shutil.copy(POLICY, tmp_path / "policy.json5")
    got, want = _both(installed, tmp_path, "replay", "trace.jsonl", "--policy", "policy.json5")
    assert '"command":"abort_run"' in got
    assert got == want
    got, want = _both(installed, tmp_path, "policy", "check", "policy.json5")
    assert "criticalThreshold" in got
    assert got == want
