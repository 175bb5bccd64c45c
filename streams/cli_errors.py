"""Exit codes of the `loopguard` command and the one-line report of every failure.

A failure prints one line, `loopguard <command>: <what went wrong>`, on stderr and exits with
a documented code (docs/audit.md, "Exit codes"); `--debug` shows the traceback instead. The
codes follow BSD sysexits where one fits, so shell scripts can tell causes apart.
"""

from __future__ import annotations

import errno
import sys
from typing import Final

from loopguard_fleet.streams.errors import StreamError

__all__ = [
    "EXIT_BROKER_REFUSED",
    "EXIT_BROKER_UNREACHABLE",
    "EXIT_CANNOT_WRITE",
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NO_EVENTS",
    "EXIT_NO_INPUT",
    "EXIT_OK",
    "EXIT_POLICY",
    "EXIT_USAGE",
    "CliError",
    "describe",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # the command's answer is "no": invalid policy, run not found
EXIT_USAGE: Final = 2  # a bad flag or value; `replay --strict` stopped at a malformed line
EXIT_NO_EVENTS: Final = 65  # EX_DATAERR: the input had lines, and not one was an event
EXIT_NO_INPUT: Final = 66  # EX_NOINPUT: missing/unreadable file, corrupt gzip, missing topic
EXIT_BROKER_UNREACHABLE: Final = 69  # EX_UNAVAILABLE: no broker answered in time
EXIT_BROKER_REFUSED: Final = 77  # EX_NOPERM: wrong password, untrusted CA, missing ACL
EXIT_INTERNAL: Final = 70  # EX_SOFTWARE: a bug; rerun with --debug and report it
EXIT_CANNOT_WRITE: Final = 73  # EX_CANTCREAT: --output / --html cannot be written
EXIT_POLICY: Final = 78  # EX_CONFIG: the policy file is missing or invalid
EXIT_INTERRUPTED: Final = 130  # Ctrl-C (128 + SIGINT)


class CliError(StreamError):
    """A failure with its one-line message and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code of any failure of a command."""
    from loopguard_fleet.config import PolicyError
    from loopguard_fleet.streams.audit.inputs import InputError
    from loopguard_fleet.streams.kafka.broker_wait import BrokerUnreachable
    from loopguard_fleet.streams.kafka.security import BrokerRefused

    if isinstance(exc, CliError):
        return exc.message, exc.code
    if isinstance(exc, InputError):
        return str(exc), EXIT_NO_INPUT
    if isinstance(exc, PolicyError):
        first = exc.issues[0] if exc.issues else None
        more = f" (+{len(exc.issues) - 1} more; see `loopguard policy check`)"
        where = f"{first.path}: " if first is not None and first.path else ""
        text = f"invalid policy: {where}{first.message if first else exc}"
        return text + (more if len(exc.issues) > 1 else ""), EXIT_POLICY
    if isinstance(exc, BrokerRefused):  # before BrokerError: its message names the cause
        return str(exc), EXIT_BROKER_REFUSED
    if isinstance(exc, BrokerUnreachable):
        return str(exc), EXIT_BROKER_UNREACHABLE
    if _is_kafka_connection_error(exc):
        return f"broker unreachable: {exc}", EXIT_BROKER_UNREACHABLE
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"cannot write: {exc.strerror}", EXIT_CANNOT_WRITE
    if type(exc).__name__ == "BrokerError":  # streams/kafka/admin.py: a topic that does not exist
        return str(exc), EXIT_NO_INPUT
    return (
        f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
        EXIT_INTERNAL,
    )


def _is_kafka_connection_error(exc: BaseException) -> bool:
    kafka = sys.modules.get("aiokafka.errors")
    return kafka is not None and isinstance(exc, kafka.KafkaConnectionError)
