"""The LOOPGUARD_* environment that compose and the k8s overlays give a worker is valid:
every name is a Settings field, every value parses into Settings, and the policy file the
worker finds is OpenClaw-shaped and loads."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import json5
import pytest

from tests.contract.deploy_env import PREFIX, env_for, env_source_names, policy_text
from tests.contract.deploy_files import K8S_OVERLAYS, POLICY_FILE, README

SOURCES = env_source_names()


@pytest.fixture(params=SOURCES)
def source(
    request: pytest.FixtureRequest, kustomize: Callable[[Path], tuple[dict[str, Any], ...]]
) -> str:
    """A deploy source (compose:<service>, k8s:<overlay>); overlays are rendered first, so a
    missing kustomize fails here with its install hint."""
    name: str = request.param
    kind, _, overlay = name.partition(":")
    if kind == "k8s":
        kustomize(K8S_OVERLAYS / overlay)
    return name


@pytest.fixture
def environment(source: str) -> dict[str, str]:
    return env_for(source)


def only_env(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> None:
    """Make `environment` the only LOOPGUARD_* variables of this process."""
    for name in list(os.environ):
        if name.startswith(PREFIX):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)


def test_both_compose_workers_and_every_overlay_are_sources() -> None:
    assert SOURCES == ["compose:worker-1", "compose:worker-2", "k8s:dev", "k8s:prod"]


def test_every_worker_gets_the_settings_that_tie_it_to_its_deployment(
    environment: dict[str, str],
) -> None:
    required = {
        "LOOPGUARD_BROKER",
        "LOOPGUARD_PARTITIONS",
        "LOOPGUARD_STORE",
        "LOOPGUARD_DATA_DIR",
        "LOOPGUARD_WEB_HOST",
        "LOOPGUARD_WEB_PORT",
        "LOOPGUARD_POLICY_FILE",
    }
    assert required <= set(environment)
    # Prometheus scrapes from outside the container: the default 127.0.0.1 would hide it.
    assert environment["LOOPGUARD_WEB_HOST"] == "0.0.0.0"
    assert environment["LOOPGUARD_STORE"] == "rocksdb://"


def test_every_loopguard_variable_is_listed_in_the_deploy_readme(
    environment: dict[str, str],
) -> None:
    listed = set(re.findall(r"`(LOOPGUARD_[A-Z_]+)`", README.read_text(encoding="utf-8")))
    assert set(environment) <= listed


def test_every_loopguard_variable_in_compose_and_k8s_files_parses_into_settings(
    source: str, environment: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from loopguard_fleet.config.settings import Settings

    fields = {f"{PREFIX}{name}".upper() for name in Settings.model_fields}
    unknown = set(environment) - fields
    assert not unknown, f"not Settings fields (ignored by the worker): {sorted(unknown)}"

    # The policy path is a container path; give Settings the file the container would see.
    policy = tmp_path / Path(environment["LOOPGUARD_POLICY_FILE"]).name
    policy.write_text(policy_text(source), encoding="utf-8")
    only_env(monkeypatch, {**environment, "LOOPGUARD_POLICY_FILE": str(policy)})

    settings = Settings()

    assert settings.partitions == int(environment["LOOPGUARD_PARTITIONS"])
    assert settings.web_port == int(environment["LOOPGUARD_WEB_PORT"])
    assert str(settings.data_dir) == environment["LOOPGUARD_DATA_DIR"]
    assert settings.broker == environment["LOOPGUARD_BROKER"]


def test_the_policy_each_worker_finds_is_the_shipped_openclaw_file(source: str) -> None:
    assert policy_text(source) == POLICY_FILE.read_text(encoding="utf-8")


def test_the_policy_file_is_openclaw_shaped() -> None:
    policy = json5.loads(POLICY_FILE.read_text(encoding="utf-8"))
    block = policy["tools"]["loopDetection"]
    assert block["enabled"] is True
    assert block["warningThreshold"] < block["criticalThreshold"]
    assert block["criticalThreshold"] < block["globalCircuitBreakerThreshold"]
    for agent in policy["agents"]["list"]:
        assert isinstance(agent["id"], str)
        assert isinstance(agent["tools"]["loopDetection"], dict)


def test_the_policy_file_loads_with_the_policy_loader() -> None:
    from loopguard_fleet.config import load_policy

    policy = load_policy(POLICY_FILE)
    assert policy.for_agent("main") != policy.for_agent(None)
