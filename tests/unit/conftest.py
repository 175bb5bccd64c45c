"""Fixtures the unit tests share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def policy(tmp_path: Path) -> str:
    """A policy file with detection on (OpenClaw's defaults otherwise), as `--policy` takes it."""
    path = tmp_path / "on.json5"
    path.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    return str(path)
