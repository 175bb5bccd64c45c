"""A real Prometheus server for tests: scrapes one target and evaluates deploy/'s rules.

    with start_prometheus("127.0.0.1:6066", RULES_DIR) as prometheus:
        prometheus.wait_for('loopguard_events_total{type="tool_call"}')
        prometheus.query("job:loopguard_runs_active:sum")

It runs /usr/bin/prometheus (Debian's `prometheus` package) on a free 127.0.0.1 port with a
temporary config (scrape and evaluation every second, job "loopguard", as the alerts expect)
and a temporary TSDB, and stops it by its PID. Only 127.0.0.1 is ever bound or contacted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import yaml

PROMETHEUS_BINARY = Path("/usr/bin/prometheus")
INSTALL_HINT = "run .ci/run, or install it: apt-get update && apt-get install -y prometheus"


class PrometheusError(RuntimeError):
    """The server did not start, or answered a query with an error."""


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PrometheusServer:
    """A running Prometheus; `stop()` (or leaving the `with` block) ends it."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        base_url: str,
        workdir: tempfile.TemporaryDirectory[str],
        log: TextIO,
    ) -> None:
        self.process = process
        self.base_url = base_url
        self._workdir = workdir
        self._log = log

    @property
    def pid(self) -> int:
        return self.process.pid

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns its `data`, raises PrometheusError on an error."""
        url = f"{self.base_url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            with error:
                body = json.load(error)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (empty when nothing matches)."""
        data = self.api("query", query=promql)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Polls until the query returns something; raises PrometheusError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"no result for {promql!r} after {timeout}s")
            time.sleep(0.25)

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (with its group name under "group"), from /api/v1/rules."""
        return [
            {**rule, "group": group["name"]}
            for group in self.api("rules")["groups"]
            for rule in group["rules"]
        ]

    def log_text(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """Terminates the server by its PID (SIGTERM, then SIGKILL) and removes its files."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        self._log.close()
        self._workdir.cleanup()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def write_config(directory: Path, target: str, rules_dir: Path, job: str) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_dir.resolve() / "*.yml")],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}],
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def start_prometheus(
    target: str,
    rules_dir: Path,
    *,
    job: str = "loopguard",
    binary: Path = PROMETHEUS_BINARY,
    timeout: float = 60.0,
) -> PrometheusServer:
    """Starts Prometheus scraping `target` (host:port, 127.0.0.1 only) with `rules_dir/*.yml`.

    Returns once /-/ready answers 200. Raises FileNotFoundError if the binary is missing and
    PrometheusError if the server exits or is not ready within `timeout` seconds (its log is
    in the message).
    """
    if not target.startswith("127.0.0.1:"):
        raise ValueError(f"target {target!r} must be on 127.0.0.1 (tests stay on loopback)")
    if not binary.exists():
        raise FileNotFoundError(f"{binary} not found: {INSTALL_HINT}")
    workdir = tempfile.TemporaryDirectory(prefix="loopguard-prometheus-")
    root = Path(workdir.name)
    config = write_config(root, target, rules_dir, job)
    port = free_local_port()
    log = (root / "prometheus.log").open("w", encoding="utf-8")
    process = subprocess.Popen(
        [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(process, f"http://127.0.0.1:{port}", workdir, log)
    try:
        _wait_until_ready(server, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_ready(server: PrometheusServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with {server.process.returncode}:\n{server.log_text()}"
            )
        try:
            with urllib.request.urlopen(f"{server.base_url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as error:  # 503 while the TSDB opens
            error.close()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise PrometheusError(f"prometheus not ready after {timeout}s:\n{server.log_text()}")
        time.sleep(0.2)
