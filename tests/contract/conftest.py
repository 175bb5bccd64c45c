"""Fixtures for the deploy/ contract tests: the external tools they run for real.

A missing tool is a failure, not a skip: these checks are the only proof that the rules,
alerts and manifests work, and CI installs the tools (.ci/run).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.contract.deploy_files import kustomize_build
from tests.contract.prom_server import INSTALL_HINT


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(f"promtool is not on PATH: {INSTALL_HINT}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def kustomize() -> Callable[[Path], tuple[dict[str, Any], ...]]:
    """`kustomize(directory)` renders a kustomization (kubectl's built-in kustomize)."""

    def build(directory: Path) -> tuple[dict[str, Any], ...]:
        try:
            return kustomize_build(directory)
        except LookupError:
            pytest.fail(
                "neither kubectl nor kustomize is on PATH: the python machine image ships "
                "kubectl (kustomize built in); otherwise install kustomize",
                pytrace=False,
            )

    return build
