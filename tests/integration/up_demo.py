"""Run `loopguard up --demo` as a user does: wait for a block, an abort and the outage's fleet
signal firing, blocking early and resolving; stop it by signal.

Shared by tests/integration/test_up.py (the checkout's command) and
tests/integration/test_installed_up.py (the command of a wheel installed outside the checkout).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

DEADLINE_S = 90.0


def up_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an `up` a test starts: none of the test run's LOOPGUARD_ settings,
    and TMPDIR in the test's directory, where the test sees what `up` leaves behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env["TMPDIR"] = str(tmp_path)
    return env


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


def _replay_reads_what_up_printed(text: str, env: dict[str, str], cwd: Path | None) -> None:
    """The address `up` prints is what `replay --broker` takes, and a bare `--topic` reads
    both input topics: the demo's compaction abort is replayed."""
    found = re.search(r"^broker\s+(\S+:\d+) ", text, re.MULTILINE)  # not "installing …"
    assert found is not None, text
    address = found.group(1)
    assert "://" not in address, text  # host:port, the form every consumer takes
    replay = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "--quiet",
         "--topic", "--broker", address],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    assert '"command":"abort_run"' in replay.stdout, replay.stdout[-2000:]


def _outage_fired_blocked_and_resolved(text: str) -> None:
    """The demo's outage: one signal fires, runs it hits are blocked early (before per-run
    detection's 10th repeat), and the same signal resolves once it is over."""
    fired = re.findall(r"^FLEET  FIRING   read in (\d+) runs .*\(signal (\w+)\)$", text, re.M)
    resolved = re.findall(r"^FLEET  RESOLVED read \(signal (\w+)\)$", text, re.M)
    assert [signal for _, signal in fired] == resolved and len(resolved) == 1, text
    assert int(fired[0][0]) >= 5, text  # minRuns
    early = re.findall(r"^BLOCK  \S+-outage-\d+ +read +fleet_signal +count (\d+)$", text, re.M)
    assert early and min(map(int, early)) == 3, text  # earlyAtCount


def up_demo_until_blocks_then_stop(
    argv: list[str],
    env: dict[str, str],
    stop_signal: signal.Signals,
    cwd: Path | None = None,
    *,
    again: bool = False,
) -> str:
    """Run `argv` (an `up --demo`), assert it blocks and aborts, stop it; returns what it printed.

    Asserts that `up` exits 0 on `stop_signal` and leaves neither its broker nor its worker
    running (both found by the PIDs `up` prints), nor a directory in TMPDIR. `again`: the
    signal is sent a second time once `up` says it is stopping (an impatient user's second
    Ctrl-C).
    """
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, cwd=cwd,
        # A shell starts background jobs with SIGINT ignored, and Python then keeps ignoring
        # it: give `up` a terminal's Ctrl-C whatever launched the test run.
        preexec_fn=_default_sigint,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()  # read by a thread: a silent `up` must not hang us
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    children: list[int] = []
    try:
        end = time.monotonic() + DEADLINE_S
        text = ""
        while not ("→ block_call" in text and "→ abort_run" in text and "FLEET  RESOLVED" in text):
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            try:
                seen.append(lines.get(timeout=remaining).rstrip())
            except queue.Empty:
                break
            text = "\n".join(seen)
        pids = [re.search(p, text) for p in (r"worker\s+pid (\d+)", r"broker\s.*, pid (\d+)\)")]
        children = [int(m.group(1)) for m in pids if m]
        assert "→ block_call" in text, text
        assert "→ abort_run" in text and "compaction_loop_persisted" in text, text
        _outage_fired_blocked_and_resolved(text)
        assert len(children) == 2, text
        worker_pid, broker_pid = children
        assert _alive(worker_pid) and _alive(broker_pid)
        _replay_reads_what_up_printed(text, env, cwd)
    finally:
        proc.send_signal(stop_signal)
        stopping: list[str] = []
        if again:
            # Without the line, send it anyway: the wait below still stops (or kills) `up` and
            # its children, and the "stopping" assertion after it reports the failure.
            with contextlib.suppress(queue.Empty):
                while not stopping or "stopping" not in stopping[-1]:
                    stopping.append(lines.get(timeout=DEADLINE_S))
            proc.send_signal(stop_signal)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid, *children]:  # leave nothing behind, then fail
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise
        reader.join(timeout=10)
        proc.stdout.close()
    rest = "".join(stopping) + "".join(lines.get() for _ in range(lines.qsize()))
    assert proc.returncode == 0, rest
    assert "stopping" in rest
    assert not _alive(worker_pid)
    assert not _alive(broker_pid)
    assert "log      kept" not in rest, rest
    assert not list(Path(env["TMPDIR"]).glob("loopguard-*")), rest
    return "\n".join(seen) + "\n" + rest
