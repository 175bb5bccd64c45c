"""Import layers (docs/architecture.md): streams → config → detectors, and Faust's private
names only in streams/faust_internals.py."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FAUST_SEAMS = ROOT / "streams" / "faust_internals.py"
# What each layer may import of the others and of the stream stack.
FORBIDDEN = {
    "detectors": ("config", "streams", "faust", "mode", "aiokafka"),
    "config": ("streams", "faust", "mode", "aiokafka"),
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """(module, imported names) of every import statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [alias.name for alias in node.names]


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
    return found


def test_only_the_faust_seams_module_touches_private_faust_names() -> None:
    bad = {
        str(path.relative_to(ROOT)): uses
        for path in modules("streams")
        if path != FAUST_SEAMS and (uses := private_faust_uses(path))
    }
    assert bad == {}


def test_the_check_sees_a_private_faust_name() -> None:
    assert private_faust_uses(FAUST_SEAMS)  # the seams module does use them
