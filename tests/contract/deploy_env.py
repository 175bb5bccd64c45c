"""The LOOPGUARD_* environment (and policy file) each deploy file gives a worker, read from
the files themselves.

Sources are named `compose:<service>` (each service that runs `loopguard`) and
`k8s:<overlay>` (the worker container of the rendered overlay: its ConfigMap via envFrom,
then its literal env entries on top, as the kubelet applies them). The deploy files are the
one place the values live; nothing here repeats them.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from tests.contract.deploy_files import (
    COMPOSE_FILE,
    compose,
    find_manifest,
    kustomize_build,
    overlay_dirs,
)

PREFIX = "LOOPGUARD_"


def loopguard_only(environment: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in environment.items() if name.startswith(PREFIX)}


def worker_services() -> dict[str, dict[str, Any]]:
    """The compose services that run LoopGuard (their command starts with `loopguard`)."""
    return {
        name: service
        for name, service in compose()["services"].items()
        if (service.get("command") or [None])[0] == "loopguard"
    }


def env_source_names() -> list[str]:
    """Every source, cheaply (no kustomize run): usable in parametrize at collection time."""
    return [f"compose:{name}" for name in sorted(worker_services())] + [
        f"k8s:{path.name}" for path in overlay_dirs()
    ]


def worker_container(manifests: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    statefulset = find_manifest(manifests, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return dict(container)


def k8s_environment(manifests: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """The worker container's environment: envFrom ConfigMaps first, literal env on top."""
    config_maps = {
        doc["metadata"]["name"]: doc.get("data", {})
        for doc in manifests
        if doc["kind"] == "ConfigMap"
    }
    container = worker_container(manifests)
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environment.update(config_maps[source["configMapRef"]["name"]])
    for entry in container.get("env", []):
        assert "value" in entry, f"env {entry['name']} is not a literal value"
        environment[entry["name"]] = entry["value"]
    return environment


def env_for(source: str) -> dict[str, str]:
    """The LOOPGUARD_* variables a source gives its worker."""
    kind, _, name = source.partition(":")
    if kind == "compose":
        return loopguard_only(worker_services()[name].get("environment", {}))
    if kind == "k8s":
        overlay = next(path for path in overlay_dirs() if path.name == name)
        return loopguard_only(k8s_environment(kustomize_build(overlay)))
    raise ValueError(f"unknown env source {source!r}: expected compose:<service> or k8s:<overlay>")


def policy_text(source: str) -> str:
    """The content a source's worker finds at its LOOPGUARD_POLICY_FILE.

    Compose: the host file bind-mounted there. Kubernetes: the key of the ConfigMap volume
    mounted on the file's directory. Fails if nothing is mounted there.
    """
    target = PurePosixPath(env_for(source)["LOOPGUARD_POLICY_FILE"])
    kind, _, name = source.partition(":")
    if kind == "compose":
        for volume in worker_services()[name].get("volumes", []):
            host, _, rest = volume.partition(":")
            if PurePosixPath(rest.split(":")[0]) == target:
                text: str = (COMPOSE_FILE.parent / host).read_text(encoding="utf-8")
                return text
        raise AssertionError(f"{source}: nothing is mounted at {target}")
    overlay = next(path for path in overlay_dirs() if path.name == name)
    manifests = kustomize_build(overlay)
    container = worker_container(manifests)
    volumes = {
        volume["name"]: volume
        for volume in find_manifest(manifests, "StatefulSet")["spec"]["template"]["spec"]["volumes"]
    }
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(mount["mountPath"]) == target.parent:
            config_map_name = volumes[mount["name"]]["configMap"]["name"]
            config_map = next(
                doc
                for doc in manifests
                if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == config_map_name
            )
            return str(config_map["data"][target.name])
    raise AssertionError(f"{source}: no ConfigMap is mounted at {target.parent}")
