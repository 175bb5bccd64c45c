"""Apache Kafka (KRaft, one combined broker+controller node) as a child process on 127.0.0.1.

The jars come from Maven Central through `deploy/kafka/pom.xml` into a cache folder outside
git (`install_jars`, `make kafka`). The data directory is formatted once and lives on disk,
so `restart()` and a SIGKILL (`kill()` then `start()`) keep every topic, record and committed
offset; `restart(keep_data=False)` is a broker that lost its disk. Measured on this 2-core box
with 4.1.2: a cold start (format + start) takes ~6 s, a restart ~4 s; a group join ~0.1 s
(`group.initial.rebalance.delay.ms=0`).

`KafkaBroker(secure=True)` is the same broker locked down (streams/embedded/kafka_security.py):
one `SASL_SSL` listener (SCRAM-SHA-512, a throwaway CA), the standard authorizer, no ACL but
the super user's until a test grants them; `credentials(user)` is what a client of it needs.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Final, Self

from loopguard_fleet.streams.embedded.child import HOST, ChildBroker, free_ports, kafka_ready
from loopguard_fleet.streams.embedded.kafka_security import ADMIN, SecureSetup
from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaSetupError",
    "default_home",
    "install_jars",
    "is_installed",
]

#: The broker version; deploy/kafka/pom.xml pins the same (tests/unit/test_kafka_launcher.py).
KAFKA_VERSION: Final = "4.1.2"


def _shipped_pom() -> Path:
    """deploy/kafka/pom.xml as installed: package data of `loopguard_fleet.deploy.kafka`."""
    # The wheel ships the pom (pyproject: package-dir), so an installed `loopguard` resolves the
    # jars exactly as a checkout does. The folder is found through its spec, not
    # importlib.resources: an editable install adds a path-hook entry to the namespace's path
    # that resources' MultiplexedPath rejects (Python 3.11).
    spec = importlib.util.find_spec("loopguard_fleet.deploy.kafka")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "pom.xml").is_file():
            return Path(folder) / "pom.xml"
    return Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "pom.xml"


POM: Final = _shipped_pom()
_MARKER: Final = ".complete"  # written after every jar was copied: a cut download is no install
_JAVA_MIN: Final = 17  # Kafka 4 brokers need Java 17


class KafkaSetupError(BrokerError):
    """Java, Maven or the broker jars are missing; the message names what to install."""


def default_home() -> Path:
    """Where the broker's jars are cached: `~/.cache/loopguard/kafka-<version>`."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "loopguard" / f"kafka-{KAFKA_VERSION}"


def is_installed(home: Path | None = None) -> bool:
    """True when the broker's jars are in `home` (complete copy)."""
    return ((home or default_home()) / _MARKER).is_file()


def find_java() -> str:
    """Path of a Java 17+ `java`, or a KafkaSetupError naming what to install."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise KafkaSetupError(
            "Apache Kafka needs Java 17 or later: install it (Debian: apt-get install "
            "openjdk-17-jre-headless) or use the default Tansu broker"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if found is None or int(found.group(1)) < _JAVA_MIN:
        version = found.group(1) if found else "unknown"
        raise KafkaSetupError(f"Apache Kafka needs Java 17 or later; {java} is Java {version}")
    return java


def install_jars(home: Path | None = None, pom: Path = POM) -> Path:
    """Resolve the broker's jars with Maven into `home` (once); returns `home`."""
    home = home or default_home()
    if is_installed(home):
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError(
            f"the Apache Kafka broker's jars are not in {home} and Maven is missing: "
            "install Maven (Debian: apt-get install maven) or use the default Tansu broker"
        )
    if not pom.is_file():
        raise KafkaSetupError(f"cannot install the broker's jars: {pom} not found")
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom)]
    cmd += ["dependency:copy-dependencies", f"-DoutputDirectory={staging / 'libs'}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise KafkaSetupError(f"mvn could not resolve the Kafka {KAFKA_VERSION} jars: {tail}")
    (staging / _MARKER).write_text(KAFKA_VERSION + "\n")
    shutil.rmtree(home, ignore_errors=True)
    staging.rename(home)
    return home


def has_live_broker(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Metadata request lists at least one broker (in KRaft: registered, unfenced)."""
    client_id = b"loopguard-probe"
    # Metadata v4 (the oldest Kafka 4 keeps): no topics, no auto-creation.
    body = struct.pack(">hhih", 3, 4, 11, len(client_id)) + client_id + struct.pack(">ib", 0, 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(16, socket.MSG_WAITALL)
    except OSError:
        return False
    if len(head) < 16:
        return False
    _size, correlation, _throttle, brokers = struct.unpack(">iiii", head)
    return bool(correlation == 11 and brokers >= 1)


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding, not starting
    with "-" (kafka-storage would take it for an option; Kafka's own random ids avoid it too)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _server_properties(
    port: int, controller_port: int, data: Path, secure: SecureSetup | None = None
) -> str:
    """The broker config: loopback only, explicit topics, small everything for a 2-core box."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data / "log"),
        # LoopGuard creates its topics with their partition counts (README, "Running workers").
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "offsets.topic.segment.bytes": str(16 << 20),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "transaction.state.log.segment.bytes": str(16 << 20),
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "log.segment.bytes": str(16 << 20),
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 << 20),
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        # After a SIGKILL the restarted broker cannot register until its old session expires.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "4000",
    }
    if secure is not None:
        settings.update(secure.server_properties(port, controller_port))
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def _log4j_properties(log: Path) -> str:
    """Log4j 2 config: the broker's own log into one file (request logging off)."""
    return (
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {log}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\n"
        "logger.request.name = kafka.request.logger\nlogger.request.level = WARN\n"
    )


def _secure_ready(bootstrap: str, admin: ClientSecurity) -> bool:
    """True when the super user can log in and the metadata lists a broker (TLS, SASL)."""
    import asyncio
    import concurrent.futures

    from aiokafka.errors import KafkaError
    from aiokafka.protocol.metadata import MetadataRequest

    from loopguard_fleet.streams.kafka.connection import broker_connection

    host, _, port = bootstrap.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
    except OSError:
        return False  # not listening yet: no TLS client to build and tear down

    async def probe() -> bool:
        # One connection, closed before the loop ends (streams/kafka/connection.py says why).
        try:
            async with broker_connection(bootstrap, admin, request_timeout_ms=2000) as conn:
                metadata = await conn.send(MetadataRequest([]))
                return bool(metadata.brokers)
        except (KafkaError, OSError, TimeoutError):
            return False

    # Its own thread and loop: start() is synchronous and may run under a caller's loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, probe()).result()


class KafkaBroker(ChildBroker):
    """A single-node KRaft Apache Kafka child process on 127.0.0.1; a sync context manager."""

    _what = "Kafka broker"

    def __init__(
        self,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        home: Path | None = None,
        heap_mb: int = 512,
        start_timeout: float = 90.0,
        secure: bool = False,
    ) -> None:
        self._is_secure = secure
        self._secure: SecureSetup | None = None
        self._port = port
        self._controller_port: int | None = None
        self._home = home
        self._heap_mb = heap_mb
        self._start_timeout = start_timeout
        self._owns_dir = data_dir is None
        self._dir = data_dir
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        """The broker's directory: config, KRaft metadata and topic logs, its log files."""
        if self._dir is None:
            raise BrokerError("the Kafka broker has not been started yet")
        return self._dir

    @property
    def is_secure(self) -> bool:
        """True for the locked-down broker (SASL_SSL, ACLs)."""
        return self._is_secure

    @property
    def secure_setup(self) -> SecureSetup:
        """CA, users and passwords of the secured broker (after start)."""
        if self._secure is None:
            raise BrokerError("this Kafka broker is not secured, or not started yet")
        return self._secure

    def credentials(self, user: str = ADMIN) -> ClientSecurity:
        """Client security for `user` (plaintext broker: no security at all)."""
        return self.secure_setup.client(user) if self._is_secure else ClientSecurity()

    @property
    def log_path(self) -> Path:
        """The broker's Log4j log (its JVM's stdout and stderr go to `kafka.out` beside it)."""
        return self.data_dir / "kafka.log"

    def start(self) -> Self:
        """Format the storage (first start only), start the broker, wait until it serves."""
        if self.is_running:
            return self
        java = find_java()
        home = self._home or default_home()
        if not is_installed(home):
            raise KafkaSetupError(
                f"the Apache Kafka {KAFKA_VERSION} jars are not in {home}: run `make kafka` "
                "(needs Maven) or use the default Tansu broker"
            )
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="loopguard-kafka-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        # The client and controller ports picked together: two picks in a row can be the same.
        port, controller_port = free_ports(2)
        if self._port is None:
            self._port = port
        if self._controller_port is None:
            self._controller_port = controller_port if controller_port != self._port else port
        if self._is_secure and self._secure is None:
            self._secure = SecureSetup.create(self.data_dir / "tls")
        config = self.data_dir / "server.properties"
        config.write_text(
            _server_properties(self.port, self._controller_port, self.data_dir, self._secure)
        )
        (self.data_dir / "log4j2.properties").write_text(_log4j_properties(self.log_path))
        classpath = str(home / "libs" / "*")
        self._register()  # from here on: an interrupted start still ends in stop() at exit
        if not (self.data_dir / "log" / "meta.properties").is_file():
            self._format(java, classpath, config)
        self._spawn(java, classpath, config)
        return self

    def _jvm(self, java: str, classpath: str, heap_mb: int) -> list[str]:
        log4j = self.data_dir / "log4j2.properties"
        return [
            java,
            f"-Xms{min(256, heap_mb)}m",
            f"-Xmx{heap_mb}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            classpath,
        ]

    def _format(self, java: str, classpath: str, config: Path) -> None:
        cmd = self._jvm(java, classpath, 256) + ["kafka.tools.StorageTool", "format"]
        cmd += ["-t", _cluster_id(), "-c", str(config)]
        if self._secure is not None:  # SCRAM users live in the metadata log from the start
            cmd += self._secure.scram_arguments()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])
            raise BrokerError(f"kafka-storage format failed in {self.data_dir}: {tail}")

    def _spawn(self, java: str, classpath: str, config: Path) -> None:
        cmd = self._jvm(java, classpath, self._heap_mb) + ["kafka.Kafka", str(config)]
        with open(self.data_dir / "kafka.out", "ab") as out:
            # Own session: a terminal's Ctrl-C reaches us, and we stop the broker last.
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code, self._proc = self._proc.returncode, None
                raise BrokerError(
                    f"Kafka exited with code {code} while starting on {self.bootstrap}: "
                    f"{self._log_tail()}"
                )
            if self._is_serving():
                return
            time.sleep(0.1)
        self._terminate(5.0)
        raise BrokerError(
            f"Kafka did not serve on {self.bootstrap} within {self._start_timeout}s: "
            f"{self._log_tail()}"
        )

    def _is_serving(self) -> bool:
        if self._secure is None:
            return kafka_ready(HOST, self.port) and has_live_broker(HOST, self.port)
        return _secure_ready(self.bootstrap, self._secure.client(ADMIN))

    def _log_tail(self, lines: int = 8) -> str:
        text = ""
        for name in ("kafka.out", "kafka.log"):
            with contextlib.suppress(OSError):
                text += (self.data_dir / name).read_text(errors="replace")
        errors = [ln for ln in text.splitlines() if "ERROR" in ln or "Exception" in ln]
        return " | ".join((errors or text.strip().splitlines())[-lines:]) or "(empty log)"

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no controlled shutdown) and reap it; data stays."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()  # to this PID only
            proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the broker (SIGKILL after `timeout`); remove its directory if temporary."""
        self._terminate(timeout)
        self._unregister()
        if self._owns_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self, *, keep_data: bool = True) -> None:
        """Stop (gracefully) and start on the same ports; `keep_data=False` wipes the disk."""
        self._terminate(30.0)
        if not keep_data:
            shutil.rmtree(self.data_dir / "log", ignore_errors=True)
        self.start()
