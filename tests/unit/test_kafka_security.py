"""Kafka security settings: validated together, turned into client options, never printed."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import faust
import pytest
from pydantic import SecretStr, ValidationError

from loopguard_fleet.config.settings import KafkaSecuritySettings, Settings
from loopguard_fleet.streams.cli_errors import EXIT_BROKER_REFUSED, describe
from loopguard_fleet.streams.kafka.security import (
    BrokerRefused,
    ClientSecurity,
    authorization_refusal,
)

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "s3cr3t-hunter2-Zq"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LOOPGUARD_"):
            monkeypatch.delenv(name)


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    """A CA certificate file (the test's own: any PEM certificate loads)."""
    from loopguard_fleet.streams.embedded.kafka_security import make_ca

    return make_ca(tmp_path / "ca")


def test_the_default_is_plaintext_with_hostname_verification_on() -> None:
    s = Settings()
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "PLAINTEXT",
        None,
        None,
        None,
    )
    assert s.ssl_check_hostname is True
    assert ClientSecurity.from_settings(s).aiokafka_kwargs() == {}
    assert ClientSecurity.from_settings(s).faust_credentials() is None


def test_the_environment_sets_every_security_field(
    monkeypatch: pytest.MonkeyPatch, ca_file: Path
) -> None:
    env = {
        "LOOPGUARD_SECURITY_PROTOCOL": "sasl_ssl",
        "LOOPGUARD_SASL_MECHANISM": "scram-sha-256",
        "LOOPGUARD_SASL_USERNAME": "loopguard-worker",
        "LOOPGUARD_SASL_PASSWORD": PASSWORD,
        "LOOPGUARD_SSL_CA_FILE": str(ca_file),
        "LOOPGUARD_SSL_CHECK_HOSTNAME": "false",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "loopguard-worker",
    )
    assert s.sasl_password is not None and s.sasl_password.get_secret_value() == PASSWORD
    assert (s.ssl_ca_file, s.ssl_check_hostname) == (ca_file, False)
    assert ClientSecurity.from_env() == ClientSecurity.from_settings(s)


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        pytest.param(
            {"security_protocol": "SASL_SSL"},
            [
                "security_protocol=SASL_SSL needs LOOPGUARD_SASL_MECHANISM, "
                "LOOPGUARD_SASL_USERNAME, LOOPGUARD_SASL_PASSWORD"
            ],
            id="sasl-without-credentials",
        ),
        pytest.param(
            {"security_protocol": "PLAINTEXT", "sasl_username": "u", "sasl_password": PASSWORD},
            [
                "LOOPGUARD_SASL_USERNAME, LOOPGUARD_SASL_PASSWORD set but "
                "security_protocol=PLAINTEXT uses no SASL"
            ],
            id="credentials-without-sasl",
        ),
        pytest.param(
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
             "sasl_username": "u", "sasl_password": PASSWORD, "ssl_cert_file": "CA"},
            [
                "LOOPGUARD_SSL_CERT_FILE set but security_protocol=SASL_PLAINTEXT uses no TLS",
                "mutual TLS needs both LOOPGUARD_SSL_CERT_FILE and LOOPGUARD_SSL_KEY_FILE",
            ],
            id="tls-files-without-tls-all-listed",
        ),
    ],
)  # fmt: skip
def test_inconsistent_security_settings_are_all_listed(
    fields: dict[str, str], errors: list[str], ca_file: Path
) -> None:
    values = {k: (str(ca_file) if v == "CA" else v) for k, v in fields.items()}
    with pytest.raises(ValidationError) as info:
        KafkaSecuritySettings(**values)
    text = str(info.value)
    assert all(e in text for e in errors), text
    assert PASSWORD not in text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("security_protocol", "TLS", id="protocol"),
        pytest.param("sasl_mechanism", "GSSAPI", id="mechanism"),
        pytest.param("ssl_ca_file", "/no/such/ca.pem", id="missing-ca-file"),
    ],
)
def test_invalid_security_values_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


def test_sasl_ssl_becomes_aiokafka_options_with_a_verifying_tls_context(ca_file: Path) -> None:
    sec = ClientSecurity(
        protocol="SASL_SSL",
        mechanism="SCRAM-SHA-512",
        username="agent-runtime",
        password=SecretStr(PASSWORD),
        ca_file=ca_file,
    )
    kwargs = sec.aiokafka_kwargs()
    context = kwargs.pop("ssl_context")
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "agent-runtime",
        "sasl_plain_password": PASSWORD,
    }
    assert isinstance(context, ssl.SSLContext)
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)


def test_hostname_verification_is_off_only_on_request(ca_file: Path) -> None:
    context = ClientSecurity(protocol="SSL", ca_file=ca_file, check_hostname=False).ssl_context()
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, False)


def test_faust_gets_the_same_credentials(ca_file: Path) -> None:
    sasl = ClientSecurity(
        protocol="SASL_SSL", mechanism="SCRAM-SHA-256", username="w",
        password=SecretStr(PASSWORD), ca_file=ca_file,
    ).faust_credentials()  # fmt: skip
    assert isinstance(sasl, faust.SASLCredentials)
    assert (sasl.protocol.value, sasl.mechanism.value, sasl.username, sasl.password) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "w",
        PASSWORD,
    )
    plain_sasl = ClientSecurity(
        protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="w", password=SecretStr("x")
    ).faust_credentials()
    assert plain_sasl.protocol.value == "SASL_PLAINTEXT" and plain_sasl.ssl_context is None
    tls = ClientSecurity(protocol="SSL", ca_file=ca_file).faust_credentials()
    assert isinstance(tls, faust.SSLCredentials) and isinstance(tls.context, ssl.SSLContext)


def test_no_description_of_the_settings_shows_the_password() -> None:
    s = Settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
        sasl_password=PASSWORD, ssl_check_hostname=True,
    )  # fmt: skip
    sec = ClientSecurity.from_settings(s)
    for text in (repr(s), str(s), repr(sec), str(sec), sec.describe(), s.model_dump_json()):
        assert PASSWORD not in text


def test_an_invalid_setting_beside_a_password_is_reported_without_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env |= {
        "LOOPGUARD_SECURITY_PROTOCOL": "PLAINTEXT",  # SASL fields set: a cross-field error
        "LOOPGUARD_SASL_USERNAME": "u",
        "LOOPGUARD_SASL_PASSWORD": PASSWORD,
        "LOOPGUARD_DATA_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "uses no SASL" in proc.stderr
    assert PASSWORD not in proc.stderr + proc.stdout


def test_a_refusal_is_one_line_with_exit_77() -> None:
    sec = ClientSecurity(
        protocol="SASL_SSL",
        mechanism="PLAIN",
        username="agent-runtime",
        password=SecretStr(PASSWORD),
    )
    refused = authorization_refusal(29, "creating topic 'x'", sec)
    assert isinstance(refused, BrokerRefused)
    message, code = describe(refused)
    assert code == EXIT_BROKER_REFUSED == 77
    assert message == (
        "the broker refused creating topic 'x': topic authorization failed for SASL_SSL, "
        "PLAIN as 'agent-runtime', system CAs (missing ACL; see docs/security.md)"
    )
    assert authorization_refusal(0, "x", sec) is None


def test_replay_reports_invalid_security_settings_in_one_line_without_the_password() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env |= {"LOOPGUARD_SECURITY_PROTOCOL": "SASL_SSL", "LOOPGUARD_SASL_PASSWORD": PASSWORD}
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay", "--topic", "t",
         "--broker", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        "loopguard replay: invalid Kafka security settings: security_protocol=SASL_SSL needs "
        "LOOPGUARD_SASL_MECHANISM, LOOPGUARD_SASL_USERNAME\n"
    )


@pytest.mark.parametrize("check_hostname", [True, False])
def test_settings_env_gives_a_worker_the_same_security(
    monkeypatch: pytest.MonkeyPatch, ca_file: Path, check_hostname: bool
) -> None:
    security = ClientSecurity(
        protocol="SASL_SSL",
        mechanism="SCRAM-SHA-512",
        username="loopguard-worker",
        password=SecretStr(PASSWORD),
        ca_file=ca_file,
        check_hostname=check_hostname,
    )
    for name, value in security.settings_env().items():
        monkeypatch.setenv(name, value)
    assert ClientSecurity.from_env() == security


def test_plaintext_needs_no_environment() -> None:
    assert ClientSecurity().settings_env() == {}
