"""The published OpenClaw detector under Node: installed from package-lock.json, run per batch.

The session fixture runs `npm ci --ignore-scripts` here when node_modules does not hold the
locked `openclaw` version (CI runs the same command first; see docs/semantics.md). A missing
`node`/`npm` fails the tests rather than skipping them.

Both drivers run on a Node OpenClaw supports (its runner, `dist/agent-core-*.mjs`, needs one):
`LOOPGUARD_RUNNER_NODE`, else the Node the benches pick (bench/openclaw_node.py: the plugin's
pinned one after `npm ci` there, else `node` on PATH), either in the range OpenClaw's package
declares; without one the tests fail, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.openclaw_node import openclaw_node

HERE = Path(__file__).parent
DRIVER = HERE / "driver.mjs"


def _locked_version() -> str:
    lock = json.loads((HERE / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/openclaw"]["version"])


def _installed_version() -> str | None:
    manifest = HERE / "node_modules" / "openclaw" / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text())["version"])


def _openclaw_node() -> str:
    """A Node OpenClaw supports: `LOOPGUARD_RUNNER_NODE`, else the benches' choice
    (bench/openclaw_node.py: one in the range OpenClaw's package declares)."""
    try:
        return str(openclaw_node(os.environ.get("LOOPGUARD_RUNNER_NODE"))[0])
    except RuntimeError as exc:
        raise AssertionError(f"OpenClaw's Node: {exc}") from None


@pytest.fixture(scope="session")
def _installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The locked package installed here; the drivers' environment."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "the differential tests need node and npm on PATH"
    if _installed_version() != _locked_version():
        subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=HERE,
            check=True,
            capture_output=True,
            timeout=600,
        )
    home = tmp_path_factory.mktemp("openclaw-home")
    return {**os.environ, "LOOPGUARD_DIFFERENTIAL_HOME": str(home), "OPENCLAW_LOG_LEVEL": "silent"}


def _asker(node: str, env: dict[str, str]) -> Callable[[dict[str, Any]], Any]:
    def ask(request: dict[str, Any]) -> Any:
        done = subprocess.run(
            [node, str(DRIVER)],
            input=json.dumps(request).encode(),
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        return json.loads(done.stdout)

    return ask


@pytest.fixture(scope="session")
def openclaw(_installed: dict[str, str]) -> Callable[[dict[str, Any]], Any]:
    """Send one request to the driver (a fresh Node process) and return its decoded answer;
    `"mode": "runner"` asks OpenClaw's runner."""
    return _asker(_openclaw_node(), _installed)
