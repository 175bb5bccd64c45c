"""`loopguard up --demo` (the README's first command) shows loops caught, then stops cleanly.

It stops on Ctrl-C (SIGINT, a terminal) and on SIGTERM (a supervisor: systemd, a container
runtime), and in both cases leaves neither its broker nor its worker running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DEADLINE_S = 90.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_up_demo_prints_blocks_and_aborts_and_stops_everything_on_signal(
    tmp_path, stop_signal: signal.Signals
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "up", "--demo", "--runs", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            text = "\n".join(lines)
            if "→ block_call" in text and "→ abort_run" in text:
                break
        text = "\n".join(lines)
        assert "→ block_call" in text, text
        assert "→ abort_run" in text and "compaction_loop_persisted" in text, text
        worker_pid = int(re.search(r"worker\s+pid (\d+)", text).group(1))  # type: ignore[union-attr]
        broker_pid = int(re.search(r"in memory, pid (\d+)", text).group(1))  # type: ignore[union-attr]
        assert _alive(worker_pid) and _alive(broker_pid)
    finally:
        proc.send_signal(stop_signal)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "stopping" in rest
    assert not _alive(worker_pid)
    assert not _alive(broker_pid)
