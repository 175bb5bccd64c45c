"""Where the deploy/ files are, and loaders for them, shared by the contract tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
RULE_TESTS_DIR = PROMETHEUS_DIR / "tests"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARDS_DIR = DEPLOY / "grafana" / "dashboards"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
RUNBOOKS_DIR = DEPLOY / "runbooks"
COMPOSE_FILE = DEPLOY / "compose" / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S_BASE = DEPLOY / "k8s" / "base"
K8S_OVERLAYS = DEPLOY / "k8s" / "overlays"
POLICY_FILE = K8S_BASE / "policy" / "openclaw.json5"
README = DEPLOY / "README.md"


def yaml_documents(path: Path) -> list[Any]:
    """Every document of a (possibly multi-document) YAML file; empty documents dropped."""
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def yaml_file(path: Path) -> Any:
    """The single document of a YAML file."""
    (document,) = yaml_documents(path)
    return document


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def rule_test_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.yml"))


def rule_groups() -> list[dict[str, Any]]:
    """Every rule group of every rule file, in file-name order."""
    return [group for path in rule_files() for group in yaml_file(path)["groups"]]


def recording_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "record" in rule]


def alerting_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def dashboard(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def dashboard_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    panels: list[dict[str, Any]] = []
    for panel in board.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def runbook_files() -> list[Path]:
    return sorted(RUNBOOKS_DIR.glob("*.md"))


_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def fenced_blocks(markdown: str, language: str) -> list[str]:
    """The bodies of the ```<language> blocks of a Markdown text."""
    return [body.strip() for lang, body in _FENCE.findall(markdown) if lang == language]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml_file(COMPOSE_FILE)
    return loaded


def overlay_dirs() -> list[Path]:
    return sorted(path for path in K8S_OVERLAYS.iterdir() if (path / "kustomization.yaml").exists())


def kustomization_dirs() -> list[Path]:
    return [K8S_BASE, *overlay_dirs()]


def kustomize_command() -> list[str] | None:
    """`kubectl kustomize` (kustomize is built into kubectl) or a standalone `kustomize build`."""
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize"]
    if kustomize := shutil.which("kustomize"):
        return [kustomize, "build"]
    return None


@cache
def kustomize_build(directory: Path) -> tuple[dict[str, Any], ...]:
    """The manifests kustomize renders for a kustomization directory.

    Raises LookupError when neither kubectl nor kustomize is on PATH; the fixture in
    conftest.py turns that into a test failure with the install hint.
    """
    command = kustomize_command()
    if command is None:
        raise LookupError("neither kubectl nor kustomize is on PATH")
    rendered = subprocess.run(
        [*command, str(directory)], capture_output=True, text=True, check=False, timeout=60
    )
    if rendered.returncode != 0:
        raise AssertionError(f"kustomize failed for {directory}:\n{rendered.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(rendered.stdout) if doc is not None)


def find_manifest(manifests: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    """The one manifest of a kind (fails if there is not exactly one)."""
    matches = [doc for doc in manifests if doc["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]
