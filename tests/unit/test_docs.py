"""The docs say what the tree holds: links resolve, paths and commands exist, and
docs/configuration.md lists every `Settings` field with its default."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *DOCS]
# Pages that describe the tree as it is (the CHANGELOG also names what was removed).
REFERENCE = [REPO / "README.md", *DOCS]
CONFIGURATION = REPO / "docs" / "configuration.md"
# Paths inside the npm package `openclaw` that docs/semantics.md quotes, not in this tree
# (and whatever `npm ci` installs under node_modules/).
ELSEWHERE = {"docs/tools/loop-detection.md"}

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH = re.compile(
    r"(?<![\w./-])((?:docs|tests|streams|detectors|config|bench|deploy|integrations|examples)"
    r"/[\w./-]*\w)"
)
_MAKE = re.compile(r"`make ([a-z][\w-]*)")
_LOOPGUARD = re.compile(r"`loopguard ([a-z][\w-]*)(?: ([a-z][\w-]*))?")
_ROW = re.compile(r"^\| `(LOOPGUARD_[A-Z0-9_]+)` \| ([^|]+?) \|", re.MULTILINE)


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", REFERENCE, ids=_rel)
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = sorted(
        {
            p
            for p in _PATH.findall(text)
            if not (REPO / p).exists() and p not in ELSEWHERE and "/node_modules/" not in p
        }
    )
    assert missing == []


def _make_targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_make_target_and_loopguard_command_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    targets = _make_targets()
    assert sorted(set(_MAKE.findall(text)) - targets) == []
    commands = _subcommands(build_parser())
    unknown = []
    for command, sub in _LOOPGUARD.findall(text):
        if command not in commands:
            unknown.append(command)
        elif sub and _subcommands(commands[command]) and sub not in _subcommands(commands[command]):
            unknown.append(f"{command} {sub}")
    assert unknown == []


def _shown(default: object) -> str:
    """A default as docs/configuration.md shows it: as written in the environment."""
    if default is None:
        return "(none)"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    if isinstance(default, tuple):
        return f"`{','.join(default)}`"
    return f"`{default}`"


def test_the_configuration_page_lists_every_setting_with_its_default() -> None:
    rows = dict(_ROW.findall(CONFIGURATION.read_text(encoding="utf-8")))
    fields = {f"LOOPGUARD_{name.upper()}": f for name, f in Settings.model_fields.items()}
    assert sorted(set(fields) - set(rows)) == [], "settings missing from docs/configuration.md"
    assert sorted(set(rows) - set(fields)) == [], "rows that name no Settings field"
    wrong = {
        name: (rows[name], _shown(field.default))
        for name, field in fields.items()
        if rows[name].strip() != _shown(field.default)
    }
    assert wrong == {}


def test_no_reference_page_tells_the_history_of_work_sessions() -> None:
    told = [
        f"{_rel(page)}: {line.strip()}"
        for page in PAGES
        for line in page.read_text(encoding="utf-8").splitlines()
        if re.search(r"session [0-9]+", line, re.IGNORECASE)
    ]
    assert told == []


def test_the_first_screens_stay_short() -> None:
    """The README is a first screen, and the performance page's table of current figures
    fits one (its full history belongs to the CHANGELOG)."""
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) < 150
    performance = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    assert len(performance.splitlines()) < 400
    current = performance.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in current.splitlines() if line.startswith("| ")]
    assert 2 < len(rows) <= 20
    # A row gives the latest figures and the day's range, not every run's: a cell that grew
    # into a diary of runs once took 2,300 characters.
    assert [row[:40] for row in rows if len(row) > 1_000] == []


_SECTION_REF = re.compile(r'(docs/[\w-]+\.md),? \(?"([^"\n]+)"')


def _headings(page: Path) -> set[str]:
    return {
        line.lstrip("#").strip()
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=_rel)
def test_every_section_a_page_points_to_exists(page: Path) -> None:
    """`docs/x.md, "Heading"` names a heading of that page (a prefix of it is enough)."""
    missing = []
    for doc, heading in _SECTION_REF.findall(page.read_text(encoding="utf-8")):
        target = REPO / doc
        if not any(h.startswith(heading) for h in _headings(target)):
            missing.append(f"{doc}: {heading}")
    assert missing == []
