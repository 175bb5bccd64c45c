"""Runtime client: agent runtimes publish tool events and receive verdicts and commands.

    async with RuntimeClient("127.0.0.1:9092") as client:
        run = client.run("r1", agent_id="main")
        call_id = await run.tool_call("read", {"path": "/a"}, want_verdict=True)
        if (await run.verdict(call_id, timeout=2.0)).decision != "block":
            await run.tool_result(call_id, "read", {"path": "/a"}, result=...)

`RunEvents` is the pure part (wire events with per-run `seq` and `event_id`, privacy hashing);
`RuntimeClient` adds Kafka: events keyed by run_id, the control topic read without a consumer
group (every partition, from the end), filtered to the runs this client started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from loopguard_fleet.config.defaults import TOPIC_COMPACTIONS, TOPIC_CONTROL, TOPIC_TOOL_CALLS
from loopguard_fleet.detectors.hashing import DEFAULT_CHANNEL_TOOLS
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads
from loopguard_fleet.detectors.values import JSON
from loopguard_fleet.streams.client.run_events import (
    MISSING,
    Missing,
    RunEvents,
    WireEvent,
    utc_now,
)
from loopguard_fleet.streams.errors import BrokerError, StreamError
from loopguard_fleet.streams.kafka.admin import topic_partitions
from loopguard_fleet.streams.kafka.security import PLAINTEXT, ClientSecurity
from loopguard_fleet.streams.wire.codec import run_key

__all__ = ["ClientError", "RunEvents", "RunHandle", "RuntimeClient", "Topics", "VerdictReply"]

log = logging.getLogger(__name__)

VerdictDecision = Literal["allow", "warn", "block"]

_MAX_OWNED_RUNS: Final = 100_000
_MAX_QUEUED: Final = 10_000


class ClientError(StreamError, RuntimeError):
    """The runtime client cannot start (missing topics), serialise an event or deliver it."""


class TopicNames(Protocol):
    """Anything naming the three topics the client uses (e.g. `Topics`, a test's topic set)."""

    @property
    def tool_calls(self) -> str: ...
    @property
    def compactions(self) -> str: ...
    @property
    def control(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Topics:
    """Topic names, defaulting to LoopGuard's."""

    tool_calls: str = TOPIC_TOOL_CALLS
    compactions: str = TOPIC_COMPACTIONS
    control: str = TOPIC_CONTROL


@dataclass(frozen=True, slots=True)
class VerdictReply:
    """The worker's verdict for one call; `is_timeout` marks a fail-open "allow"."""

    decision: VerdictDecision
    is_timeout: bool = False
    message: WireEvent = field(default_factory=dict)


class RunHandle:
    """One run's publishing handle, created by `RuntimeClient.run`."""

    def __init__(self, client: RuntimeClient, events: RunEvents) -> None:
        self._client = client
        self.events = events
        self.run_id = events.run_id

    async def tool_call(
        self, tool: str, args: JSON, tool_call_id: str | None = None, want_verdict: bool = False
    ) -> str:
        """Publish a tool_call and return its tool_call_id."""
        ev = self.events.tool_call(tool, args, tool_call_id, want_verdict)
        await self._client.publish(ev)
        return str(ev["tool_call_id"])

    async def tool_result(
        self,
        tool_call_id: str | None,
        tool: str,
        args: JSON,
        *,
        result: JSON | Missing = MISSING,
        error: JSON | BaseException | Missing = MISSING,
    ) -> None:
        """Publish a tool_result (`result=` or `error=`)."""
        await self._client.publish(
            self.events.tool_result(tool_call_id, tool, args, result=result, error=error)
        )

    async def compaction(self) -> None:
        """Publish a compaction event."""
        await self._client.publish(self.events.compaction())

    async def end(self) -> None:
        """Publish run_end."""
        await self._client.publish(self.events.end())

    async def verdict(
        self,
        tool_call_id: str,
        timeout: float = 2.0,  # noqa: ASYNC109 -- a fail-open deadline: expiry answers "allow"
    ) -> VerdictReply:
        """Wait for this call's verdict; after `timeout` seconds fail open with "allow"."""
        return await self._client.verdict(self.run_id, tool_call_id, timeout)


class RuntimeClient:
    """Kafka side of an agent runtime: an acks=all producer and a group-less control reader."""

    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        topics: TopicNames | None = None,
        privacy: bool = False,
        is_listening: bool = True,
        linger_ms: int = 5,
        topic_wait: float = 10.0,
        clock: Callable[[], str | int] | None = utc_now,
        channel_tools: frozenset[str] = DEFAULT_CHANNEL_TOOLS,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security  # TLS/SASL (docs/security.md: the agent-runtime principal)
        self.channel_tools = channel_tools
        self.topics: TopicNames = topics or Topics()
        self.privacy = privacy
        self._is_listening = is_listening
        self._linger_ms = linger_ms
        self._topic_wait = topic_wait
        self._clock = clock
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self._failure: BaseException | None = None
        self._owned: OrderedDict[str, None] = OrderedDict()
        self._waiters: dict[tuple[str, str], asyncio.Future[WireEvent]] = {}
        self._early: OrderedDict[tuple[str, str], WireEvent] = OrderedDict()
        self._queue: asyncio.Queue[WireEvent | None] = asyncio.Queue(_MAX_QUEUED)

    async def __aenter__(self) -> RuntimeClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Check the topics exist (never auto-create), start the producer and control reader."""
        t = self.topics
        names = [t.tool_calls, t.compactions] + ([t.control] if self._is_listening else [])
        try:
            found = await topic_partitions(
                self.bootstrap, names, wait=self._topic_wait, security=self.security
            )
        except (BrokerError, KafkaError, OSError) as exc:
            raise ClientError(f"cannot start the runtime client: {exc}") from exc
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            linger_ms=self._linger_ms,
            client_id="loopguard-runtime",
            **self.security.aiokafka_kwargs(),
        )
        await self._producer.start()
        if self._is_listening:
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=100,
                client_id="loopguard-runtime",
                **self.security.aiokafka_kwargs(),
            )
            await self._consumer.start()
            tps = [TopicPartition(t.control, p) for p in range(found[t.control])]
            self._consumer.assign(tps)
            await self._consumer.seek_to_end(*tps)
            for tp in tps:  # pin the positions now, so nothing published after start is missed
                await self._consumer.position(tp)
            self._reader = asyncio.create_task(self._read(), name="loopguard-control-reader")

    async def close(self) -> None:
        """Flush what was published, stop the reader, end the commands() iterators."""
        try:
            if self._producer is not None:
                await self.flush()
        finally:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            for closable in (self._consumer, self._producer):
                if closable is not None:
                    await closable.stop()
            self._reader = self._consumer = self._producer = None
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(None)

    def run(
        self,
        run_id: str,
        agent_id: str | None = None,
        session_key: str | None = None,
        start_seq: int = 0,
    ) -> RunHandle:
        """A handle publishing one run's events; its commands and verdicts come to this client."""
        events = RunEvents(
            run_id,
            agent_id=agent_id,
            session_key=session_key,
            privacy=self.privacy,
            start_seq=start_seq,
            clock=self._clock,
            channel_tools=self.channel_tools,
        )
        return RunHandle(self, events)

    def _own(self, run_id: str) -> None:
        self._owned[run_id] = None
        self._owned.move_to_end(run_id)
        if len(self._owned) > _MAX_OWNED_RUNS:
            self._owned.popitem(last=False)

    async def publish(self, event: Mapping[str, Any]) -> None:
        """Publish one wire event to its topic, keyed by run_id (verdict requests are flushed)."""
        if self._producer is None:
            raise ClientError("the runtime client is not started (use `async with`)")
        etype, run_id = event.get("type"), str(event.get("run_id"))
        if etype in ("tool_call", "tool_result"):
            topic = self.topics.tool_calls
        elif etype in ("compaction", "run_end"):
            topic = self.topics.compactions
        else:
            raise ClientError(
                f"unknown event type {etype!r}: expected tool_call, tool_result, compaction "
                "or run_end"
            )
        try:
            value = dumps(event)
        except (TypeError, ValueError) as exc:
            raise ClientError(f"event {event.get('event_id')!r} is not JSON: {exc}") from exc
        self._own(run_id)
        fut = await self._producer.send(topic, value, key=run_key(run_id))
        self._pending.add(fut)
        fut.add_done_callback(self._delivered)
        if etype == "tool_call" and event.get("want_verdict") is True:
            await self.flush()  # the runtime is about to wait for the verdict

    def _delivered(self, fut: asyncio.Future[Any]) -> None:
        self._pending.discard(fut)
        if not fut.cancelled() and fut.exception() is not None and self._failure is None:
            self._failure = fut.exception()

    async def flush(self) -> None:
        """Wait until every published event is acknowledged; raise ClientError if one failed."""
        if self._producer is not None:
            await self._producer.flush()
        if self._pending:
            await asyncio.wait(list(self._pending))
        failure, self._failure = self._failure, None
        if failure is not None:
            raise ClientError(f"an event was not delivered: {failure}") from failure

    async def verdict(
        self,
        run_id: str,
        tool_call_id: str,
        timeout: float = 2.0,  # noqa: ASYNC109 -- a fail-open deadline: expiry answers "allow"
    ) -> VerdictReply:
        """The verdict for one call; fail open ("allow", `is_timeout`) after `timeout` seconds."""
        key = (run_id, tool_call_id)
        # The reader runs on this loop: a verdict already read is in _early, a later one
        # finds the waiter; nothing can fall between the two.
        fut = self._waiters.setdefault(key, asyncio.get_running_loop().create_future())
        if key in self._early and not fut.done():
            fut.set_result(self._early.pop(key))
        try:
            msg = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            log.warning(
                "no verdict for run %s call %s in %.1fs: failing open (allow)",
                run_id,
                tool_call_id,
                timeout,
            )
            return VerdictReply("allow", is_timeout=True)
        finally:
            self._waiters.pop(key, None)
        decision = msg.get("decision")
        return VerdictReply(decision if decision in ("warn", "block") else "allow", message=msg)

    async def commands(self) -> AsyncIterator[WireEvent]:
        """Commands and loop events for this client's runs, as they arrive, until close()."""
        while (msg := await self._queue.get()) is not None:
            yield msg

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=500)
            except KafkaError as exc:  # verdict waits fail open meanwhile; keep reading
                log.warning("control topic read failed, retrying: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for records in batches.values():
                for record in records:
                    self._dispatch(record.value)

    def _dispatch(self, raw: bytes | None) -> None:
        try:
            msg = loads(raw or b"")
        except NotJSON:
            return
        if not isinstance(msg, dict) or msg.get("run_id") not in self._owned:
            return
        if msg.get("type") == "verdict":
            key = (str(msg["run_id"]), str(msg.get("tool_call_id")))
            fut = self._waiters.get(key)
            if fut is None:
                self._early[key] = msg  # a verdict() may still ask for it
                if len(self._early) > _MAX_QUEUED:
                    self._early.popitem(last=False)
            elif not fut.done():
                fut.set_result(msg)
        elif msg.get("type") in ("command", "loop_event"):
            if self._queue.full():  # nobody reads commands(): keep the newest
                self._queue.get_nowait()
            self._queue.put_nowait(msg)
