"""`loopguard up --demo` from a wheel installed outside the checkout, on this pass's broker.

On Apache Kafka the broker's jars are fetched into a fresh cache through the pom the wheel
ships (`loopguard_fleet.deploy.kafka`), as for a pip user who has no checkout.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.conftest import broker_kind
from tests.integration.up_demo import up_demo_until_blocks_then_stop
from tests.packaging.dists import Installed


def test_the_installed_up_demo_blocks_and_stops_on_ctrl_c(
    installed: Installed, tmp_path: Path
) -> None:
    kind = broker_kind()  # `up` has no secured mode: not in that pass (Makefile NO_SECURE)
    # TMPDIR: the test sees that `up` leaves no directory behind.
    env = installed.env(XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    argv = [str(installed.bin / "loopguard"), "up", "--demo", "--runs", "20", "--broker", kind]
    printed = up_demo_until_blocks_then_stop(argv, env, signal.SIGINT, cwd=tmp_path)
    if kind == "kafka":
        assert list((tmp_path / "cache" / "loopguard").glob("kafka-*/libs/kafka_2.13-*.jar"))
    assert "Traceback" not in printed
