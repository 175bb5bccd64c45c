"""The secured mode of the Apache Kafka launcher: a throwaway CA, SCRAM users, ACLs.

`SecureSetup.create(folder)` makes a CA and a broker certificate for 127.0.0.1 (openssl), one
random password per user, and the broker settings of a `SASL_SSL` listener with the standard
authorizer (only `admin` is a super user; everyone else gets exactly the ACLs granted).
`loopguard_acls(...)` is the least-privilege recipe docs/security.md and deploy/README.md
show: `loopguard-worker` reads the inputs and its group, writes control, dead letters and the
changelog, and reads and writes its fleet topic (and, for fleet signals, the tool-calls topic);
`agent-runtime` writes the inputs and reads control; nobody else gets anything.
`create_acls` sends them as the super user (aiokafka has CreateAcls requests, no admin call).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import SecretStr

from loopguard_fleet.config.defaults import TOPIC_POLICY, fleet_topic_of
from loopguard_fleet.streams.embedded.child import HOST
from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = [
    "ADMIN",
    "OPERATOR",
    "OUTSIDER",
    "RUNTIME",
    "USERS",
    "WORKER",
    "Acl",
    "SecureSetup",
    "create_acls",
    "loopguard_acls",
    "make_ca",
]

ADMIN: Final = "admin"  # the super user: the operator who creates topics and ACLs
WORKER: Final = "loopguard-worker"
RUNTIME: Final = "agent-runtime"
OPERATOR: Final = "loopguard-operator"  # publishes policies (`loopguard policy push`)
OUTSIDER: Final = "outsider"  # authenticates fine, holds no ACL
USERS: Final = (ADMIN, WORKER, RUNTIME, OPERATOR, OUTSIDER)
MECHANISM: Final = "SCRAM-SHA-512"
_DAYS: Final = "2"

# Kafka's wire enums (org.apache.kafka.common.resource / acl): CreateAcls request values.
_RESOURCE = {"topic": 2, "group": 3, "cluster": 4, "transactional_id": 5}
_PATTERN = {"literal": 3, "prefixed": 4}
_OPERATION = {"read": 3, "write": 4, "create": 5, "describe": 8, "describe_configs": 10}
_ALLOW: Final = 3


@dataclass(frozen=True, slots=True)
class Acl:
    """One ALLOW rule: `principal` may `operation` on a resource (as kafka-acls.sh takes it)."""

    principal: str  # a user name; sent as User:<name>
    operation: str  # read, write, create, describe, describe_configs
    resource: str  # topic, group, cluster, transactional_id
    name: str  # resource name, or prefix with pattern="prefixed"; "kafka-cluster" for cluster
    pattern: str = "literal"

    def as_command(self) -> str:
        """The same rule as a `kafka-acls.sh` command line (docs, deploy/README.md)."""
        flag = {"topic": "--topic", "group": "--group", "cluster": "--cluster"}.get(
            self.resource, "--transactional-id"
        )
        target = flag if self.resource == "cluster" else f"{flag} {self.name}"
        pattern = " --resource-pattern-type prefixed" if self.pattern == "prefixed" else ""
        op = self.operation.replace("_", "")
        return (
            f"kafka-acls.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties "
            f"--add --allow-principal User:{self.principal} --operation {op} {target}{pattern}"
        )


def loopguard_acls(
    *,
    tool_calls: str,
    compactions: str,
    control: str,
    dead_letter: str,
    app_id: str,
    changelog: str,
    policy: str = TOPIC_POLICY,
    otlp_spans: str | None = None,
    worker: str = WORKER,
    runtime: str = RUNTIME,
    operator: str = OPERATOR,
) -> list[Acl]:
    """The least-privilege rules for one LoopGuard deployment (docs/security.md)."""
    inputs = (tool_calls, compactions)
    rules: list[Acl] = []
    # The worker: consume the inputs in its group, publish decisions, dead letters, its table.
    for topic in inputs:
        rules += [Acl(worker, "read", "topic", topic), Acl(worker, "describe", "topic", topic)]
    for topic in (control, dead_letter, changelog):
        rules += [Acl(worker, "write", "topic", topic), Acl(worker, "describe", "topic", topic)]
    rules.append(Acl(worker, "read", "topic", changelog))  # table recovery reads it back
    rules.append(Acl(worker, "read", "group", app_id))
    # Fleet signals (docs/fleet.md): the workers send contributions and ticks to the fleet
    # topic and their fleet task consumes it in the same group; the task writes each signal
    # change to the control topic and, as an input record, to every tool-calls partition.
    fleet = fleet_topic_of(app_id)
    rules += [Acl(worker, op, "topic", fleet) for op in ("read", "write", "describe")]
    rules.append(Acl(worker, "write", "topic", tool_calls))
    # It creates (or finds) its own topics before subscribing (streams/worker/run.py).
    for topic in (*inputs, control, dead_letter, changelog, fleet):
        rules.append(Acl(worker, "create", "topic", topic))
    # The policy topic (docs/policy.md): workers read it, without a group at start-up and in
    # their group after, and create it (LOOPGUARD_POLICY_TOPIC); the one that owns it writes
    # each version to every partition of both input topics (the tool-calls write is granted
    # above for fleet signals). Only the operator principal publishes a policy (and reads and
    # creates the topic: `policy push` shows the change against the live version).
    rules.append(Acl(worker, "write", "topic", compactions))
    rules += [Acl(worker, op, "topic", policy) for op in ("read", "describe", "create")]
    rules += [Acl(operator, op, "topic", policy) for op in ("write", "read", "describe", "create")]
    # The OTLP bridge (LOOPGUARD_TOPIC_OTLP_SPANS, docs/audit.md): the workers consume the
    # Collector's topic in their group; the Collector creates and writes it.
    if otlp_spans is not None:
        rules += [Acl(worker, op, "topic", otlp_spans) for op in ("read", "write", "describe")]
    # Agent runtimes: publish their events, read verdicts and commands without a group.
    for topic in inputs:
        rules += [Acl(runtime, "write", "topic", topic), Acl(runtime, "describe", "topic", topic)]
    rules += [Acl(runtime, "read", "topic", control), Acl(runtime, "describe", "topic", control)]
    return rules


async def create_acls(bootstrap: str, admin: ClientSecurity, acls: Iterable[Acl]) -> None:
    """Create the rules on the broker as the super user; BrokerError names a refused one."""
    from aiokafka.protocol.admin import CreateAclsRequest

    from loopguard_fleet.streams.kafka.connection import broker_connection

    # One broker's connection (any broker forwards ACLs to the controller), closed before
    # this returns: aiokafka's client would leave its bootstrap connection closing behind.
    server = bootstrap.split(",")[0]
    async with broker_connection(server, admin) as conn:
        for acl in acls:
            request = CreateAclsRequest(
                _RESOURCE[acl.resource],
                acl.name,
                _PATTERN[acl.pattern],
                f"User:{acl.principal}",
                "*",
                _OPERATION[acl.operation],
                _ALLOW,
            )
            response = await conn.send(request)
            for code, message in response.creation_responses:
                if code:
                    raise BrokerError(f"cannot create ACL {acl}: error {code} {message}")


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise BrokerError("the secured Kafka needs openssl (Debian: apt-get install openssl)")
    done = subprocess.run(
        [openssl, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise BrokerError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


def make_ca(folder: Path, name: str = "loopguard-test-ca") -> Path:
    """A self-signed CA (key and certificate, PEM) in `folder`; returns the certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", _DAYS, "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    return folder / "ca.pem"


@dataclass(frozen=True, slots=True)
class SecureSetup:
    """The files and secrets of one secured broker (all under `folder`, gone with it)."""

    folder: Path
    ca_file: Path
    keystore: Path
    store_password: str
    passwords: dict[str, str]

    @classmethod
    def create(cls, folder: Path) -> SecureSetup:
        """CA, broker certificate (SAN IP:127.0.0.1) in a PKCS#12 keystore, user passwords."""
        ca = make_ca(folder)
        (folder / "san.ext").write_text(f"subjectAltName=IP:{HOST},DNS:localhost\n")
        store_password = secrets.token_urlsafe(16)
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "broker.key", "-out", "broker.csr", "-subj", f"/CN={HOST}",
            cwd=folder,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", _DAYS, "-extfile", "san.ext",
            cwd=folder,
        )  # fmt: skip
        _openssl(
            "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile",
            "ca.pem", "-name", "broker", "-out", "broker.p12", "-passout", f"pass:{store_password}",
            cwd=folder,
        )  # fmt: skip
        passwords = {user: secrets.token_urlsafe(18) for user in USERS}
        return cls(folder, ca, folder / "broker.p12", store_password, passwords)

    def client(self, user: str, *, password: str | None = None) -> ClientSecurity:
        """SASL_SSL over SCRAM-SHA-512 as `user`, trusting the throwaway CA."""
        return ClientSecurity(
            protocol="SASL_SSL",
            mechanism=MECHANISM,
            username=user,
            password=SecretStr(self.passwords[user] if password is None else password),
            ca_file=self.ca_file,
        )

    def scram_arguments(self) -> list[str]:
        """`kafka-storage format` arguments that create every user's SCRAM credential."""
        out: list[str] = []
        for user, password in self.passwords.items():
            out += ["--add-scram", f"{MECHANISM}=[name={user},password={password}]"]
        return out

    def server_properties(self, port: int, controller_port: int) -> dict[str, str]:
        """Broker settings replacing the plaintext listeners (streams/embedded/kafka.py)."""
        admin = self.passwords[ADMIN]
        scram = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{admin}";'
        )
        # The controller listener takes PLAIN from its own config: SCRAM credentials live in
        # the metadata log the controller serves, so they cannot authenticate the broker to it.
        plain = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN}" password="{admin}" user_{ADMIN}="{admin}";'
        )
        return {
            "listeners": f"SASL_SSL://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{HOST}:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.store_password,
            "ssl.key.password": self.store_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }
