"""`loopguard up --demo` (the README's first command) shows loops caught, then stops cleanly.

It stops on Ctrl-C (SIGINT, a terminal) and on SIGTERM (a supervisor: systemd, a container
runtime), and in both cases leaves neither its broker nor its worker running.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests.integration.conftest import broker_kind
from tests.integration.up_demo import up_demo_until_blocks_then_stop


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_up_demo_prints_blocks_and_aborts_and_stops_everything_on_signal(
    stop_signal: signal.Signals,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    # `up` starts a broker of its own; it has no secured mode, so kafka-secure runs its Kafka.
    kind = "kafka" if broker_kind() == "kafka-secure" else broker_kind()
    argv = [sys.executable, "-m", "loopguard_fleet.streams.cli", "up", "--demo", "--runs", "20"]
    up_demo_until_blocks_then_stop([*argv, "--broker", kind], env, stop_signal)
