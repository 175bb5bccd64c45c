"""The Kafka launcher without a broker: the pinned version, its config, and missing tools."""

from __future__ import annotations

import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import loopguard_fleet.streams.embedded.kafka as kafka_module
from loopguard_fleet.streams.embedded import (
    KAFKA_VERSION,
    KafkaBroker,
    KafkaSetupError,
    install_jars,
)
from loopguard_fleet.streams.embedded.kafka import POM, _server_properties, find_java

_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
REPO = Path(__file__).parents[2]


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_the_launcher_runs_the_kafka_version_the_maven_project_pins() -> None:
    root = ET.parse(POM).getroot()
    deps = root.findall("m:dependencies/m:dependency", _NS)
    kafka = [d for d in deps if d.findtext("m:artifactId", namespaces=_NS) == "kafka_2.13"]
    assert [d.findtext("m:version", namespaces=_NS) for d in kafka] == ["${kafka.version}"]
    assert root.findtext("m:properties/m:kafka.version", namespaces=_NS) == KAFKA_VERSION
    assert KAFKA_VERSION.startswith("4.")  # KRaft only, no ZooKeeper


def test_the_broker_config_listens_on_loopback_and_never_auto_creates_topics(
    tmp_path: Path,
) -> None:
    props = _properties(_server_properties(19092, 19093, tmp_path))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["process.roles"] == "broker,controller"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path / "log")
    # A restart after SIGKILL waits for the old registration to expire: keep that short.
    assert int(props["broker.session.timeout.ms"]) <= 5000


def test_without_java_the_error_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KafkaSetupError, match=r"needs Java 17 or later: install it"):
        find_java()


def test_without_the_jars_start_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(KafkaSetupError, match=r"jars are not in .*: run `make kafka`"):
        KafkaBroker(home=tmp_path / "none").start()


def test_without_maven_installing_the_jars_names_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KafkaSetupError, match=r"Maven is missing: install Maven"):
        install_jars(tmp_path / "home")
    assert not (tmp_path / "home").exists()


def test_the_install_command_fails_in_one_line_without_java(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.embedded", "kafka"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "needs Java 17 or later" in done.stderr


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # kafka-storage reads "-t -x…" as a missing argument: a 1-in-64 format failure in CI.
    ids = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x10" * 16)])
    monkeypatch.setattr(kafka_module.uuid, "uuid4", lambda: next(ids))
    assert kafka_module._cluster_id() == "EBAQEBAQEBAQEBAQEBAQEA"
