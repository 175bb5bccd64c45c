"""The benches run OpenClaw's module on a Node that OpenClaw's package supports (its engines
range), never on an older one that happens to be on PATH (bench/openclaw_node.py)."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "openclaw_node.py"


def _load() -> ModuleType:
    """A private copy of the module: its cached choice (a stub here) stays out of the one the
    runner's tests read (conftest.py)."""
    spec = importlib.util.spec_from_file_location("bench_openclaw_node", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pick(
    _installed: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], tuple[str, str]]:
    """`openclaw_node()` with a Node that reports `version` as its own (a real Node otherwise:
    semver runs in it). `_installed` installs the pinned module, whose range and semver it
    reads; not `openclaw`, which itself needs a Node this choice accepts."""
    real = shutil.which("node")
    assert real
    stub = tmp_path / "node"
    stub.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "$FAKE_NODE_VERSION"; exit 0; fi\n'
        f'exec "{real}" "$@"\n'
    )
    stub.chmod(0o755)
    module = _load()
    monkeypatch.setenv(module.ENV, str(stub))

    def choose(version: str) -> tuple[str, str]:
        monkeypatch.setenv("FAKE_NODE_VERSION", version)
        module.openclaw_node.cache_clear()
        return module.openclaw_node()  # type: ignore[no-any-return]

    return choose


@pytest.mark.parametrize("version", ["v24.16.0", "v24.21.0", "v26.1.0"])
def test_a_node_in_openclaws_range_runs_the_module(
    pick: Callable[[str], tuple[str, str]], version: str
) -> None:
    assert pick(version)[1] == version


@pytest.mark.parametrize("version", ["v20.20.2", "v22.12.0", "v24.15.9", "v25.0.0"])
def test_a_node_outside_openclaws_range_is_refused(
    pick: Callable[[str], tuple[str, str]], version: str
) -> None:
    with pytest.raises(RuntimeError, match=r"OpenClaw runs on Node >=24\.16\.0"):
        pick(version)
