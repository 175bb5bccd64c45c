"""`python -m loopguard_fleet.streams.embedded kafka` (`make kafka`): Java check, Kafka jars.

Exit 0 with where the jars are, or 1 with one line naming what to install.
"""

from __future__ import annotations

import sys

from loopguard_fleet.streams.embedded.kafka import (
    KAFKA_VERSION,
    KafkaSetupError,
    find_java,
    install_jars,
)


def main(argv: list[str]) -> int:
    """Install what `KafkaBroker` needs; one line on stderr if something is missing."""
    if argv != ["kafka"]:
        print("usage: python -m loopguard_fleet.streams.embedded kafka", file=sys.stderr)
        return 2
    try:
        find_java()
        home = install_jars()
    except KafkaSetupError as exc:
        print(f"loopguard: {exc}", file=sys.stderr)
        return 1
    print(f"Apache Kafka {KAFKA_VERSION} jars in {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
