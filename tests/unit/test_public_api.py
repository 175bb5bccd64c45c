"""The public surface: the documented names exactly; imports flow streams → config → detectors."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from loopguard_fleet import config, detectors

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
    # semantics profiles (docs/semantics.md)
    "Semantics",
    "SEMANTICS",
    "CONFIGURABLE",
    "OPENCLAW_2026_9",
    "parse_semantics",
    "OutcomeFacts",
    "outcome_facts",
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


def _top_name(module: str) -> str:
    """The package an absolute import names: `loopguard_fleet.x.y` → `x`, `faust.app` → `faust`."""
    parts = module.split(".")
    return parts[1] if parts[0] == "loopguard_fleet" and len(parts) > 1 else parts[0]


def _imports(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {_top_name(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(_top_name(node.module))
                if node.module == "loopguard_fleet":
                    found |= {a.name for a in node.names}
    return found


def test_the_import_scan_sees_the_loopguard_names() -> None:
    # The flow test below is only as good as this scan: streams imports both other packages.
    assert {"config", "detectors", "faust"} <= _imports("streams")
    assert "loopguard_fleet" not in _imports("streams") | _imports("config") | _imports("detectors")


def test_no_module_imports_the_short_names() -> None:
    # `detectors`, `config`, `streams` are folders, not installed names (pyproject: package-dir).
    roots = ("detectors", "config", "streams", "tests", "bench", "integrations")
    for root in roots:
        for path in (ROOT / root).rglob("*.py"):
            if "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    else []
                )
                bad = [n for n in names if n.split(".")[0] in {"detectors", "config", "streams"}]
                assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


INSTALLED = """
import importlib.util, json
import loopguard_fleet.detectors, loopguard_fleet.config, loopguard_fleet.streams
import loopguard_fleet.streams.cli
print(json.dumps({
    "short": [n for n in ("detectors", "config", "streams") if importlib.util.find_spec(n)],
    "main": loopguard_fleet.streams.cli.main.__module__,
}))
"""


def test_import_loopguard_never_finds_anything_of_ours(tmp_path: Path) -> None:
    # PyPI's `loopguard` is another project: no module, folder or package of ours may claim the
    # name, or installing both would shadow one of them (tests/packaging: both import).
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p.split(".")[0] == "loopguard_fleet" for p in setuptools["packages"])
    assert not (ROOT / "loopguard").exists()
    probe = "import importlib.util as u; s = u.find_spec('loopguard'); print(s and s.origin)"
    origin = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert origin == "None" or not Path(origin).resolve().is_relative_to(ROOT), origin


def test_only_the_loopguard_names_are_installed(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", INSTALLED], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == '{"short": [], "main": "loopguard_fleet.streams.cli"}'


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


def test_a_tool_call_is_built_from_its_raw_parts_or_from_hashes() -> None:
    from loopguard_fleet.detectors import ToolCall, args_hash

    call = ToolCall(" Bash ", {"command": "ls", "action": "poll"}, "c1")
    assert (call.tool, call.args_hash, call.tool_call_id, call.action) == (
        "exec",
        args_hash("exec", {"command": "ls", "action": "poll"}),
        "c1",
        "poll",
    )
    assert ToolCall.of("bash", {"command": "ls", "action": "poll"}, "c1") == call
    private = ToolCall("process", args_hash="process:abc", action="poll")
    assert (private.args_hash, private.action, private.tool_call_id) == (
        "process:abc",
        "poll",
        None,
    )


OUTSIDE = """
from loopguard_fleet.detectors import (Thresholds, RunState, ToolCall, Outcome, detect, record_call,
                                 record_outcome, arm_guard, observe_guard)
from loopguard_fleet.config import load_policy
th = load_policy({"tools": {"loopDetection": {"enabled": True}}}).for_agent("main")
state, verdicts = RunState(), []
for i in range(21):
    call = ToolCall("read", {"path": "/a"}, f"c{i}")
    v = detect(state, call, th)
    verdicts.append(None if v is None else (v.level, v.detector, v.count))
    if v is None or v.level != "critical":
        record_call(state, call, th)
        record_outcome(state, call, Outcome.error("File not found"), th)
arm_guard(state, th)
aborts = []
for i in range(3):
    rec = record_outcome(state, ToolCall("exec", {"c": 1}), Outcome.error(OSError("boom")), th)
    aborts.append(observe_guard(state, rec, th))
assert RunState.from_json(state.to_json()) == state
print(verdicts[10], verdicts[20], aborts[2].detector, aborts[2].count)
"""


def test_the_public_api_works_from_outside_the_repo(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", OUTSIDE], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.split("\n")[0] == (
        "('warning', 'generic_repeat', 10) ('critical', 'generic_repeat', 20) "
        "compaction_loop_persisted 3"
    )
