"""The runtime client's link to Kafka: a bounded send buffer, the control reader, reconnection.

    stopped ─start→ connecting ─→ connected ⇄ disconnected ─close→ stopped

Publishing appends to a bounded buffer and returns; one task sends the buffer in order while
connected. The linger lives in that buffer, not in the producer (whose `linger_ms` is 0): the
sender lets events gather for `linger_ms` after an idle spell, and an urgent event (a verdict
request) or a flush ends the wait, so the events queued before it leave with it, in order.
(aiokafka's own linger cannot be cut short: its `flush()` only waits it out.)

A failed send, an unacknowledged event, or aiokafka reporting the broker unreachable (checked
with one metadata request) takes the link down: producer and consumer are stopped, so nothing
retries in a loop, and one supervisor reconnects with exponential backoff. Each state change
is one log line; aiokafka's per-retry errors are counted instead (streams/client/quiet.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from loopguard_fleet.config.broker_address import BrokerAddressError, bootstrap_servers
from loopguard_fleet.config.defaults import TOPIC_COMPACTIONS, TOPIC_CONTROL, TOPIC_TOOL_CALLS
from loopguard_fleet.streams.client.quiet import RETRY_NOISE
from loopguard_fleet.streams.errors import BrokerError, StreamError
from loopguard_fleet.streams.kafka.admin import topic_partitions
from loopguard_fleet.streams.kafka.connection import (
    abandon_producer,
    cancel_until_done,
    stop_consumer,
)
from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = ["ClientError", "Connection", "State", "TopicNames", "Topics"]

log = logging.getLogger("loopguard_fleet.streams.client")

State = Literal["stopped", "connecting", "connected", "disconnected"]

_MAX_OWNED_RUNS: Final = 100_000
_PROBE_WAIT_S: Final = 1.0  # one metadata request when aiokafka reports trouble
_RECONNECT_TOPIC_WAIT_S: Final = 1.0
_CONNECTION_ERRORS: Final = (BrokerError, KafkaError, OSError, TimeoutError)


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


class _Queued(NamedTuple):
    topic: str
    key: bytes
    value: bytes
    urgent: bool  # a verdict request: ends the sender's linger


class Connection:
    """Producer and control consumer behind a bounded buffer, reconnecting in the background."""

    def __init__(
        self,
        bootstrap: str | list[str],
        topics: TopicNames,
        *,
        security: ClientSecurity,
        is_listening: bool,
        linger_ms: int,
        topic_wait: float,
        fetch_max_wait_ms: int,
        buffer_size: int,
        delivery_timeout: float,
        backoff: tuple[float, float],
        on_message: Callable[[bytes | None], None],
    ) -> None:
        try:
            self.bootstrap = bootstrap_servers(bootstrap)
        except BrokerAddressError as exc:
            raise ClientError(str(exc)) from None
        if buffer_size < 1 or fetch_max_wait_ms < 0 or delivery_timeout <= 0:
            raise ClientError("buffer_size >= 1, fetch_max_wait_ms >= 0, delivery_timeout > 0")
        self.state: State = "stopped"
        self.dropped = 0
        self._topics = topics
        self._security = security
        self._is_listening = is_listening
        self._linger_ms = linger_ms
        self._topic_wait = topic_wait
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._buffer_size = buffer_size
        self._delivery_timeout = delivery_timeout
        self._backoff = backoff
        self._on_message = on_message
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._buffer: deque[_Queued] = deque()
        self._inflight: set[asyncio.Future[Any]] = set()
        self._owned: OrderedDict[str, None] = OrderedDict()
        self._lost_since_flush = 0
        self._is_overflowing = False
        self._wake = asyncio.Event()  # the buffer has something
        self._is_hurried = False  # an urgent event or a flush ends the linger
        self._connected = asyncio.Event()  # the sender may send
        self._progress = asyncio.Event()  # an event left the buffer or was acknowledged
        self._trouble = asyncio.Event()
        self._is_trouble_certain = False
        self._cause = ""
        self._since = 0.0
        self._noise_at_change = 0

    @property
    def is_started(self) -> bool:
        """True between start() and close()."""
        return self.state != "stopped"

    def owns(self, run_id: object) -> bool:
        """True for a run this client published events of."""
        return isinstance(run_id, str) and run_id in self._owned

    async def start(self) -> None:
        """Connect; missing topics or a refusal raise ClientError, an unreachable broker not."""
        if self.is_started:
            return
        RETRY_NOISE.attach(self._noise)
        self._set_state("connecting", "")
        try:
            await self._connect(self._topic_wait)
        except BrokerError as exc:  # the broker answered: missing topics or a refusal
            await self._disconnect()
            RETRY_NOISE.detach(self._noise)
            self.state = "stopped"
            raise ClientError(f"cannot start the runtime client: {exc}") from exc
        except _CONNECTION_ERRORS as exc:
            await self._disconnect()
            self._set_state("disconnected", _describe(exc))
        else:
            self._set_state("connected", "")
        self._tasks = [
            asyncio.create_task(self._supervise(), name="loopguard-client-supervisor"),
            asyncio.create_task(self._send_loop(), name="loopguard-client-sender"),
        ]

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 -- a bound on delivering the buffer
        """Deliver the buffer (while connected, at most `timeout` s), then stop everything."""
        if not self.is_started:
            return
        if self.state == "connected":
            try:
                await self.flush(timeout)
            except ClientError as exc:
                log.warning("runtime client closing: %s", exc)
        elif self._buffer:
            log.warning(
                "runtime client closing while the broker %s is unreachable: "
                "%d buffered events not delivered",
                ",".join(self.bootstrap),
                len(self._buffer),
            )
        await cancel_until_done(self._tasks)
        self._tasks = []
        await self._disconnect()
        RETRY_NOISE.detach(self._noise)
        self._buffer.clear()
        self.state = "stopped"

    def send(self, topic: str, key: bytes, value: bytes, run_id: str, *, urgent: bool) -> None:
        """Queue one event; over the buffer's bound it is dropped and counted."""
        self._owned[run_id] = None
        self._owned.move_to_end(run_id)
        if len(self._owned) > _MAX_OWNED_RUNS:
            self._owned.popitem(last=False)
        if len(self._buffer) >= self._buffer_size:
            self.dropped += 1
            self._lost_since_flush += 1
            if not self._is_overflowing:
                self._is_overflowing = True
                log.warning(
                    "runtime client buffer full (%d events): dropping new events until the "
                    "broker takes them",
                    self._buffer_size,
                )
            return
        self._buffer.append(_Queued(topic, key, value, urgent))
        self._is_hurried = self._is_hurried or urgent
        self._wake.set()

    async def flush(self, timeout: float | None) -> None:  # noqa: ASYNC109 -- a bound, as the caller gives it
        """Wait until the buffer is sent and acknowledged; raise ClientError on loss or timeout."""
        self._is_hurried = True
        self._wake.set()
        try:
            async with asyncio.timeout(timeout):
                while self._buffer or self._inflight:
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            waiting = len(self._buffer) + len(self._inflight)
            raise ClientError(
                f"{waiting} events not delivered within {timeout}s (broker {self.state})"
            ) from None
        lost, self._lost_since_flush = self._lost_since_flush, 0
        if lost:
            raise ClientError(f"{lost} events were not delivered (buffer full or not acknowledged)")

    # -- the background tasks ------------------------------------------------------------

    async def _supervise(self) -> None:
        """Reconnect with backoff while disconnected; while connected, react to trouble."""
        delay = self._backoff[0]
        while True:
            if self.state == "connected":
                await self._trouble.wait()
                self._trouble.clear()
                cause = self._cause
                if not self._is_trouble_certain:
                    try:
                        await topic_partitions(
                            self.bootstrap,
                            [self._topics.tool_calls],
                            wait=_PROBE_WAIT_S,
                            security=self._security,
                        )
                    except _CONNECTION_ERRORS as exc:
                        cause = _describe(exc)
                    else:
                        await asyncio.sleep(self._backoff[0])  # at most one probe per period
                        continue
                self._set_state("disconnected", cause)  # verdicts fail open from now on
                await self._disconnect(is_lost=True)
                delay = self._backoff[0]
            await asyncio.sleep(delay)
            try:
                await self._connect(_RECONNECT_TOPIC_WAIT_S)
            except _CONNECTION_ERRORS as exc:
                await self._disconnect(is_lost=True)
                self._cause = _describe(exc)
                delay = min(delay * 2, self._backoff[1])
                continue
            self._set_state("connected", "")

    async def _send_loop(self) -> None:
        """Send the buffer in order while connected, after a linger (module docstring)."""
        while True:
            if not self._buffer:
                self._is_hurried = False
                self._wake.clear()
                await self._wake.wait()
                await self._linger()
                continue
            await self._connected.wait()
            producer = self._producer
            assert producer is not None  # _connected is set only with a started producer
            item = self._buffer[0]
            try:
                fut = await asyncio.wait_for(
                    producer.send(item.topic, item.value, key=item.key), self._delivery_timeout
                )
            except MessageSizeTooLargeError as exc:  # this event can never be sent
                log.warning("runtime client dropped an event: %s", exc)
                self._lose_head()
                continue
            except (KafkaError, TimeoutError) as exc:
                self._report(exc, is_certain=True)  # the head stays queued for the reconnect
                continue
            self._buffer.popleft()
            self._progress.set()
            self._inflight.add(fut)
            fut.add_done_callback(self._acked)
            if self._is_overflowing and len(self._buffer) < self._buffer_size // 2:
                self._is_overflowing = False
                log.info("runtime client buffer has room again (%d dropped so far)", self.dropped)
            if item.urgent:  # its own acknowledgement, not the whole producer's
                await asyncio.wait([fut], timeout=self._delivery_timeout)
                if not fut.done():
                    self._report("a verdict request was not acknowledged", is_certain=True)

    async def _linger(self) -> None:
        """Let events gather for `linger_ms`, unless an urgent one or a flush is waiting."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._linger_ms / 1000
        while not self._is_hurried and (left := deadline - loop.time()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500)
            except KafkaError as exc:  # verdicts fail open meanwhile; the supervisor checks
                self._report(exc, is_certain=False)
                await asyncio.sleep(self._backoff[0])
                continue
            for records in batches.values():
                for record in records:
                    self._on_message(record.value)

    # -- state -------------------------------------------------------------------------

    async def _connect(self, topic_wait: float) -> None:
        t = self._topics
        names = [t.tool_calls, t.compactions] + ([t.control] if self._is_listening else [])
        found = await topic_partitions(
            self.bootstrap, names, wait=topic_wait, security=self._security
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            linger_ms=0,  # the sender lingers instead, and an urgent event can end it
            request_timeout_ms=int(self._delivery_timeout * 1000),
            client_id="loopguard-runtime",
            **self._security.aiokafka_kwargs(),
        )
        await self._producer.start()
        if self._is_listening:
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=self._fetch_max_wait_ms,
                client_id="loopguard-runtime",
                **self._security.aiokafka_kwargs(),
            )
            await self._consumer.start()
            tps = [TopicPartition(t.control, p) for p in range(found[t.control])]
            self._consumer.assign(tps)
            await self._consumer.seek_to_end(*tps)
            for tp in tps:  # pin the positions now, so nothing published after start is missed
                await self._consumer.position(tp)
            self._reader = asyncio.create_task(
                self._read(self._consumer), name="loopguard-control-reader"
            )

    async def _disconnect(self, *, is_lost: bool = False) -> None:
        """Stop the reader, the consumer and the producer, whatever state each is in.

        `is_lost`: the broker is gone, so what the producer still holds fails now (counted
        in `dropped`) instead of waiting for a broker that may never come back.
        """
        self._connected.clear()
        reader, self._reader = self._reader, None
        if reader is not None:
            await cancel_until_done([reader])
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        stops = [
            stop_consumer(consumer) if consumer is not None else None,
            (abandon_producer(producer) if is_lost else producer.stop())
            if producer is not None
            else None,
        ]
        for stop in stops:
            if stop is not None:
                try:
                    await stop
                except _CONNECTION_ERRORS as exc:
                    log.debug("runtime client: stopping a Kafka client: %s", exc)

    def _set_state(self, state: State, cause: str) -> None:
        """Enter `state`, with one log line when it changes what a user should know."""
        previous, self.state = self.state, state
        now = asyncio.get_running_loop().time()
        noise = RETRY_NOISE.suppressed - self._noise_at_change
        where = ",".join(self.bootstrap)
        if state == "connected":
            self._is_trouble_certain = False
            self._trouble.clear()
            self._connected.set()
            if previous == "disconnected":
                log.warning(
                    "runtime client reconnected to %s after %.1fs: %d events buffered, "
                    "%d dropped so far (%d aiokafka retry errors not logged)",
                    where,
                    now - self._since,
                    len(self._buffer),
                    self.dropped,
                    noise,
                )
            else:
                log.info("runtime client connected to %s", where)
        elif state == "disconnected" and previous != "disconnected":
            log.warning(
                "runtime client lost the broker %s (%s): failing open (verdicts allow), "
                "buffering up to %d events, reconnecting in the background",
                where,
                cause,
                self._buffer_size,
            )
        self._since = now
        self._noise_at_change = RETRY_NOISE.suppressed

    def _report(self, exc: BaseException | str, *, is_certain: bool) -> None:
        """Tell the supervisor something failed; certain failures stop the sender at once."""
        if self.state != "connected":
            return
        if is_certain:
            self._is_trouble_certain = True
            self._connected.clear()
        self._cause = exc if isinstance(exc, str) else _describe(exc)
        self._trouble.set()

    def _noise(self) -> None:
        self._report("aiokafka cannot reach it", is_certain=False)

    def suspect(self, cause: str) -> None:
        """Something hints the broker is gone (a verdict that never came): check it."""
        self._report(cause, is_certain=False)

    def _acked(self, fut: asyncio.Future[Any]) -> None:
        self._inflight.discard(fut)
        self._progress.set()
        if fut.cancelled() or fut.exception() is not None:
            self.dropped += 1
            self._lost_since_flush += 1
            self._report("an event was not acknowledged", is_certain=True)

    def _lose_head(self) -> None:
        self._buffer.popleft()
        self.dropped += 1
        self._lost_since_flush += 1
        self._progress.set()


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"
