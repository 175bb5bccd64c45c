"""Service settings: the `LOOPGUARD_*` environment, validated once at startup.

Only the composition root (`streams/main.py`) builds `Settings()` from the environment; tests
and tools pass keyword arguments. Every invalid field is reported at once (pydantic collects
all errors), so a misconfigured worker fails before it touches the broker.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field, FilePath, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from loopguard_fleet.config.broker_address import bootstrap_servers, broker_url
from loopguard_fleet.config.defaults import (
    OTLP_DEDUPE_MEMORY_S,
    OTLP_REORDER_WINDOW_S,
    OTLP_RUN_ID_KEYS,
    TOPIC_COMPACTIONS,
    TOPIC_CONTROL,
    TOPIC_DEAD_LETTER,
    TOPIC_TOOL_CALLS,
)
from loopguard_fleet.detectors.profiles import CONFIGURABLE, Semantics
from loopguard_fleet.detectors.values import DEFAULT_CHANNEL_TOOLS


def parse_names(text: str) -> tuple[str, ...]:
    """A list of names as a list-valued setting takes it (`LOOPGUARD_CHANNEL_TOOLS`, and the
    audits' flags of the same lists): a JSON list of strings, or comma-separated names."""
    text = text.strip()
    if not text.startswith("["):
        return tuple(item.strip() for item in text.split(",") if item.strip())
    names = json.loads(text)  # a JSONDecodeError is a ValueError: the caller reports it
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"not a JSON list of strings: {text[:80]}")
    return tuple(names)


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_APP_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")

LogLevel = Literal["debug", "info", "warning", "error", "critical"]
Store = Literal["rocksdb://", "memory://"]
ProcessingGuarantee = Literal["at_least_once", "exactly_once"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

#: Commit interval at-least-once (s): a checkpoint at 1,000 busy runs is a few hundred ms that
#: verdicts wait behind, so at Faust's 2.8 s it set the verdict tail (docs/performance.md).
#: Kafka Streams' own default at-least-once is 30 s; a crash costs ≤ 10 s of events read again.
COMMIT_INTERVAL_AT_LEAST_ONCE_S: Final = 10.0
#: Commit interval under exactly_once (s): Faust's default. Verdicts are read committed, so
#: they wait for the commit: a longer interval would delay every one of them, a shorter one
#: (down to Kafka Streams' 0.1 s) cuts that wait for more commits (docs/reliability.md,
#: "Exactly-once and the commit interval").
COMMIT_INTERVAL_EXACTLY_ONCE_S: Final = 2.8


class KafkaSecuritySettings(BaseSettings):
    """How every LoopGuard client authenticates to Kafka: TLS, SASL (docs/security.md).

    `Settings` inherits these fields; tools that connect without being a worker (`replay
    --topic`) build this part alone. `streams/kafka/security.py` turns it into client options.
    """

    # hide_input_in_errors: a cross-field error's input is every field, the password too.
    model_config = SettingsConfigDict(
        env_prefix="LOOPGUARD_",
        extra="ignore",
        frozen=True,
        validate_default=True,
        hide_input_in_errors=True,
    )

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None  # never printed: repr and errors show '**********'
    ssl_ca_file: FilePath | None = None  # None: the system's trusted CAs
    ssl_cert_file: FilePath | None = None  # client certificate (mutual TLS) ...
    ssl_key_file: FilePath | None = None  # ... and its private key (PEM)
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        """Accept `sasl_ssl` as well as `SASL_SSL`, `scram-sha-512` as well as the upper case."""
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _security_consistent(self) -> KafkaSecuritySettings:
        """SASL needs a mechanism and credentials; TLS files need a TLS protocol; all listed."""
        problems: list[str] = []
        protocol = self.security_protocol
        is_sasl = protocol.startswith("SASL_")
        is_tls = protocol in ("SSL", "SASL_SSL")
        if is_sasl:
            missing = [
                f"LOOPGUARD_{name.upper()}"
                for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                if getattr(self, name) in (None, "")
            ]
            if missing:
                problems.append(f"security_protocol={protocol} needs {', '.join(missing)}")
        else:
            given = [
                f"LOOPGUARD_{name.upper()}"
                for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                if getattr(self, name) is not None
            ]
            if given:
                problems.append(
                    f"{', '.join(given)} set but security_protocol={protocol} uses no SASL "
                    "(use SASL_SSL or SASL_PLAINTEXT)"
                )
        tls_files = [
            f"LOOPGUARD_{name.upper()}"
            for name in ("ssl_ca_file", "ssl_cert_file", "ssl_key_file", "ssl_key_password")
            if getattr(self, name) is not None
        ]
        if tls_files and not is_tls:
            problems.append(
                f"{', '.join(tls_files)} set but security_protocol={protocol} uses no TLS "
                "(use SSL or SASL_SSL)"
            )
        if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
            problems.append(
                "mutual TLS needs both LOOPGUARD_SSL_CERT_FILE and LOOPGUARD_SSL_KEY_FILE"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Settings(KafkaSecuritySettings):
    """Everything a LoopGuard worker needs to know about its surroundings."""

    model_config = SettingsConfigDict(
        env_prefix="LOOPGUARD_",
        extra="forbid",  # (the security fields come from KafkaSecuritySettings)
        frozen=True,
        validate_default=True,
    )

    # Broker and topics.
    broker: str = "kafka://127.0.0.1:9092"
    partitions: int = Field(default=4, ge=1, le=10_000)
    replication_factor: int = Field(default=1, ge=1, le=32)
    topic_tool_calls: str = TOPIC_TOOL_CALLS
    topic_compactions: str = TOPIC_COMPACTIONS
    topic_control: str = TOPIC_CONTROL
    topic_dead_letter: str = TOPIC_DEAD_LETTER
    # The OTLP traces topic the live bridge reads (docs/audit.md); None or "": the bridge is off.
    topic_otlp_spans: str | None = None
    app_id: str = "loopguard"
    broker_wait_seconds: float = Field(default=60.0, ge=0)  # retry an unreachable broker at start

    # Consumer timings (Tansu joins a group in about half the session timeout).
    fetch_max_wait_ms: int = Field(default=100, ge=0, le=60_000)
    # How long unread fetched records of one partition hold back fetches of the others on
    # the same broker (aiokafka's 100 ms; streams/worker/faust/internals.py says why 5).
    fetch_prefetch_backoff_ms: int = Field(default=5, ge=0, le=60_000)
    # The most records one poll hands the worker (Faust's broker_max_poll_records); 0: one
    # batch, LOOPGUARD_BATCH_MAX_EVENTS. Fewer records read ahead: less memory when catching
    # up on a backlog, and a faster worker (docs/performance.md).
    fetch_max_records: int = Field(default=0, ge=0, le=1_000_000)
    faust_fast_path: bool = True  # off: Faust's own drain loop (docs/performance.md)
    # off: the fast path delivers record by record (streams/worker/faust/bulk.py)
    faust_bulk_delivery: bool = True
    faust_consumer_thread: bool = False  # on: Faust's consumer thread, not the worker's loop
    session_timeout_ms: int = Field(default=6_000, ge=1_000, le=300_000)
    heartbeat_ms: int = Field(default=1_000, ge=100, le=60_000)
    rebalance_timeout_ms: int = Field(default=6_000, ge=1_000, le=600_000)
    recovery_consistency_check: bool = True
    # Seconds between offset commits, and so between checkpoints (Faust's
    # broker_commit_interval; a commit also follows every 10,000 acked events). Unset: by the
    # guarantee (`commit_interval`). Longer: each changed run written once per interval, a
    # lower verdict tail under load; more events read again after a crash, and under
    # exactly_once verdicts wait longer (docs/performance.md, docs/reliability.md).
    commit_interval_seconds: float | None = Field(default=None, gt=0, le=3_600)
    # Faust's guarantee; exactly_once needs broker transactions (Apache Kafka; Tansu has none).
    processing_guarantee: ProcessingGuarantee = "at_least_once"

    # Run-state table.
    store: Store = "rocksdb://"
    data_dir: Path = Path("data")
    run_idle_ttl_seconds: float = Field(default=1_800.0, gt=0)
    run_cache_idle_seconds: float = Field(default=60.0, ge=0)
    # Runs whose states stay objects; the others are held packed (streams/processing/hot.py,
    # docs/performance.md); 0 keeps every cached run as objects.
    run_cache_hot_runs: int = Field(default=1_024, ge=0)
    # glibc: malloc_trim after each checkpoint and a fixed mmap threshold
    # (streams/worker/memory.py); no-op elsewhere.
    malloc_trim: bool = True

    # Input handling.
    max_message_bytes: int = Field(default=1_048_576, ge=1)
    dead_letter_prefix_bytes: int = Field(default=256, ge=0)
    batch_max_events: int = Field(default=2_000, ge=1, le=100_000)
    batch_within_ms: int = Field(default=5, ge=1, le=10_000)

    # Policy.
    policy_file: FilePath | None = None
    policy_topic: str | None = None  # follow this policy topic (docs/policy.md); None: do not
    channel_tools: Annotated[tuple[str, ...], NoDecode] = tuple(sorted(DEFAULT_CHANNEL_TOOLS))
    semantics: Semantics = CONFIGURABLE  # which OpenClaw release's rules decide (docs/semantics.md)

    # The live OTLP bridge's mapping and window (docs/audit.md); the audits' --otlp-* flags.
    otlp_run_id_keys: Annotated[tuple[str, ...], NoDecode] = OTLP_RUN_ID_KEYS  # (): trace id
    otlp_openinference: bool = False  # also read OpenInference TOOL spans
    otlp_privacy: bool = False  # hash arguments and results at the bridge
    otlp_reorder_window_seconds: float = Field(default=OTLP_REORDER_WINDOW_S, ge=0, le=3_600)
    otlp_dedupe_memory_seconds: float = Field(default=OTLP_DEDUPE_MEMORY_S, gt=0)

    # Web (metrics and health) and logging.
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=6066, ge=1, le=65_535)
    log_level: LogLevel = "info"

    @field_validator("broker")
    @classmethod
    def _broker_is_an_address(cls, value: str) -> str:
        """Accept `host:port[,host:port…]` with or without `kafka://`; keep Faust's URL form."""
        return broker_url(value)  # BrokerAddressError is a ValueError: pydantic reports it

    @field_validator(
        "topic_tool_calls",
        "topic_compactions",
        "topic_control",
        "topic_dead_letter",
        "policy_topic",
        "topic_otlp_spans",
    )
    @classmethod
    def _topic_name_is_legal(cls, value: str | None) -> str | None:
        """Kafka topic names: 1-249 of letters, digits, '.', '_' and '-'."""
        if value is not None and not _TOPIC_NAME.match(value):
            raise ValueError(f"topic name {value!r} must be 1-249 of [A-Za-z0-9._-]")
        return value

    @field_validator("topic_otlp_spans", mode="before")
    @classmethod
    def _empty_otlp_topic_is_none(cls, value: object) -> object:
        """An empty `LOOPGUARD_TOPIC_OTLP_SPANS` turns the bridge off, as an unset one."""
        return None if value == "" else value

    @field_validator("app_id")
    @classmethod
    def _app_id_is_legal(cls, value: str) -> str:
        """The app id prefixes the changelog topic, so it obeys topic-name rules."""
        if not _APP_ID.match(value):
            raise ValueError(f"app id {value!r} must be 1-200 of [A-Za-z0-9._-]")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        """Accept `INFO` as well as `info`; `warn` is refused (Faust turns it into debug)."""
        return value.lower() if isinstance(value, str) else value

    @field_validator("channel_tools", "otlp_run_id_keys", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        """Accept a JSON list or a comma-separated string from the environment."""
        return parse_names(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """Cross-field rules: distinct topics, sane timings, prefix within the size limit."""
        problems: list[str] = []
        topics = [
            self.topic_tool_calls,
            self.topic_compactions,
            self.topic_control,
            self.topic_dead_letter,
        ]
        if self.policy_topic is not None:
            topics.append(self.policy_topic)
        if self.topic_otlp_spans is not None:
            topics.append(self.topic_otlp_spans)
        if len(set(topics)) != len(topics):
            problems.append(f"topic names must be distinct, got {topics}")
        if self.heartbeat_ms * 3 > self.session_timeout_ms:
            problems.append(
                f"heartbeat_ms={self.heartbeat_ms} must be at most a third of "
                f"session_timeout_ms={self.session_timeout_ms}"
            )
        if self.dead_letter_prefix_bytes > self.max_message_bytes:
            problems.append(
                f"dead_letter_prefix_bytes={self.dead_letter_prefix_bytes} exceeds "
                f"max_message_bytes={self.max_message_bytes}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def bootstrap_servers(self) -> list[str]:
        """The broker address as aiokafka's `host:port` list."""
        return bootstrap_servers(self.broker)

    @property
    def commit_interval(self) -> float:
        """Seconds between offset commits: the setting, else the guarantee's default."""
        if self.commit_interval_seconds is not None:
            return self.commit_interval_seconds
        if self.processing_guarantee == "exactly_once":
            return COMMIT_INTERVAL_EXACTLY_ONCE_S
        return COMMIT_INTERVAL_AT_LEAST_ONCE_S

    @property
    def input_topics(self) -> tuple[str, str]:
        """The two co-partitioned input topics."""
        return (self.topic_tool_calls, self.topic_compactions)

    @property
    def worker_data_dir(self) -> Path:
        """This worker's own state directory (two workers on one host differ by web port)."""
        return self.data_dir / f"{self.app_id}-{self.web_port}"


# Names under LOOPGUARD_ that are not settings: the test suites' and tools' own switches.
_NOT_SETTINGS_PREFIXES = ("LOOPGUARD_TEST_", "LOOPGUARD_DIFFERENTIAL_")


def setting_names() -> list[str]:
    """Every LOOPGUARD_* variable a worker reads, sorted."""
    return sorted(f"LOOPGUARD_{name.upper()}" for name in Settings.model_fields)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One message per LOOPGUARD_* variable that names no setting, with a did-you-mean."""
    known = setting_names()
    problems = []
    for name in sorted(environ):
        if not name.startswith("LOOPGUARD_") or name in known:
            continue
        if name.startswith(_NOT_SETTINGS_PREFIXES):
            continue
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {near[0]}?" if near else " (`loopguard worker --help` lists them)"
        problems.append(f"{name}: not a LoopGuard setting{hint}")
    return problems
