"""The secured deployment is the tested one: the ACLs in deploy/README.md and the Strimzi
KafkaUsers are exactly `loopguard_acls()` (what tests/integration/test_secure_kafka.py grants),
and the secured kustomization gives the worker valid settings with its password from a Secret.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.embedded.kafka_security import RUNTIME, WORKER, Acl, loopguard_acls
from tests.contract.deploy_env import k8s_environment, worker_container
from tests.contract.deploy_files import DEPLOY, README, find_manifest, yaml_documents

SECURED = DEPLOY / "k8s" / "secured"
STRIMZI_USERS = SECURED / "strimzi-kafkausers.yaml"

Rule = tuple[str, str, str, str]  # principal, operation, resource type, resource name


def _tested_recipe() -> set[Rule]:
    """The default deployment's rules, as the integration tests grant them."""
    acls = loopguard_acls(
        tool_calls="loopguard.tool-calls",
        compactions="loopguard.compactions",
        control="loopguard.control",
        dead_letter="loopguard.dead-letter",
        app_id="loopguard",
        changelog="loopguard-loopguard-runs-changelog",
    )
    assert all(a.pattern == "literal" for a in acls)
    return {_rule(a) for a in acls}


def _rule(acl: Acl) -> Rule:
    return (acl.principal, acl.operation, acl.resource, acl.name)


def _readme_rules() -> set[Rule]:
    """Every `kafka-acls.sh --add` line of deploy/README.md, expanded as the tool does."""
    rules: set[Rule] = set()
    lines = [ln for ln in README.read_text().splitlines() if ln.startswith("kafka-acls.sh ")]
    assert lines, "deploy/README.md shows no kafka-acls.sh commands"
    for line in lines:
        words = shlex.split(line.replace("$BOOTSTRAP", "BOOTSTRAP"))
        pairs = list(itertools.pairwise(words))
        (principal,) = [v.removeprefix("User:") for k, v in pairs if k == "--allow-principal"]
        operations = [v.lower() for k, v in pairs if k == "--operation"]
        resources = [(k.removeprefix("--"), v) for k, v in pairs if k in ("--topic", "--group")]
        assert "--add" in words and "--resource-pattern-type" not in words, line
        rules |= {(principal, op, kind, name) for op in operations for kind, name in resources}
    return rules


def _strimzi_rules() -> set[Rule]:
    rules: set[Rule] = set()
    for user in yaml_documents(STRIMZI_USERS):
        assert user["kind"] == "KafkaUser" and user["apiVersion"] == "kafka.strimzi.io/v1beta2"
        spec = user["spec"]
        assert spec["authentication"] == {"type": "scram-sha-512"}
        assert spec["authorization"]["type"] == "simple"
        for acl in spec["authorization"]["acls"]:
            resource = acl["resource"]
            assert resource["patternType"] == "literal" and acl.get("type", "allow") == "allow"
            rules |= {
                (user["metadata"]["name"], op.lower(), resource["type"], resource["name"])
                for op in acl["operations"]
            }
    return rules


def test_the_readme_acl_commands_are_the_tested_recipe() -> None:
    assert _readme_rules() == _tested_recipe()


def test_the_strimzi_kafka_users_are_the_tested_recipe() -> None:
    assert _strimzi_rules() == _tested_recipe()


def test_agent_runtimes_are_never_granted_a_write_to_the_control_topic() -> None:
    for rules in (_readme_rules(), _strimzi_rules(), _tested_recipe()):
        writes = {(p, name) for p, op, kind, name in rules if op == "write" and kind == "topic"}
        assert (RUNTIME, "loopguard.control") not in writes
        assert {p for p, name in writes if name == "loopguard.control"} == {WORKER}


def test_the_worker_may_write_every_partition_of_both_input_topics() -> None:
    # The policy topic's owner writes each version as a switch record to both input topics
    # (docs/policy.md): a compaction is decided by its own topic-partition's switch.
    for rules in (_readme_rules(), _strimzi_rules(), _tested_recipe()):
        for topic in ("loopguard.tool-calls", "loopguard.compactions"):
            assert (WORKER, "write", "topic", topic) in rules


@pytest.fixture
def secured(kustomize: Callable[[Path], tuple[dict[str, Any], ...]]) -> tuple[dict[str, Any], ...]:
    return kustomize(SECURED)


def test_the_secured_workers_take_the_password_from_a_secret_and_mount_the_ca(
    secured: tuple[dict[str, Any], ...],
) -> None:
    container = worker_container(secured)
    secret_env = [e for e in container["env"] if "valueFrom" in e]
    assert secret_env == [
        {
            "name": "LOOPGUARD_SASL_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "loopguard-worker", "key": "password"}},
        }
    ]
    env = k8s_environment_without_secrets(secured)
    assert not any("PASSWORD" in name for name in env), "a password in the ConfigMap"
    ca_file = env["LOOPGUARD_SSL_CA_FILE"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    pod = find_manifest(secured, "StatefulSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = str(Path(ca_file).parent)
    assert volumes[mounts[mount]]["secret"]["secretName"] == "loopguard-kafka-ca"
    assert volumes[mounts[mount]]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


def k8s_environment_without_secrets(manifests: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """The container's environment with its Secret-backed entries left out."""
    plain = [dict(doc) for doc in manifests]
    for doc in plain:
        if doc["kind"] == "StatefulSet":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            container["env"] = [e for e in container["env"] if "valueFrom" not in e]
    return k8s_environment(tuple(plain))


def test_the_secured_settings_parse_with_the_secret_in_place(
    secured: tuple[dict[str, Any], ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = k8s_environment_without_secrets(secured)
    for name in list(os.environ):
        if name.startswith("LOOPGUARD_"):
            monkeypatch.delenv(name)
    ca = tmp_path / "ca.crt"
    ca.write_text("not read by Settings, only its existence is checked\n")
    env |= {"LOOPGUARD_SASL_PASSWORD": "from-the-secret", "LOOPGUARD_SSL_CA_FILE": str(ca)}
    env["LOOPGUARD_POLICY_FILE"] = str(DEPLOY / "k8s" / "base" / "policy" / "openclaw.json5")
    env["LOOPGUARD_DATA_DIR"] = str(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert (settings.security_protocol, settings.sasl_mechanism, settings.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "loopguard-worker",
    )
    assert settings.ssl_check_hostname is True
    assert re.fullmatch(r"kafka://[a-z.-]+:9093", settings.broker)
