"""The commit gate (streams/worker/commit_gate.py): a checkpoint waits for every record sent
through it before the take, however many were sent, and a failed one is never forgotten."""

from __future__ import annotations

import asyncio

import pytest

from loopguard_fleet.streams.processing.outbox import OutputLost
from loopguard_fleet.streams.worker.commit_gate import CommitGate


async def nothing_to_drain() -> None:
    """No Faust producer buffer here."""


async def test_a_failed_record_among_thousands_delivered_stops_the_commit() -> None:
    loop = asyncio.get_running_loop()
    gate = CommitGate(nothing_to_drain)
    failed: asyncio.Future[None] = loop.create_future()
    failed.set_exception(OSError("broker gone"))
    gate.track(failed)
    for _ in range(10_000):  # delivered ones are pruned on the way; the failure stays
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        gate.track(done)
    gate.read("t", 0, 41)
    limits, delivery = gate.take()
    assert limits == {("t", 0): 42}
    with pytest.raises(OutputLost):
        await delivery.wait()


async def test_a_take_waits_only_for_what_was_sent_before_it() -> None:
    loop = asyncio.get_running_loop()
    gate = CommitGate(nothing_to_drain)
    before: asyncio.Future[None] = loop.create_future()
    gate.track(before)
    _, delivery = gate.take()
    gate.track(loop.create_future())  # sent after the take: the next checkpoint's
    waiting = asyncio.ensure_future(delivery.wait())
    await asyncio.sleep(0)
    held = waiting.done()
    before.set_result(None)
    await asyncio.wait_for(waiting, timeout=5)
    assert held is False
