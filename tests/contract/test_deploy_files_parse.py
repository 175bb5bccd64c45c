"""Every file under deploy/ is of a known kind and parses: YAML (multi-document too), JSON,
JSON5, XML (the Kafka Maven project); Markdown and the Dockerfile are read by their own tests."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import json5
import pytest
import yaml

from tests.contract.deploy_files import DEPLOY, yaml_documents

FILES = sorted(
    path for path in DEPLOY.rglob("*") if path.is_file() and "__pycache__" not in path.parts
)
YAML = [path for path in FILES if path.suffix in {".yml", ".yaml"}]
KNOWN_SUFFIXES = {
    ".yml",
    ".yaml",
    ".json",
    ".json5",
    ".md",
    ".py",
    ".sh",
    ".dockerignore",
    ".xml",
    "",
}


def relative(path: Path) -> str:
    return path.relative_to(DEPLOY).as_posix()


def test_every_file_is_of_a_kind_these_tests_check() -> None:
    unknown = [relative(path) for path in FILES if path.suffix not in KNOWN_SUFFIXES]
    assert not unknown
    assert [relative(path) for path in FILES if path.suffix == ""] == ["Dockerfile"]


@pytest.mark.parametrize("path", YAML, ids=relative)
def test_every_yaml_file_parses(path: Path) -> None:
    documents = yaml_documents(path)
    assert documents, "empty YAML file"
    assert all(isinstance(document, dict) for document in documents)


def test_yaml_files_use_no_duplicate_keys() -> None:
    # PyYAML keeps the last of two equal keys silently; Kubernetes and compose may not.
    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
        keys = [key.value for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
        duplicates = {key for key in keys if keys.count(key) > 1}
        assert not duplicates, f"duplicate keys {duplicates} at line {node.start_mark.line + 1}"
        return loader.construct_mapping(node)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    for path in YAML:
        with path.open(encoding="utf-8") as stream:
            list(yaml.load_all(stream, Loader=StrictLoader))


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".json"], ids=relative)
def test_every_json_file_parses(path: Path) -> None:
    assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".json5"], ids=relative)
def test_every_json5_file_parses(path: Path) -> None:
    assert isinstance(json5.loads(path.read_text(encoding="utf-8")), dict)


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".xml"], ids=relative)
def test_every_xml_file_parses(path: Path) -> None:
    assert ET.parse(path).getroot().tag.endswith("project")
