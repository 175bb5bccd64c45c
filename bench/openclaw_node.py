"""The Node.js that runs OpenClaw's module in the benches: one OpenClaw itself supports.

OpenClaw's package declares the Node versions it runs on (`engines.node` in its package.json,
">=24.16.0 <25 || >=26.1.0" for 2026.9.6); a gateway runs on one of them, so the same-run
baseline does too: Debian's Node 20 runs the module slower than Node 24 (docs/performance.md),
which would flatter LoopGuard's ratios.

Candidates, first that satisfies the range: `LOOPGUARD_OPENCLAW_NODE`, the plugin's pinned Node
(`integrations/openclaw`, after `npm ci` there: `make bench-deps`), `node` on PATH. The range
is checked with the `semver` package OpenClaw installs beside itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULES = REPO / "tests" / "differential" / "node_modules"
PLUGIN_NODE = REPO / "integrations" / "openclaw" / "node_modules" / ".bin" / "node"
ENV = "LOOPGUARD_OPENCLAW_NODE"

# semver's own test, run by the candidate: argv 1 the package, 2 a version, 3 the range.
_CHECK = (
    "const [semver, version, range] = process.argv.slice(1);"
    "process.stdout.write(String(require(semver).satisfies(version, range)))"
)


def engines_range() -> str:
    """The Node versions the installed OpenClaw package declares."""
    manifest = json.loads((MODULES / "openclaw" / "package.json").read_text())
    return str(manifest["engines"]["node"])


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


@cache
def openclaw_node(given: str | None = None) -> tuple[str, str]:
    """(path, version) of the first candidate Node that OpenClaw supports; raises if none.
    `given`: the one candidate to try (a caller's own setting), before LOOPGUARD_OPENCLAW_NODE."""
    wanted = engines_range()
    env = given or os.environ.get(ENV)
    candidates = [env] if env else [str(PLUGIN_NODE), shutil.which("node")]
    for node in candidates:
        if not node or not Path(node).exists():
            continue
        version = _run(node, "--version").strip()
        if _run(node, "-e", _CHECK, str(MODULES / "semver"), version, wanted) == "true":
            return node, version
    tried = ", ".join(c or "-" for c in candidates)
    raise RuntimeError(
        f"OpenClaw runs on Node {wanted}; no candidate does ({tried}). "
        f"`make bench-deps` installs the plugin's pinned Node, or set {ENV}."
    )
