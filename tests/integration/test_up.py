"""`loopguard up --demo` (the README's first command) shows loops caught, then stops cleanly.

It stops on Ctrl-C (SIGINT, a terminal) and on SIGTERM (a supervisor: systemd, a container
runtime), and in both cases leaves neither its broker nor its worker running, nor its data
directory; after a worker's failure it keeps that worker's log.
"""

from __future__ import annotations

import re
import signal
import subprocess
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


def test_up_keeps_the_workers_log_when_the_worker_fails(tmp_path: Path) -> None:
    # A clean stop removes `up`'s data directory (the tests above); a failed worker's log is
    # what the user needs next, so it stays, and `up` says where. The worker fails here because
    # its data directory is a file: the failure is the worker's own, after `up` checked
    # everything it checks itself.
    env = up_env(tmp_path)
    (tmp_path / "a-file").touch()
    env["LOOPGUARD_DATA_DIR"] = str(tmp_path / "a-file")
    argv = [sys.executable, "-m", "loopguard_fleet.streams.cli", "up", "--broker", "tansu"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "worker exited during start-up" in done.stderr
    assert "NotADirectoryError" in done.stderr
    kept = re.search(r"^log      kept: (\S+)$", done.stdout, re.MULTILINE)
    assert kept is not None, done.stdout
    log = Path(kept.group(1))
    assert log.parent.parent == tmp_path
    assert "NotADirectoryError" in log.read_text()
    # The broker's own directory went with the broker; only the worker's is kept.
    assert sorted(p.name for p in tmp_path.glob("loopguard-*")) == [log.parent.name]
