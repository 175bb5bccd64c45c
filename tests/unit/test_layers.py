"""Import layers (docs/architecture.md): streams → config → detectors, and Faust's private
names only in the Faust subpackage, streams/worker/faust/."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FAUST_SUBPACKAGE = ROOT / "streams" / "worker" / "faust"
#: The one module outside the Faust subpackage that touches aiokafka's private names.
AIOKAFKA_INTERNALS = ROOT / "streams" / "kafka" / "connection.py"
# What each layer may import of the others and of the stream stack.
FORBIDDEN = {
    "detectors": ("config", "streams", "faust", "mode", "aiokafka"),
    "config": ("streams", "faust", "mode", "aiokafka"),
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """(module, imported names) of every import statement, ours without `loopguard_fleet.`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.removeprefix("loopguard_fleet."), []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            if node.module == "loopguard_fleet":  # `from loopguard_fleet import streams`
                yield from ((name, []) for name in names)
            else:
                yield node.module.removeprefix("loopguard_fleet."), names


def test_the_scan_names_our_packages_by_their_layer() -> None:
    # The layer test is only as strong as this: `loopguard_fleet.x.y` must count as layer `x`.
    found = {
        m.split(".")[0]
        for m, _ in imported(
            ast.parse(
                "import loopguard_fleet.streams.cli\n"
                "from loopguard_fleet.config import load_policy\n"
                "from loopguard_fleet import detectors\nimport faust"
            )
        )
    }
    assert found == {"streams", "config", "detectors", "faust"}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_layer_imports_nothing_above_it(package: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in modules(package)
        for module, _ in imported(ast.parse(path.read_text()))
        if module.split(".")[0] in FORBIDDEN[package]
    ]
    assert bad == []


def private_faust_uses(path: Path) -> list[str]:
    """Private names imported from Faust/mode, and `x._name` on anything but self/cls/super()."""
    tree = ast.parse(path.read_text())
    found = [
        f"import {module}.{name}"
        for module, names in imported(tree)
        if module.split(".")[0] in ("faust", "mode")
        for name in names
        if name.startswith("_")
    ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
            continue
        found.append(f"line {node.lineno}: .{node.attr}")
    for node in ast.walk(tree):
        # getattr / setattr / hasattr with a private name as a string is the same reach inside.
        name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
        if (
            isinstance(node, ast.Call)
            and name in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
        ):
            found.append(f"line {node.lineno}: {name}(…, {node.args[1].value!r})")
    return found


def test_only_the_faust_subpackage_touches_private_faust_names() -> None:
    bad = {
        str(path.relative_to(ROOT)): uses
        for path in modules("streams")
        if FAUST_SUBPACKAGE not in path.parents
        and path != AIOKAFKA_INTERNALS
        and (uses := private_faust_uses(path))
    }
    assert bad == {}


def test_the_check_sees_a_private_name_reached_through_getattr(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text('x = getattr(producer, "_sender", None)\nsetattr(c, "__dict__", 1)\n')
    assert private_faust_uses(path) == ["line 1: getattr(…, '_sender')"]


def test_the_check_sees_a_private_faust_name() -> None:
    inside = [p for p in FAUST_SUBPACKAGE.rglob("*.py") if private_faust_uses(p)]
    assert inside  # the subpackage does use them
