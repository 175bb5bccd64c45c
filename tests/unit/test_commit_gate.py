"""The commit gate (streams/worker/commit_gate.py): a checkpoint waits for every record sent
through it before the take, however many were sent, and a failed one is never forgotten."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.replay import MemoryStore
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import OutputLost
from loopguard_fleet.streams.worker.agent import _FaustOutputs
from loopguard_fleet.streams.worker.commit_gate import CommitGate
from tests.wire import InputRecord, RunScript


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


class _Topic:
    """A Faust channel's name, which is all the gate reads of it under exactly-once."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get_topic_name(self) -> str:
        return self.name

    def send_soon(self, **kwargs: object) -> asyncio.Future[None]:
        raise AssertionError("under exactly-once nothing goes through Faust's buffer")


class _Transactions:
    """Transactional producers by source partition, as the worker's (`transactional_sender`)."""

    def __init__(self, owned: set[tuple[str, int]]) -> None:
        self.owned = owned
        self.sent: list[tuple[tuple[str, int], str, bytes | None, int | None]] = []

    async def __call__(
        self,
        source: tuple[str, int],
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
    ) -> asyncio.Future[None] | None:
        if source not in self.owned:
            return None
        self.sent.append((source, topic, key, partition))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def test_exactly_once_holds_each_record_to_the_take_and_sends_it_from_its_source() -> None:
    sends = _Transactions({("in", 0), ("in", 1)})
    gate = CommitGate(nothing_to_drain, sends)
    fleet = _Topic("fleet")
    gate.send(fleet, b"sig", b"v", source=("in", 0))  # keyed: any partition, another owner's
    gate.send(fleet, b"tick", b"v", 3, source=("in", 1))
    assert sends.sent == []  # nothing before the checkpoint
    _, delivery = gate.take()
    gate.send(fleet, b"later", b"v", source=("in", 0))  # after the take: the next one's
    await delivery.wait()
    assert sends.sent == [(("in", 0), "fleet", b"sig", None), (("in", 1), "fleet", b"tick", 3)]
    _, following = gate.take()
    await following.wait()
    assert sends.sent[-1] == (("in", 0), "fleet", b"later", None)


async def test_exactly_once_drops_what_partitions_that_moved_held() -> None:
    sends = _Transactions({("in", 0)})
    gate = CommitGate(nothing_to_drain, sends)
    fleet = _Topic("fleet")
    gate.send(fleet, b"a", b"v", source=("in", 0))
    gate.send(fleet, b"b", b"v", source=("in", 1))
    gate.send(fleet, b"c", b"v", source=("in", 2))
    gate.forget({2})  # revoked or assigned: read again from its committed offset
    _, delivery = gate.take()
    await delivery.wait()  # ("in", 1) has no transaction any more (revoked meanwhile)
    assert [s[2] for s in sends.sent] == [b"a"]
    assert delivery.dropped == 1


async def test_exactly_once_sends_a_decision_in_the_transaction_of_the_event_it_came_from() -> None:
    sends = _Transactions({("calls", 3)})
    gate = CommitGate(nothing_to_drain, sends)
    driver, outbox = _worker_driver(gate)
    run = RunScript("r")
    call = orjson.dumps(run.call("read", {"p": 1}, want_verdict=True))
    assert driver.apply([InputRecord("calls", 3, 41, 1.0, b"r", call)]) is True  # a verdict
    assert sends.sent == []  # held to the checkpoint
    _, delivery = gate.take()
    await delivery.wait()
    assert sends.sent == [(("calls", 3), "control", b"r", None)]
    assert outbox.added == []  # nothing through the plain producer's outbox


class _NoOutbox:
    """The worker's outbox, which exactly-once leaves unused."""

    def __init__(self) -> None:
        self.added: list[bytes] = []

    def add(self, key: bytes, value: bytes) -> None:
        self.added.append(value)


class _Wiring:
    """The two topics `_FaustOutputs` reads of the worker's wiring."""

    control = _Topic("control")
    dead_letter = _Topic("dead-letter")


def _worker_driver(gate: CommitGate) -> tuple[RunDriver, _NoOutbox]:
    outbox = _NoOutbox()
    outputs = _FaustOutputs(outbox, _Wiring(), gate, transactional=True)  # type: ignore[arg-type]  # the parts it reads
    policy = load_policy({"tools": {"loopDetection": {"enabled": True}}})
    limits = DriverLimits(1_048_576, 64, run_idle_ttl_ms=60_000, run_cache_idle_ms=60_000)
    return RunDriver(policy, limits, MemoryStore(), outputs, Metrics()), outbox
