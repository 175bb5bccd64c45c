"""Ports picked for the brokers and workers LoopGuard starts (streams/embedded/child.py)."""

from __future__ import annotations

from loopguard_fleet.streams.embedded.child import free_ports


def test_ports_picked_together_are_distinct() -> None:
    # Picked one by one, the OS may hand the same port out twice (a worker's web port once
    # equalled its own broker's); picked together, never.
    ports = free_ports(64)
    assert len(set(ports)) == 64
    assert all(1024 <= port <= 65535 for port in ports)
