"""The fast drain loop keeps Faust's guarantees: suspension, seek, gaps and commits.

These run the worker's real Faust consumer and conductor (built by `build_app`, never
started) with a scripted fetch source in place of Kafka: `_getmany` returns the record maps
a test lays out, then stops the fetcher. A small agent takes events off the input channel's
queue (what Faust's stream does) and acks them; the broker-side commit is recorded instead of
sent. Variants marked "guarantee removed" patch one guarantee out and show the same scenario
then breaks: the tests can fail (streams/worker/faust/drain.py says what each one protects).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import IllegalStateError
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP
from mode.services import WaitResults

from loopguard_fleet.streams.worker.faust.drain import YIELD_EVERY, start_eagerly
from tests.unit.faust_rig import BULK_MAX, TP0, Rig, build_rig, records, turns


@pytest.fixture(params=[True, False], ids=["fast path", "Faust's loop"])
def fast_path(request: pytest.FixtureRequest) -> bool:
    """Both drain loops: the fast path must behave as Faust's where Faust's is right."""
    return bool(request.param)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    """The rig with the input topic as the conductor's channel."""
    async with build_rig(tmp_path, monkeypatch) as built:
        yield built


def _remove_the_flow_epoch(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guarantee removed: stopping the flow no longer tells the fast path (Faust's stop_flow)."""
    monkeypatch.setattr(rig.consumer, "stop_flow", lambda: FaustConsumer.stop_flow(rig.consumer))


def _remove_the_abandoning(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guarantee removed: a blocked callback is awaited to the end, not raced with suspension."""

    async def wait_for_it(blocked: Any, *others: Any) -> WaitResults:
        for other in others:
            other.close()  # the suspension's wait, never raced
        return WaitResults([blocked], [await blocked], False)

    monkeypatch.setattr(rig.consumer, "wait_first", wait_for_it)


# A seek in the middle of a batch (recovery's perform_seek: stop, seek, resume at once).

SEEK_AT = YIELD_EVERY  # the agent seeks at the first turn the drain loop gives it
AFTER_SEEK = [(b"b2", o) for o in range(60, 120)]


@pytest.mark.parametrize(
    ("guarantee", "expected"),
    [
        pytest.param(
            "kept",
            [(b"b1", o) for o in range(SEEK_AT)] + AFTER_SEEK,
            id="kept: the stale rest of the batch is dropped, the re-read from the seek arrives",
        ),
        pytest.param(
            "removed",
            [(b"b1", o) for o in range(150)],
            id="removed: the stale batch runs on past the seek and the re-read is dropped",
        ),
    ],
)
async def test_a_seek_mid_batch_drops_what_was_fetched_before_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, guarantee: str, expected: list[tuple[bytes, int]]
) -> None:
    if guarantee == "removed":
        _remove_the_flow_epoch(rig, monkeypatch)
    rig.committed = 60
    rig.fetches = [records(b"b1", range(150)), records(b"b2", range(60, 120))]

    async def seek_once(n: int) -> None:
        if n == SEEK_AT:
            await rig.consumer.perform_seek()

    await rig.run(seek_once)
    assert rig.received == expected


async def test_after_a_seek_mid_batch_the_read_offset_is_the_seeks(rig: Rig) -> None:
    rig.committed = 60
    rig.fetches = [records(b"b1", range(150))]

    async def seek_once(n: int) -> None:
        if n == SEEK_AT:
            await rig.consumer.perform_seek()

    await rig.run(seek_once)
    assert (rig.consumer._read_offset[TP0], rig.consumer.flow_active) == (60, True)


# A suspension while a callback is blocked in flow control (a rebalance).


@pytest.mark.parametrize(
    ("guarantee", "expected"),
    [
        pytest.param(
            "kept",
            [(b"b1", o) for o in range(SEEK_AT)] + [(b"b2", o) for o in range(100, 150)],
            id="kept: the blocked record is abandoned",
        ),
        pytest.param(
            "removed",
            [(b"b1", o) for o in range(SEEK_AT + 1)] + [(b"b2", o) for o in range(100, 150)],
            id="removed: the blocked record arrives after the suspension",
        ),
    ],
)
async def test_a_callback_blocked_in_flow_control_is_abandoned_when_the_flow_stops(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, guarantee: str, expected: list[tuple[bytes, int]]
) -> None:
    if guarantee == "removed":
        _remove_the_abandoning(rig, monkeypatch)
    app = rig.wiring.app
    rig.fetches = [records(b"b1", range(150)), records(b"b2", range(100, 150))]

    async def rebalance(n: int) -> None:
        if n == SEEK_AT:
            app.flow_control.suspend()  # the next record's callback blocks in acquire()
            await turns(10)
            rig.consumer.stop_flow()
            await turns(10)
            app.flow_control.resume()
            rig.consumer.resume_flow()

    await rig.run(rebalance)
    assert rig.received == expected


@pytest.mark.parametrize("bulks", [False, True], ids=["record by record", "bulks"])
async def test_a_fetch_that_straddles_a_suspension_is_read_again_from_the_commit(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, bulks: bool
) -> None:
    rig.wiring.app.bulk_max_records = BULK_MAX if bulks else 0  # no bulk of the stale fetch
    rig.committed = 3
    rig.fetches = [records(b"b1", range(10)), records(b"b2", range(3, 10))]
    inner = rig.consumer._wait_next_records
    fetches = 0

    async def wait_next_records(timeout: float) -> Any:  # noqa: ASYNC109  # Faust's signature
        nonlocal fetches
        fetches += 1
        result = await inner(timeout)
        if fetches == 1:  # in flight while recovery stops the flow, seeks and resumes it
            await rig.consumer.perform_seek()
        return result

    monkeypatch.setattr(rig.consumer, "_wait_next_records", wait_next_records)
    await rig.run()
    assert (rig.received, rig.seeks) == ([(b"b2", o) for o in range(3, 10)], 2)


# Gaps, redeliveries and commits: the same as Faust's loop.


async def test_a_hole_in_the_offsets_is_committed_past(rig: Rig, fast_path: bool) -> None:
    rig.wiring.app.faust_fast_path = fast_path
    rig.fetches = [records(b"b1", [*range(10), *range(15, 20)])]
    await rig.run()
    await rig.consumer.commit()
    assert (rig.received, rig.commits) == (
        [(b"b1", o) for o in [*range(10), *range(15, 20)]],
        [{TP0: 20}],
    )


async def test_without_the_gap_record_the_commit_stops_at_the_hole(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_gap(tp: TP, offset_from: int, offset_to: int) -> None:
        return None

    monkeypatch.setattr(rig.consumer, "_add_gap", no_gap)  # guarantee removed
    rig.fetches = [records(b"b1", [*range(10), *range(15, 20)])]
    await rig.run()
    await rig.consumer.commit()
    assert rig.commits == [{TP0: 10}]


async def test_records_already_read_are_not_delivered_again(rig: Rig, fast_path: bool) -> None:
    rig.wiring.app.faust_fast_path = fast_path
    rig.fetches = [records(b"b1", range(5)), records(b"b2", range(8))]
    await rig.run()
    assert rig.received == [(b"b1", o) for o in range(5)] + [(b"b2", o) for o in range(4, 8)]


async def test_commit_every_commits_what_the_agent_acked(rig: Rig, fast_path: bool) -> None:
    rig.wiring.app.faust_fast_path = fast_path
    rig.consumer._commit_every = 100
    rig.fetches = [records(b"b1", range(250)), records(b"b2", range(250, 260))]
    await rig.run()
    # Each commit covers what the agent had acked by then; none goes past an unacked record.
    offsets = [c[TP0] for c in rig.commits]
    assert offsets and offsets == sorted(offsets) and offsets[-1] <= 260
    assert len(rig.received) == 260


async def test_the_fast_path_commits_once_per_batch(rig: Rig) -> None:
    rig.consumer._commit_every = 10
    rig.fetches = [records(b"b1", range(90)), records(b"b2", range(90, 180))]
    await rig.run()
    # Acks arrive while the next fetch is in flight; a batch's end starts one commit beside
    # the loop (streams/worker/faust/drain.py), which runs after the agent acked the second
    # fetch too: one commit for both, none per record.
    assert [c[TP0] for c in rig.commits] == [180]


# The eager step itself.


async def test_a_callback_that_does_not_block_finishes_in_its_first_step() -> None:
    done: list[int] = []

    async def callback() -> None:
        done.append(1)

    assert (start_eagerly(callback()), done) == (None, [1])


async def test_a_blocked_callback_resumes_where_it_stopped_when_awaited() -> None:
    gate = asyncio.Event()
    steps: list[str] = []

    async def callback() -> str:
        steps.append("before")
        await gate.wait()
        steps.append("after")
        return "done"

    blocked = start_eagerly(callback())
    assert blocked is not None
    task = asyncio.ensure_future(blocked)
    await turns(3)
    gate.set()
    assert (await task, steps) == ("done", ["before", "after"])


async def test_cancelling_a_blocked_callback_cancels_it_inside() -> None:
    seen: list[str] = []

    async def callback() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    blocked = start_eagerly(callback())
    assert blocked is not None
    task = asyncio.ensure_future(blocked)
    await turns(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_a_seek_that_a_rebalance_overtakes_does_not_stop_the_loop(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.fetches = [records(b"b1", range(10)), records(b"b2", range(10))]
    inner = rig.consumer._wait_next_records
    fetches = 0

    async def wait_next_records(timeout: float) -> Any:  # noqa: ASYNC109  # Faust's signature
        nonlocal fetches
        fetches += 1
        result = await inner(timeout)
        if fetches == 1:
            rig.consumer.stop_flow()  # a rebalance begins while the fetch is in flight ...
            rig.consumer.resume_flow()
        return result

    async def seek_without_assignment() -> dict[TP, int]:
        raise IllegalStateError("No current assignment for partition")  # ... and takes it

    monkeypatch.setattr(rig.consumer, "_wait_next_records", wait_next_records)
    monkeypatch.setattr(rig.consumer, "seek_to_committed", seek_without_assignment)
    await rig.run()
    assert rig.received == [(b"b2", o) for o in range(10)]
