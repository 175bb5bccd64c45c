"""Test helper: a LoopGuard worker as a subprocess, configured only by LOOPGUARD_* variables.

    workers = WorkerLauncher(broker_url, base_settings, tmp_path)
    w = workers.start(web_port=...)          # python -m loopguard_fleet.streams.main worker
    await w.wait_until("/healthz", lambda body: True, 30)
    w.kill()                                  # SIGKILL, by PID
    workers.stop_all()                        # SIGTERM (then SIGKILL) every live one, by PID

Used by the integration tests (one worker per test) and the chaos suite (kills, restarts,
several workers in one group). Every process is stopped by its own PID, never by name.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loopguard_fleet.streams.embedded.child import free_port
from loopguard_fleet.streams.embedded.processes import stop_process

REPO = Path(__file__).resolve().parents[1]
_VMRSS = re.compile(r"^VmRSS:\s+(\d+)\s+kB", re.MULTILINE)


@dataclass
class WorkerProcess:
    """A worker subprocess and where to reach it."""

    proc: subprocess.Popen[bytes]
    web: str
    log: Path
    port: int

    @property
    def pid(self) -> int:
        """The worker's PID."""
        return self.proc.pid

    @property
    def is_running(self) -> bool:
        """True while the process is alive."""
        return self.proc.poll() is None

    def log_tail(self, chars: int | None = 3000) -> str:
        """The end of the worker's combined stdout/stderr (all of it for `chars=None`)."""
        try:
            text = self.log.read_text(errors="replace")
            return text if chars is None else text[-chars:]
        except OSError:
            return "(no log)"

    def rss_kb(self) -> int:
        """Resident set size (VmRSS, kB) from /proc; 0 once the process is gone."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0
        m = _VMRSS.search(text)
        return int(m.group(1)) if m else 0

    def get(self, path: str) -> tuple[int, str]:
        """GET a path on the worker's web port (blocking; call via asyncio.to_thread)."""
        with urllib.request.urlopen(self.web + path, timeout=2) as resp:
            return resp.status, resp.read().decode()

    async def wait_until(self, path: str, ok: Callable[[str], bool], deadline: float) -> str:
        """Poll a page until `ok(body)` holds; fail with the last body and the worker's log."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        body = ""
        while loop.time() < end:
            assert self.is_running, f"worker exited:\n{self.log_tail()}"
            try:
                status, body = await asyncio.to_thread(self.get, path)
                if status == 200 and ok(body):
                    return body
            except OSError:
                pass
            await asyncio.sleep(0.1)
        pytest.fail(f"{path} not as expected after {deadline}s; last body:\n{body[-2000:]}")

    def kill(self) -> None:
        """SIGKILL this worker (by PID) and reap it."""
        if self.is_running:
            self.proc.kill()
        self.proc.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM this worker, wait for a graceful exit (SIGKILL after `timeout`); its code."""
        return stop_process(self.proc, timeout)

    async def wait_exit(self, deadline: float) -> int | None:
        """Wait up to `deadline` s for the process to exit by itself; its code, or None."""
        try:
            return await asyncio.to_thread(self.proc.wait, deadline)
        except subprocess.TimeoutExpired:
            return None


@dataclass
class WorkerLauncher:
    """Starts workers sharing `settings` (LOOPGUARD_* without the prefix, lower case)."""

    settings: Mapping[str, object]
    log_dir: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(self, web_port: int | None = None, **overrides: object) -> WorkerProcess:
        """Start one worker; `web_port` (also its data-dir suffix) is free by default."""
        port = web_port if web_port is not None else free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
        values = {**self.settings, "web_port": port, **overrides}
        env.update({f"LOOPGUARD_{k.upper()}": str(v) for k, v in values.items()})
        log = self.log_dir / f"worker-{len(self.started)}-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(proc, f"http://127.0.0.1:{port}", log, port)
        self.started.append(worker)
        return worker

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM every worker still running (SIGKILL after `timeout`), by PID."""
        for worker in self.started:
            worker.terminate(timeout)
