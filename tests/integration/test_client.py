"""The runtime client on the real broker: topics, keys, seq, privacy, verdicts, commands."""

from __future__ import annotations

import asyncio

import pytest

from loopguard_fleet.detectors import args_hash
from loopguard_fleet.streams.client.runtime import ClientError, RuntimeClient, Topics, VerdictReply
from loopguard_fleet.streams.demo.simulate import fleet_events, simulate
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.kafka.admin import topic_partitions

from .conftest import KafkaIO, TopicSet

pytestmark = pytest.mark.integration

SECRET = "hunter2-Sup3rS3cret"


async def test_events_land_on_their_topics_keyed_by_run_with_increasing_seq(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    async with RuntimeClient(kafka.bootstrap, topics=topics, clock=None) as client:
        run = client.run("r-topics", agent_id="main", session_key="s1")
        other = client.run("r-other")
        cid = await run.tool_call("read", {"path": "/a"})
        await other.tool_call("list", {"path": "/w"}, tool_call_id="x1")
        await run.tool_result(cid, "read", {"path": "/a"}, error="File not found: /a")
        await run.compaction()
        await run.tool_call("read", {"path": "/b"})
        await run.end()

    calls = await kafka.consume_count(topics.tool_calls, 4)
    lives = await kafka.consume_count(topics.compactions, 2)
    mine = [m for m in calls if m.key == b"r-topics"]
    assert [(m.json["type"], m.json["seq"], m.json["event_id"]) for m in mine] == [
        ("tool_call", 1, "r-topics:1"),
        ("tool_result", 2, "r-topics:2"),
        ("tool_call", 4, "r-topics:4"),
    ]
    assert [(m.key, m.json["type"], m.json["seq"]) for m in lives] == [
        (b"r-topics", "compaction", 3),
        (b"r-topics", "run_end", 5),
    ]
    assert mine[0].json == {
        "type": "tool_call", "event_id": "r-topics:1", "run_id": "r-topics", "seq": 1,
        "agent_id": "main", "session_key": "s1", "tool_call_id": "call-1", "tool": "read",
        "args": {"path": "/a"},
    }  # fmt: skip
    assert mine[1].json["error"] == "File not found: /a"
    assert [m.json["tool_call_id"] for m in calls if m.key == b"r-other"] == ["x1"]
    # Same key, same partition count: a run's events meet on one partition number.
    assert {m.partition for m in mine} == {m.partition for m in lives}


async def test_privacy_mode_sends_hashes_and_never_the_raw_values(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    args = {"path": f"/home/u/{SECRET}.txt", "token": SECRET}
    async with RuntimeClient(kafka.bootstrap, topics=topics, privacy=True) as client:
        run = client.run("r-private")
        cid = await run.tool_call("Read", args)
        await run.tool_result(cid, "Read", args, result={"content": [{"text": SECRET}]})
        await run.tool_result(cid, "Read", args, error=RuntimeError(f"denied {SECRET}"))
        await run.tool_result(cid, "exec", {"cmd": SECRET}, error=f"Tool exec not found {SECRET}")
        poll = await run.tool_call("process", {"action": "poll", "sessionId": SECRET})

    msgs = await kafka.consume_count(topics.tool_calls, 5)
    assert len(msgs) == 5
    assert all(SECRET.encode() not in (m.value or b"") for m in msgs)
    call, result, error, unknown, poll_call = (m.json for m in msgs)
    assert call["args_hash"] == args_hash("read", args) and "args" not in call
    assert call["poll_action"] is None
    assert result["result_hash"] and "result" not in result
    assert error["result_hash"].startswith("error:") and "error" not in error
    assert unknown["unknown_tool_name"] == "exec"
    assert poll_call["poll_action"] == "poll" and poll_call["tool_call_id"] == poll


# A linger far longer than any deadline below: only what ends it early gets events out.
FOREVER_MS = 120_000


async def test_a_verdict_request_ends_the_linger_and_takes_the_events_before_it_along(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    async with RuntimeClient(
        kafka.bootstrap, topics=topics, clock=None, linger_ms=FOREVER_MS
    ) as client:
        run, other = client.run("r-urgent"), client.run("r-unrelated")
        cid = await run.tool_call("read", {"path": "/a"})
        await other.tool_call("list", {"path": "/w"})
        await run.tool_result(cid, "read", {"path": "/a"}, result="text")
        await run.tool_call("read", {"path": "/b"}, want_verdict=True)
        msgs = await kafka.consume_count(topics.tool_calls, 4)
    assert [(m.key, m.json["seq"]) for m in msgs if m.key == b"r-urgent"] == [
        (b"r-urgent", 1),
        (b"r-urgent", 2),
        (b"r-urgent", 3),
    ]
    assert [m.key for m in msgs].count(b"r-unrelated") == 1


async def test_flush_ends_the_linger(topics: TopicSet, kafka: KafkaIO) -> None:
    async with RuntimeClient(
        kafka.bootstrap, topics=topics, clock=None, linger_ms=FOREVER_MS
    ) as client:
        run = client.run("r-flushed")
        await run.tool_call("read", {"path": "/a"})
        await run.compaction()
        await client.flush(timeout=15)
        calls = await kafka.consume_count(topics.tool_calls, 1)
        lives = await kafka.consume_count(topics.compactions, 1)
    assert [(m.key, m.json["seq"]) for m in calls + lives] == [
        (b"r-flushed", 1),
        (b"r-flushed", 2),
    ]


async def test_a_missing_verdict_fails_open_after_the_timeout(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    async with RuntimeClient(kafka.bootstrap, topics=topics) as client:
        run = client.run("r-nobody-answers")
        cid = await run.tool_call("read", {"path": "/a"}, want_verdict=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        reply = await run.verdict(cid, timeout=0.3)
        assert reply == VerdictReply("allow", is_timeout=True)
        assert loop.time() - started >= 0.3


async def test_verdicts_and_commands_reach_only_the_run_that_owns_them(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    block = {"type": "verdict", "run_id": "r-mine", "tool_call_id": "c1", "decision": "block"}
    command = {"type": "command", "command": "block_call", "run_id": "r-mine", "seq": 1}
    async with RuntimeClient(kafka.bootstrap, topics=topics) as client:
        run = client.run("r-mine")
        await run.tool_call("read", {"path": "/a"}, tool_call_id="c1", want_verdict=True)
        await kafka.produce_json(
            topics.control,
            [
                {**block, "run_id": "r-foreign"},
                {**command, "run_id": "r-foreign"},
                command,
                block,
                {"type": "verdict", "run_id": "r-mine", "tool_call_id": "c2", "decision": "warn"},
            ],
        )
        assert await run.verdict("c1", timeout=15) == VerdictReply.from_payload(block)
        commands = client.commands()
        assert await asyncio.wait_for(anext(commands), 15) == command
        # A verdict read before anyone asked for it is kept for the asker.
        assert (await run.verdict("c2", timeout=15)).decision == "warn"


async def test_the_client_refuses_missing_topics_instead_of_creating_them(
    broker: EmbeddedBroker,
) -> None:
    absent = Topics("ct.none.calls", "ct.none.compactions", "ct.none.control")
    with pytest.raises(ClientError, match=r"ct\.none\.calls"):
        async with RuntimeClient(broker.bootstrap, topics=absent, topic_wait=0.3):
            pass
    with pytest.raises(Exception, match="do not exist"):
        await topic_partitions(broker.bootstrap, ["ct.none.calls"], wait=0.1)


async def test_publishing_before_start_is_an_error() -> None:
    client = RuntimeClient("127.0.0.1:9")
    with pytest.raises(ClientError, match="not started"):
        await client.run("r").end()


async def test_the_simulated_fleet_publishes_every_event_in_run_order(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    sent = await simulate(kafka.bootstrap, topics, runs=6, seed=4, rate=None, prefix="simt")
    expected = fleet_events(6, seed=4, prefix="simt")
    assert sent == len(expected)
    calls = await kafka.consume_count(
        topics.tool_calls, sum(e["type"].startswith("tool") for e in expected)
    )
    lives = await kafka.consume_count(topics.compactions, sent - len(calls))
    by_run = sorted((m.json for m in calls + lives), key=lambda e: (e["run_id"], e["seq"]))
    assert by_run == sorted(expected, key=lambda e: (e["run_id"], e["seq"]))
