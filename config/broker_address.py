"""Broker addresses: one format everywhere, `host:port[,host:port…]`, `kafka://` optional.

The worker (`LOOPGUARD_BROKER`), `loopguard up`, `replay|explain|compare --broker` and
`RuntimeClient` all read an address through `bootstrap_servers`; `broker_url` gives the
`kafka://` form Faust wants. `;` separates hosts too (Faust's own URL form).
"""

from __future__ import annotations

import re
from typing import Final

from loopguard_fleet.detectors.errors import LoopGuardError

__all__ = ["ADDRESS_FORMAT", "BrokerAddressError", "bootstrap_servers", "broker_url"]

ADDRESS_FORMAT: Final = "host:port[,host:port…] (kafka:// optional)"
_SCHEMES: Final = ("kafka://", "aiokafka://")
_HOST_PORT: Final = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$")


class BrokerAddressError(LoopGuardError, ValueError):
    """A broker address that is not `host:port[,host:port…]`."""

    # A ValueError too: pydantic turns it into a settings error with the field's name.


def bootstrap_servers(address: str | list[str] | tuple[str, ...]) -> list[str]:
    """The `host:port` list of a broker address; raise BrokerAddressError naming the culprit."""
    texts = [address] if isinstance(address, str) else list(address)
    hosts: list[str] = []
    for text in texts:
        rest = text.strip()
        lowered = rest.lower()
        scheme = next((s for s in _SCHEMES if lowered.startswith(s)), None)
        if scheme is not None:
            rest = rest[len(scheme) :].rstrip("/")
        elif "://" in rest:
            raise BrokerAddressError(
                f"broker address {text!r}: unknown scheme {rest.split('://')[0]!r}; "
                f"use {ADDRESS_FORMAT}"
            )
        for host in (h.strip() for h in re.split(r"[;,]", rest)):
            if not host:
                continue
            match = _HOST_PORT.match(host)
            if match is None or not 0 < int(match.group(1)) < 65_536:
                raise BrokerAddressError(
                    f"broker address {text!r}: {host!r} is not host:port; use {ADDRESS_FORMAT}"
                )
            hosts.append(host)
    if not hosts:
        raise BrokerAddressError(f"broker address {address!r} names no host; use {ADDRESS_FORMAT}")
    return hosts


def broker_url(address: str | list[str] | tuple[str, ...]) -> str:
    """The `kafka://host:port;host:port` URL Faust takes, from any accepted address."""
    return "kafka://" + ";".join(bootstrap_servers(address))
