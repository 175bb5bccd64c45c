"""Kafka client security in one place: TLS and SASL settings as aiokafka options and Faust
credentials, for every client LoopGuard builds (docs/security.md).

    security = ClientSecurity.from_settings(settings)
    AIOKafkaProducer(bootstrap_servers=..., **security.aiokafka_kwargs())
    faust.App(..., broker_credentials=security.faust_credentials())

The password lives in a `SecretStr` until the moment a client is built: `repr()` and `str()`
of a `ClientSecurity` never show it, and nothing here logs.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

from loopguard_fleet.config.settings import KafkaSecuritySettings, SaslMechanism, SecurityProtocol
from loopguard_fleet.streams.errors import BrokerError

__all__ = ["PLAINTEXT", "BrokerRefused", "ClientSecurity", "diagnose_refusal"]


class BrokerRefused(BrokerError):
    """The broker answered but refused us: credentials, certificate trust or an ACL.

    Not a connection error: retrying cannot help, so start-up stops at once (exit 77).
    """


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a Kafka client authenticates: protocol, SASL credentials, TLS trust and identity."""

    protocol: SecurityProtocol = "PLAINTEXT"
    mechanism: SaslMechanism | None = None
    username: str | None = None
    password: SecretStr | None = field(default=None, repr=False)
    ca_file: Path | None = None  # None: the system's trusted CAs
    cert_file: Path | None = None  # client certificate for mutual TLS
    key_file: Path | None = None
    key_password: SecretStr | None = field(default=None, repr=False)
    check_hostname: bool = True

    @classmethod
    def from_settings(cls, settings: KafkaSecuritySettings) -> ClientSecurity:
        """The security part of `Settings` (or of `KafkaSecuritySettings` alone)."""
        return cls(
            protocol=settings.security_protocol,
            mechanism=settings.sasl_mechanism,
            username=settings.sasl_username,
            password=settings.sasl_password,
            ca_file=settings.ssl_ca_file,
            cert_file=settings.ssl_cert_file,
            key_file=settings.ssl_key_file,
            key_password=settings.ssl_key_password,
            check_hostname=settings.ssl_check_hostname,
        )

    @classmethod
    def from_env(cls) -> ClientSecurity:
        """The `LOOPGUARD_SECURITY_*`/`_SASL_*`/`_SSL_*` environment (tools such as replay)."""
        return cls.from_settings(KafkaSecuritySettings())

    @property
    def is_tls(self) -> bool:
        """True when connections are encrypted (SSL or SASL_SSL)."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def is_sasl(self) -> bool:
        """True when the client authenticates with SASL."""
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (CA, optional client certificate), or None without TLS."""
        if not self.is_tls:
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.ca_file,
            certfile=self.cert_file,
            keyfile=self.key_file,
            password=self.key_password.get_secret_value() if self.key_password else None,
        )
        # Off only on request (LOOPGUARD_SSL_CHECK_HOSTNAME=false): the chain is still verified.
        context.check_hostname = self.check_hostname
        return context

    def settings_env(self) -> dict[str, str]:
        """The `LOOPGUARD_*` environment that gives a worker or tool this security (secrets in)."""
        if self.protocol == "PLAINTEXT":
            return {}
        env: dict[str, str] = {"LOOPGUARD_SECURITY_PROTOCOL": self.protocol}
        if self.is_sasl:
            env["LOOPGUARD_SASL_MECHANISM"] = self.mechanism or ""
            env["LOOPGUARD_SASL_USERNAME"] = self.username or ""
            env["LOOPGUARD_SASL_PASSWORD"] = (
                self.password.get_secret_value() if self.password else ""
            )
        files = {"CA": self.ca_file, "CERT": self.cert_file, "KEY": self.key_file}
        env |= {f"LOOPGUARD_SSL_{name}_FILE": str(path) for name, path in files.items() if path}
        if self.key_password is not None:
            env["LOOPGUARD_SSL_KEY_PASSWORD"] = self.key_password.get_secret_value()
        if not self.check_hostname:
            env["LOOPGUARD_SSL_CHECK_HOSTNAME"] = "false"
        return env

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin)."""
        if self.protocol == "PLAINTEXT":
            return {}
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.is_tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.is_sasl:
            kwargs["sasl_mechanism"] = self.mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = (
                self.password.get_secret_value() if self.password else ""
            )
        return kwargs

    def faust_credentials(self) -> Any:
        """Faust's `broker_credentials` (SASLCredentials or SSLCredentials), or None."""
        if self.protocol == "PLAINTEXT":
            return None
        import faust  # here: the runtime client uses this module without Faust

        context = self.ssl_context()
        if self.is_sasl:
            # Faust picks SASL_SSL when a context is given, SASL_PLAINTEXT otherwise.
            return faust.SASLCredentials(
                username=self.username,
                password=self.password.get_secret_value() if self.password else "",
                mechanism=self.mechanism,
                ssl_context=context,
            )
        return faust.SSLCredentials(context)

    def describe(self) -> str:
        """One line for logs and errors: protocol, mechanism, user; never the password."""
        parts: list[str] = [self.protocol]
        if self.is_sasl:
            parts.append(f"{self.mechanism} as {self.username!r}")
        if self.is_tls:
            parts.append(f"CA {self.ca_file}" if self.ca_file else "system CAs")
        return ", ".join(parts)


PLAINTEXT: Final = ClientSecurity()

_AUTHORIZATION_CODES: Final = {29: "topic", 30: "group", 31: "cluster", 53: "transactional id"}


def authorization_refusal(code: int, what: str, security: ClientSecurity) -> BrokerRefused | None:
    """A BrokerRefused for Kafka's *_AUTHORIZATION_FAILED error codes, else None."""
    kind = _AUTHORIZATION_CODES.get(code)
    if kind is None:
        return None
    return BrokerRefused(
        f"the broker refused {what}: {kind} authorization failed for "
        f"{security.describe()} (missing ACL; see docs/security.md)"
    )


async def diagnose_refusal(
    bootstrap: str | list[str], security: ClientSecurity
) -> BrokerRefused | None:
    """Why a client could not bootstrap, when the broker refused it (else None).

    aiokafka logs the cause of a failed bootstrap and raises a bare "Unable to bootstrap",
    so one direct connection to each bootstrap server finds it again.
    """
    hosts = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
    return await _first_refusal(hosts, security)


async def _first_refusal(hosts: list[str], security: ClientSecurity) -> BrokerRefused | None:
    from aiokafka.errors import AuthenticationFailedError, KafkaError, SaslAuthenticationFailed

    # Its socket closed before this returns, refused or not (streams/kafka/connection.py).
    from loopguard_fleet.streams.kafka.connection import broker_connection

    for server in hosts:
        try:
            async with broker_connection(server, security):
                pass
        except (SaslAuthenticationFailed, AuthenticationFailedError):
            return BrokerRefused(
                f"broker {server} refused the login as {security.describe()}: "
                "wrong user name or password (LOOPGUARD_SASL_USERNAME, LOOPGUARD_SASL_PASSWORD)"
            )
        except ssl.SSLCertVerificationError as exc:
            return BrokerRefused(
                f"broker {server}: its TLS certificate is not trusted ({exc.verify_message}; "
                f"{security.describe()}): set LOOPGUARD_SSL_CA_FILE to the CA that signed it"
            )
        except ssl.SSLError as exc:
            return BrokerRefused(f"broker {server}: TLS handshake failed ({exc.reason}); "
                                 f"is its listener {security.protocol}?")  # fmt: skip
        except (KafkaError, OSError, TimeoutError):
            continue  # unreachable: a connection problem, retried by the caller
    return None
