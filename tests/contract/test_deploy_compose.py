"""The compose stack, checked statically (no Docker engine runs here): Kafka in KRaft mode,
topic creation, two workers built from deploy/Dockerfile, Prometheus and Grafana wired to
the files under deploy/."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from tests.contract.deploy_env import env_for, worker_services
from tests.contract.deploy_files import (
    COMPOSE_FILE,
    DEPLOY,
    DOCKERFILE,
    GRAFANA_PROVISIONING,
    PROMETHEUS_CONFIG,
    REPO,
    compose,
    yaml_file,
)

COMPOSE_DIR = COMPOSE_FILE.parent
TOPIC_VARIABLES = (
    "LOOPGUARD_TOPIC_TOOL_CALLS",
    "LOOPGUARD_TOPIC_COMPACTIONS",
    "LOOPGUARD_TOPIC_CONTROL",
    "LOOPGUARD_TOPIC_DEAD_LETTER",
)


def services() -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose()["services"]
    return result


def bind_mounts(service: dict[str, Any]) -> dict[PurePosixPath, Path]:
    """Container path -> host path of a service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[PurePosixPath(target)] = (COMPOSE_DIR / source).resolve()
    return mounts


def test_the_stack_has_kafka_topic_init_two_workers_prometheus_and_grafana() -> None:
    assert set(services()) == {
        "kafka",
        "kafka-init",
        "worker-1",
        "worker-2",
        "prometheus",
        "grafana",
    }
    assert sorted(worker_services()) == ["worker-1", "worker-2"]


def test_kafka_is_a_single_kraft_node_from_the_apache_image() -> None:
    kafka = services()["kafka"]
    environment = kafka["environment"]
    assert kafka["image"].startswith("apache/kafka:")
    assert set(environment["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert (
        environment["KAFKA_CONTROLLER_QUORUM_VOTERS"]
        == f"{environment['KAFKA_NODE_ID']}@kafka:9093"
    )
    assert not any("ZOOKEEPER" in name for name in environment)
    assert "healthcheck" in kafka


def test_the_topic_init_step_creates_every_topic_with_the_workers_partitions() -> None:
    init = services()["kafka-init"]
    script = "\n".join(init["command"])
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "--create --if-not-exists" in script
    for variable in (*TOPIC_VARIABLES, "LOOPGUARD_PARTITIONS"):
        # $$ is compose's escape: the shell inside the container expands the variable.
        assert f'"$${variable}"' in script, variable
    assert {name: init["environment"][name] for name in TOPIC_VARIABLES} == {
        name: env_for("compose:worker-1")[name] for name in TOPIC_VARIABLES
    }


@pytest.mark.parametrize("name", sorted(worker_services()))
def test_every_worker_is_built_from_the_dockerfile_and_runs_loopguard_worker(name: str) -> None:
    worker = services()[name]
    assert (COMPOSE_DIR / worker["build"]["context"]).resolve() == REPO
    assert (REPO / worker["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert worker["command"] == ["loopguard", "worker"]
    assert worker["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", sorted(worker_services()))
def test_every_worker_serves_metrics_and_health_on_its_web_port(name: str) -> None:
    worker = services()[name]
    port = env_for(f"compose:{name}")["LOOPGUARD_WEB_PORT"]
    assert [mapping.rsplit(":", 1)[1] for mapping in worker["ports"]] == [port]
    assert f"http://127.0.0.1:{port}/healthz" in " ".join(worker["healthcheck"]["test"])


@pytest.mark.parametrize("name", sorted(worker_services()))
def test_every_worker_finds_its_policy_file_mounted(name: str) -> None:
    policy = PurePosixPath(env_for(f"compose:{name}")["LOOPGUARD_POLICY_FILE"])
    assert bind_mounts(services()[name])[policy].is_file()


def test_there_are_no_more_workers_than_partitions() -> None:
    partitions = {
        int(env_for(f"compose:{name}")["LOOPGUARD_PARTITIONS"]) for name in worker_services()
    }
    (count,) = partitions
    assert len(worker_services()) <= count


def test_host_ports_are_bound_to_loopback_only() -> None:
    for name, service in services().items():
        for mapping in service.get("ports", []):
            assert mapping.startswith("127.0.0.1:"), (
                f"{name} publishes {mapping} on every interface"
            )


def test_every_bind_mount_source_exists() -> None:
    for name, service in services().items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"


def test_prometheus_scrapes_every_worker_and_loads_the_rules() -> None:
    prometheus = services()["prometheus"]
    mounts = bind_mounts(prometheus)
    config_path = next(
        target for target in mounts if f"--config.file={target}" in prometheus["command"]
    )
    assert mounts[config_path] == PROMETHEUS_CONFIG
    assert mounts[config_path.parent / "rules"] == DEPLOY / "prometheus" / "rules"

    config = yaml_file(PROMETHEUS_CONFIG)
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "loopguard"]
    targets = {target for group in job["static_configs"] for target in group["targets"]}
    assert targets == {
        f"{name}:{env_for(f'compose:{name}')['LOOPGUARD_WEB_PORT']}" for name in worker_services()
    }
    assert config["rule_files"] == ["rules/*.yml"]


def test_grafana_gets_the_provisioning_and_the_dashboards() -> None:
    mounts = bind_mounts(services()["grafana"])
    assert mounts[PurePosixPath("/etc/grafana/provisioning")] == GRAFANA_PROVISIONING
    assert mounts[PurePosixPath("/var/lib/grafana/dashboards/loopguard")] == (
        DEPLOY / "grafana" / "dashboards"
    )
