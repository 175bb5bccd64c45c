"""The public surface: the documented names exactly; imports flow streams → config → detectors."""

from __future__ import annotations

import ast
from pathlib import Path

import config
import detectors

ROOT = Path(__file__).parents[2]
DOCUMENTED = {
    "Thresholds",
    "RunState",
    "ToolCall",
    "Outcome",
    "Verdict",
    "GuardAbort",
    "Record",
    "Decision",
    "canonical_json",
    "args_hash",
    "result_hash",
    "detect",
    "record_call",
    "record_outcome",
    "arm_guard",
    "observe_guard",
    "process_event",
}


def test_the_engine_exports_every_documented_name() -> None:
    assert DOCUMENTED <= set(detectors.__all__)
    for name in detectors.__all__:
        assert hasattr(detectors, name), name


def test_no_public_name_leaks_beyond_all() -> None:
    public = {n for n in vars(detectors) if not n.startswith("_")}
    modules = {n for n, v in vars(detectors).items() if type(v).__name__ == "module"}
    assert public - modules == set(detectors.__all__)


def test_config_exports_the_policy_api() -> None:
    assert {"load_policy", "PolicyError", "Policy"} <= set(config.__all__)


def _imports(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found


def test_imports_flow_streams_to_config_to_detectors_never_back() -> None:
    assert not _imports("detectors") & {
        "config",
        "streams",
        "faust",
        "aiokafka",
        "pydantic_settings",
        "logging",
        "time",
        "datetime",
    }
    assert not _imports("config") & {"streams", "faust", "aiokafka"}
