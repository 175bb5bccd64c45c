"""deploy/Dockerfile, checked statically (no Docker engine runs here): python:3.11-slim, the
repository's wheel with the compiled engine installed, a non-root user, `loopguard worker` by
default."""

from __future__ import annotations

import re
import tomllib
from pathlib import PurePosixPath

from tests.contract.deploy_env import env_for
from tests.contract.deploy_files import DEPLOY, DOCKERFILE, K8S_BASE, REPO, yaml_file


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(arguments.split())))
    return result


def final_start() -> int:
    """The index of the final stage's FROM."""
    return max(i for i, (keyword, _) in enumerate(instructions()) if keyword == "FROM")


def final_stage() -> list[tuple[str, str]]:
    return instructions()[final_start() :]


def pyproject() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_stage_starts_from_python_3_11_slim() -> None:
    bases = [arguments.split()[0] for keyword, arguments in instructions() if keyword == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)


def test_the_repository_is_built_as_a_wheel_with_the_compiled_engine_and_installed() -> None:
    steps = instructions()
    (arg,) = [arguments for keyword, arguments in steps[: final_start()] if keyword == "ARG"]
    assert arg == "LOOPGUARD_COMPILE=1", "the compiled engine is the image's default"
    runs = " ".join(arguments for keyword, arguments in steps if keyword == "RUN")
    # setup.py compiles when LOOPGUARD_COMPILE=1, with mypy in the building environment and
    # a C compiler in the image.
    assert "gcc" in runs and "mypy" in runs
    assert re.search(
        r'LOOPGUARD_COMPILE="\$LOOPGUARD_COMPILE" \S+/pip wheel --no-build-isolation .*-w (\S+) \.',
        runs,
    )
    wheels = re.search(r"-w (\S+) \.", runs).group(1)  # type: ignore[union-attr]
    assert re.search(rf"/opt/loopguard/bin/pip install {re.escape(wheels)}/loopguard_fleet-", runs)
    # mypy compiles in a venv of its own: the worker's venv, which the image keeps, has none.
    assert "/opt/loopguard/bin/pip install 'mypy" not in runs
    assert [a for k, a in final_stage() if k == "COPY"] == [
        "--from=build /opt/loopguard /opt/loopguard"
    ]


def test_copies_only_what_the_package_build_needs() -> None:
    folders = pyproject()["tool"]["setuptools"]["package-dir"].values()  # type: ignore[index]
    allowed = {"pyproject.toml", "setup.py", "README.md", "LICENSE"}
    allowed |= {folder + "/" for folder in folders}
    copied: set[str] = set()
    for keyword, arguments in instructions():
        if keyword == "COPY" and not arguments.startswith("--from="):
            *sources, _ = arguments.split()
            assert set(sources) <= allowed, arguments
            copied |= set(sources)
    # `pip install .` fails on a package-dir folder or license file that is not in the context.
    assert copied == allowed


def test_the_build_context_filter_keeps_what_is_copied() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for keyword, arguments in instructions()
        if keyword == "COPY" and not arguments.startswith("--from=")
        for source in arguments.split()[:-1]
    }
    assert copied <= kept
    assert "**" in ignore, "the filter must exclude everything else (.venv, .git, tests)"


def test_the_image_runs_as_the_non_root_user_that_k8s_expects() -> None:
    (user,) = [arguments for keyword, arguments in final_stage() if keyword == "USER"]
    (arg,) = [arguments for keyword, arguments in final_stage() if keyword == "ARG"]
    name, _, default = arg.partition("=")
    uid = user.replace(f"${{{name}}}", default).split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "USER must be numeric for runAsNonRoot"
    statefulset = yaml_file(K8S_BASE / "statefulset.yaml")
    assert statefulset["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_the_default_command_is_loopguard_worker() -> None:
    (cmd,) = [arguments for keyword, arguments in final_stage() if keyword == "CMD"]
    assert cmd == '["loopguard", "worker"]'
    assert not [keyword for keyword, _ in final_stage() if keyword == "ENTRYPOINT"]
    scripts = pyproject()["project"]["scripts"]  # type: ignore[index]
    assert "loopguard" in scripts


def test_the_wheel_lists_every_package_folder() -> None:
    # A sub-package missing from pyproject's list works in the editable install and is absent
    # from the wheel the image installs; so the list must be every folder with an __init__.py.
    setuptools = pyproject()["tool"]["setuptools"]  # type: ignore[index]
    listed = set(setuptools["packages"])  # type: ignore[index]
    present = {
        f"{name}.{'.'.join(init.parent.relative_to(REPO / folder).parts)}".rstrip(".")
        for name, folder in setuptools["package-dir"].items()  # type: ignore[index]
        for init in (REPO / folder).rglob("__init__.py")
    }
    # Data-only packages (the Kafka pom) have no __init__.py: pyproject names their files.
    data_only = set(setuptools["package-data"]) - {"*"}  # type: ignore[arg-type]
    assert listed == present | data_only


def test_the_image_data_dir_and_port_match_the_deployments() -> None:
    environment = " ".join(arguments for keyword, arguments in final_stage() if keyword == "ENV")
    image = dict(re.findall(r"(LOOPGUARD_\w+)=(\S+)", environment))
    for source in ("compose:worker-1", "k8s:dev"):
        deployed = env_for(source)
        assert PurePosixPath(image["LOOPGUARD_DATA_DIR"]) == PurePosixPath(
            deployed["LOOPGUARD_DATA_DIR"]
        )
        assert image["LOOPGUARD_WEB_PORT"] == deployed["LOOPGUARD_WEB_PORT"]
    exposed = [arguments for keyword, arguments in final_stage() if keyword == "EXPOSE"]
    assert exposed == [image["LOOPGUARD_WEB_PORT"]]


def test_the_healthcheck_asks_the_workers_health_endpoint() -> None:
    (check,) = [arguments for keyword, arguments in final_stage() if keyword == "HEALTHCHECK"]
    assert "/healthz" in check
