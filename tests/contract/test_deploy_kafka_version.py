"""The deployed Kafka is the one the suites run: compose's image, the Maven pin, the launcher."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from loopguard_fleet.streams.embedded import KAFKA_VERSION

DEPLOY = Path(__file__).parents[2] / "deploy"


def test_every_kafka_image_in_compose_is_the_version_the_tests_run() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text(encoding="utf-8"))
    images = {
        name: service["image"]
        for name, service in compose["services"].items()
        if str(service.get("image", "")).startswith("apache/kafka:")
    }
    assert set(images) == {"kafka", "kafka-init"}
    assert set(images.values()) == {f"apache/kafka:{KAFKA_VERSION}"}


def test_compose_kafka_creates_no_topic_by_itself_like_the_test_broker() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text(encoding="utf-8"))
    env = compose["services"]["kafka"]["environment"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"


def test_the_deploy_readme_names_the_same_kafka_version() -> None:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert set(re.findall(r"Kafka (\d+\.\d+(?:\.\d+)?)", text)) == {KAFKA_VERSION}
