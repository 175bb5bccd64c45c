"""Broker child processes LoopGuard starts on 127.0.0.1: what each has, and the stop at exit.

`ChildBroker` is the base of both launchers (Tansu in streams/embedded/tansu.py, Apache Kafka
in streams/embedded/kafka.py): port, address, PID, stop by PID, a context manager, and one
`atexit` hook that stops every broker still running when the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
import socket
import struct
import subprocess
from types import TracebackType
from typing import Final, Self

from loopguard_fleet.streams.embedded.processes import stop_process
from loopguard_fleet.streams.errors import BrokerError

__all__ = ["HOST", "ChildBroker", "free_port", "free_ports", "kafka_ready"]

HOST: Final = "127.0.0.1"

_live: set[ChildBroker] = set()  # strong refs: a forgotten broker is still stopped at exit


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on `host` right now (the OS picks it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = HOST) -> list[int]:
    """`count` distinct TCP ports free on `host` right now: each is held until all are picked,
    so the OS cannot hand one out twice (two `free_port` calls in a row can)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


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


@atexit.register
def _stop_leftovers() -> None:
    """Never leave a broker behind when the interpreter exits without calling stop()."""
    for broker in list(_live):
        with contextlib.suppress(BrokerError, OSError):
            broker.stop()
