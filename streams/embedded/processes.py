"""Stopping child processes this program started: by their PID, gracefully first."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> int:
    """SIGTERM a running child, SIGKILL it after `timeout` seconds; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # SIGKILL, to this PID only
            proc.wait()
    return int(proc.returncode)
