"""The Kubernetes manifests: kustomize renders the base and every overlay, and the rendered
workers are consistent with their settings, probes, volumes, Service and monitoring."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from tests.contract.deploy_env import k8s_environment, worker_container
from tests.contract.deploy_files import (
    K8S_BASE,
    find_manifest,
    kustomization_dirs,
    overlay_dirs,
    yaml_file,
)

Kustomize = Callable[[Path], tuple[dict[str, Any], ...]]
Manifests = tuple[dict[str, Any], ...]
EXPECTED_KINDS = {
    "ServiceAccount",
    "ConfigMap",
    "StatefulSet",
    "Service",
    "PodDisruptionBudget",
    "ServiceMonitor",
    "PrometheusRule",
}


def directory_ids(path: Path) -> str:
    return path.relative_to(K8S_BASE.parent).as_posix()


@pytest.fixture(params=overlay_dirs(), ids=directory_ids)
def overlay(request: pytest.FixtureRequest, kustomize: Kustomize) -> Manifests:
    """The rendered manifests of one overlay."""
    return kustomize(request.param)


def pod_spec(manifests: Manifests) -> dict[str, Any]:
    spec: dict[str, Any] = find_manifest(manifests, "StatefulSet")["spec"]["template"]["spec"]
    return spec


def pod_labels(manifests: Manifests) -> dict[str, str]:
    labels: dict[str, str] = find_manifest(manifests, "StatefulSet")["spec"]["template"][
        "metadata"
    ]["labels"]
    return labels


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_there_is_a_dev_and_a_prod_overlay() -> None:
    assert [path.name for path in overlay_dirs()] == ["dev", "prod"]


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=directory_ids)
def test_every_file_a_kustomization_lists_exists(directory: Path) -> None:
    kustomization = yaml_file(directory / "kustomization.yaml")
    listed = list(kustomization.get("resources", []))
    listed += [patch["path"] for patch in kustomization.get("patches", []) if "path" in patch]
    for generator in kustomization.get("configMapGenerator", []):
        listed += [entry.split("=", 1)[-1] for entry in generator.get("files", [])]
    for entry in listed:
        assert (directory / entry).exists(), f"{directory.name}/kustomization.yaml lists {entry}"


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=directory_ids)
def test_kustomize_renders_every_kind_once(directory: Path, kustomize: Kustomize) -> None:
    kinds = [doc["kind"] for doc in kustomize(directory)]
    assert EXPECTED_KINDS <= set(kinds)
    for kind in EXPECTED_KINDS - {"ConfigMap"}:
        assert kinds.count(kind) == 1, kind


def test_every_overlay_has_its_own_namespace(kustomize: Kustomize) -> None:
    namespaces = []
    for directory in overlay_dirs():
        manifests = kustomize(directory)
        namespace = find_manifest(manifests, "Namespace")["metadata"]["name"]
        assert all(
            doc["metadata"].get("namespace") == namespace
            for doc in manifests
            if doc["kind"] != "Namespace"
        )
        namespaces.append(namespace)
    assert len(set(namespaces)) == len(namespaces)


def test_replicas_do_not_exceed_partitions(overlay: Manifests) -> None:
    replicas = find_manifest(overlay, "StatefulSet")["spec"]["replicas"]
    partitions = int(k8s_environment(overlay)["LOOPGUARD_PARTITIONS"])
    assert 1 <= replicas <= partitions


def test_the_worker_runs_loopguard_worker_as_non_root(overlay: Manifests) -> None:
    spec = pod_spec(overlay)
    container = worker_container(overlay)
    assert container["command"] == ["loopguard", "worker"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_probes_are_http_on_the_web_port(overlay: Manifests) -> None:
    container = worker_container(overlay)
    (port,) = container["ports"]
    assert port["containerPort"] == int(k8s_environment(overlay)["LOOPGUARD_WEB_PORT"])
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}, probe
    # Ready only once consuming: a pod still joining the group is not counted as up.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}


def test_shutdown_has_a_pre_stop_pause_and_time_to_flush(overlay: Manifests) -> None:
    spec = pod_spec(overlay)
    pre_stop = worker_container(overlay)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + 30


def test_the_data_dir_is_a_persistent_volume(overlay: Manifests) -> None:
    statefulset = find_manifest(overlay, "StatefulSet")
    claims = {claim["metadata"]["name"] for claim in statefulset["spec"]["volumeClaimTemplates"]}
    mounts = {
        PurePosixPath(mount["mountPath"]): mount["name"]
        for mount in worker_container(overlay)["volumeMounts"]
    }
    data_dir = PurePosixPath(k8s_environment(overlay)["LOOPGUARD_DATA_DIR"])
    assert mounts[data_dir] in claims


def test_the_policy_config_map_is_mounted_where_the_worker_reads_it(overlay: Manifests) -> None:
    policy = PurePosixPath(k8s_environment(overlay)["LOOPGUARD_POLICY_FILE"])
    mounts = {
        PurePosixPath(mount["mountPath"]): mount
        for mount in worker_container(overlay)["volumeMounts"]
    }
    mount = mounts[policy.parent]
    assert mount["readOnly"] is True
    volumes = {volume["name"]: volume for volume in pod_spec(overlay)["volumes"]}
    config_map_name = volumes[mount["name"]]["configMap"]["name"]
    config_maps = {doc["metadata"]["name"]: doc for doc in overlay if doc["kind"] == "ConfigMap"}
    assert policy.name in config_maps[config_map_name]["data"]


def test_settings_are_set_in_one_place_each(overlay: Manifests) -> None:
    container = worker_container(overlay)
    literal = {entry["name"] for entry in container["env"]}
    config_maps = {doc["metadata"]["name"]: doc for doc in overlay if doc["kind"] == "ConfigMap"}
    from_config_map = {
        name
        for source in container["envFrom"]
        for name in config_maps[source["configMapRef"]["name"]]["data"]
    }
    assert not literal & from_config_map


def test_the_service_exposes_the_metrics_port_of_the_workers(overlay: Manifests) -> None:
    service = find_manifest(overlay, "Service")
    statefulset = find_manifest(overlay, "StatefulSet")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert selects(service["spec"]["selector"], pod_labels(overlay))
    (port,) = service["spec"]["ports"]
    (container_port,) = worker_container(overlay)["ports"]
    assert port["name"] == "metrics"
    assert port["targetPort"] == container_port["name"]


def test_the_service_monitor_scrapes_the_service_as_job_loopguard(overlay: Manifests) -> None:
    monitor = find_manifest(overlay, "ServiceMonitor")["spec"]
    service = find_manifest(overlay, "Service")
    assert selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    # The alerts select job="loopguard"; the job label comes from this Service label.
    assert service["metadata"]["labels"][monitor["jobLabel"]] == "loopguard"


def test_the_disruption_budget_covers_the_workers(overlay: Manifests) -> None:
    budget = find_manifest(overlay, "PodDisruptionBudget")["spec"]
    assert selects(budget["selector"]["matchLabels"], pod_labels(overlay))
    assert budget["maxUnavailable"] == 1


def test_config_maps_roll_the_workers_when_they_change(overlay: Manifests) -> None:
    # kustomize appends a content hash to generated ConfigMap names.
    names = [doc["metadata"]["name"] for doc in overlay if doc["kind"] == "ConfigMap"]
    assert names
    assert all(name.rsplit("-", 1)[0] in {"loopguard-env", "loopguard-policy"} for name in names)
    assert all(len(name.rsplit("-", 1)[1]) == 10 for name in names)
