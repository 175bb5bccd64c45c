"""A Faust consumer and conductor with a scripted fetch source instead of Kafka (unit tests).

`unit_wiring` builds the worker's real Faust app against an address nobody listens on (never
started: no broker is contacted); `build_rig` adds its consumer and conductor, where
`_getmany` returns the record maps a test lays out, then stops the fetcher; the broker-side
commit and seek are recorded instead of sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.app import Wiring, build_app
from loopguard_fleet.streams.worker.faust.batches import ack_all
from loopguard_fleet.streams.worker.faust.bulk import Bulk

TOPIC = "unit.tool-calls"
BULK_MAX = 100  # records per bulk in a rig with bulks on (streams/worker/faust/bulk.py)
# What makes the conductor's path wait, so that no direct delivery may happen
CONDUCTOR_WAITS = ("flow suspended", "index being updated", "producer buffer over its limit")
TP0 = TP(TOPIC, 0)
Hook = Callable[[int], Awaitable[None]]
Fetch = dict[TP, list[ConsumerRecord[bytes, bytes]]]


def unit_wiring(tmp_path: Path, app_id: str) -> Wiring:
    """The worker's Faust app reading `TOPIC`, built but never started (close_unstarted)."""
    settings = Settings(
        broker="kafka://127.0.0.1:9",
        app_id=app_id,
        data_dir=tmp_path,
        topic_tool_calls=TOPIC,
        topic_compactions="unit.compactions",
    )
    return build_app(settings, Metrics())


def close_unstarted(consumer: Any) -> None:
    """Close the event loop a (never started) consumer thread made; the in-loop consumer
    service (streams/worker/faust/loop_consumer.py, the default) made none."""
    thread = consumer._thread
    if thread._close_thread_loop_on_stop:
        thread.thread_loop.close()


def records(tag: bytes, offsets: range | list[int]) -> Fetch:
    """One fetch's record map: `tag` is the value, so a test knows which fetch a record is from."""
    return {
        TP0: [ConsumerRecord(TOPIC, 0, o, 0, 0, b"k", tag, None, 1, len(tag), []) for o in offsets]
    }


@dataclass
class Rig:
    """The consumer, its scripted fetches, and what the agent received (fetch tag, offset)."""

    wiring: Wiring
    consumer: Any
    fetches: list[Fetch] = field(default_factory=list)
    received: list[tuple[bytes, int]] = field(default_factory=list)
    commits: list[dict[TP, int]] = field(default_factory=list)
    seeks: int = 0
    committed: int = 0  # where `seek_to_committed` puts partition 0

    async def subscribe(self) -> None:
        """Route partition 0 to the channels subscribed so far (as a rebalance would)."""
        await self.wiring.app.topics._update_indices()
        await self.wiring.app.topics.on_partitions_assigned({TP0})

    async def run(
        self, on_event: Hook | None = None, agent: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Drain the scripted fetches through the consumer; the agent acks what it takes.

        `agent` replaces the rig's own (which reads the input topic's queue item by item: an
        event, or a bulk of records, streams/worker/faust/bulk.py).
        """
        queue = self.wiring.inputs.queue
        fetcher = _Fetcher()
        fetches = iter(self.fetches)

        async def getmany(active_partitions: Any, timeout: float) -> Any:  # noqa: ASYNC109  # Faust's signature
            await asyncio.sleep(0)  # a fetch is I/O: the agent runs meanwhile
            for records in fetches:
                return records
            fetcher._stopped.set()
            return {}

        async def own_agent() -> None:
            while True:
                event = await queue.get()
                if type(event) is Bulk:  # one item for many records (drain.py's bulks)
                    self.received.extend((r.value, r.offset) for r in event.records)
                    ack_all(self.consumer, [event])
                else:
                    self.received.append((event.message.value, event.message.offset))
                    event.ack()
                if on_event is not None:
                    await on_event(len(self.received))

        self.consumer._getmany = getmany
        task = asyncio.ensure_future(agent() if agent is not None else own_agent())
        try:
            await asyncio.wait_for(self.consumer._drain_messages(fetcher), timeout=10)
            # Commit-every commits run beside the drain loop, as futures of the consumer.
            if self.consumer._futures:
                await asyncio.wait(list(self.consumer._futures), timeout=10)
            for _ in range(1000):  # let the agent take what is left in the queue
                if queue.empty() and agent is None:
                    break
                await asyncio.sleep(0)
        finally:
            task.cancel()


class _Fetcher:
    """What the drain loop needs of Faust's Fetcher service: its stop event."""

    def __init__(self) -> None:
        self._stopped = asyncio.Event()


@asynccontextmanager
async def build_rig(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    subscribe_inputs: bool = True,
    bulks: bool = False,
) -> AsyncIterator[Rig]:
    """The worker's consumer and conductor, partition 0 assigned, no broker behind them.

    With `subscribe_inputs` the input topic itself is the conductor's channel (the rig's own
    agent reads its queue); without, an agent subscribes its channel (`Rig.subscribe`).
    `bulks`: the drain loop's bulk delivery (streams/worker/faust/bulk.py), on in the worker;
    off, every record takes the per-record path these rigs mostly test.
    """
    wiring = unit_wiring(tmp_path, "unit-drain")
    app = wiring.app
    app.bulk_max_records = BULK_MAX if bulks else 0
    if subscribe_inputs:
        app.topics.add(wiring.inputs)
    await app.topics._update_indices()
    await app.topics.on_partitions_assigned({TP0})
    app.flow_control.resume()
    consumer = app.consumer
    consumer._set_active_tps({TP0})
    consumer._committed_offset[TP0] = 0
    rig = Rig(wiring, consumer)

    async def seek_to_committed() -> dict[TP, int]:
        rig.seeks += 1
        return {TP0: rig.committed}

    async def commit_offsets(offsets: dict[TP, int], start_new_transaction: bool = True) -> bool:
        rig.commits.append(dict(offsets))
        consumer._committed_offset.update(offsets)
        return True

    monkeypatch.setattr(consumer, "highwater", lambda tp: 0)
    monkeypatch.setattr(consumer, "seek_to_committed", seek_to_committed)
    monkeypatch.setattr(consumer, "_commit_offsets", commit_offsets)
    try:
        yield rig
    finally:
        close_unstarted(consumer)


async def make_the_conductor_wait(app: Any, condition: str) -> None:
    """Bring about one of `CONDUCTOR_WAITS` on the rig's app."""
    if condition == "flow suspended":
        app.flow_control.suspend()
    elif condition == "index being updated":
        await app.topics._tp_to_callback_lock.acquire()
    elif condition == "producer buffer over its limit":
        app.producer.buffer.max_messages = 0
        app.producer.buffer.pending.put_nowait(object())
    else:
        raise ValueError(condition)


async def turns(n: int) -> None:
    """Let the event loop run `n` times."""
    for _ in range(n):
        await asyncio.sleep(0)
