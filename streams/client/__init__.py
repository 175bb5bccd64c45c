"""The runtime SDK: agent runtimes publish tool events and receive verdicts and commands.

Import from here (`from loopguard_fleet.streams.client import RuntimeClient`); the names below are
the whole public surface (tests/unit/test_client_surface.py).
"""

from loopguard_fleet.streams.client.run_events import MISSING, Missing, RunEvents
from loopguard_fleet.streams.client.runtime import (
    ClientError,
    RunHandle,
    RuntimeClient,
    Topics,
    VerdictReply,
)
from loopguard_fleet.streams.kafka.security import ClientSecurity  # TLS/SASL (docs/security.md)

__all__ = [
    "MISSING",
    "ClientError",
    "ClientSecurity",
    "Missing",
    "RunEvents",
    "RunHandle",
    "RuntimeClient",
    "Topics",
    "VerdictReply",
]
