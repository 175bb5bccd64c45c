"""`loopguard up --demo` (the README's first command) shows loops caught, then stops cleanly.

It stops on Ctrl-C (SIGINT, a terminal) and on SIGTERM (a supervisor: systemd, a container
runtime), and in both cases leaves neither its broker nor its worker running.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import broker_kind
from tests.integration.up_demo import up_demo_until_blocks_then_stop, up_env

#: Both signals on the embedded Tansu; on Apache Kafka one signal is enough to show `up` stops
#: the Kafka it started (how `up` handles each signal does not depend on the broker).
_SIGNALS = {"ctrl_c": signal.SIGINT, "sigterm": signal.SIGTERM}
_RUN = ["ctrl_c", "sigterm"] if broker_kind() == "tansu" else ["sigterm"]


@pytest.mark.parametrize("stop_signal", [_SIGNALS[k] for k in _RUN], ids=_RUN)
def test_up_demo_prints_blocks_and_aborts_and_stops_everything_on_signal(
    stop_signal: signal.Signals, tmp_path: Path
) -> None:
    env = up_env(tmp_path)
    # `up` starts a broker of its own; it has no secured mode (not in that pass: NO_SECURE).
    kind = broker_kind()
    argv = [sys.executable, "-m", "loopguard_fleet.streams.cli", "up", "--demo", "--runs", "20"]
    up_demo_until_blocks_then_stop([*argv, "--broker", kind], env, stop_signal)


def test_up_demo_stops_everything_on_a_second_ctrl_c_while_stopping(tmp_path: Path) -> None:
    # The second Ctrl-C once arrived while `up` stopped its worker: `up` exited and the worker
    # went on running, orphaned.
    argv = [sys.executable, "-m", "loopguard_fleet.streams.cli", "up", "--demo", "--runs", "20"]
    up_demo_until_blocks_then_stop(
        [*argv, "--broker", broker_kind()], up_env(tmp_path), signal.SIGINT, again=True
    )
