"""Faust's consumer "thread" run in the worker's own event loop (the verdict path's way in).

faust-streaming's aiokafka driver always runs the AIOKafkaConsumer in a thread of its own
(`ThreadDelegateConsumer` → `AIOKafkaConsumerThread`, a mode `ServiceThread` with its own
event loop), and every fetch, commit and seek is a call across threads: the agent's loop asks
the thread's method queue, the thread runs the call in its loop, the answer comes back with
`call_soon_threadsafe`. A record therefore waits for two thread wake-ups and for the GIL on
each side, and both threads contend for the GIL while the agent processes a batch. On
workload L that hop was the largest part of a verdict's time after the fetch itself
(docs/performance.md: 5-14 ms between the consumer thread having a record and
the agent's batch starting, at load 2-6).

`InLoop` is mixed into Faust's consumer-thread class (streams/worker/faust/internals.py) so
that the same service runs as a plain service of the worker's loop: `thread_loop` *is* the
worker's loop, `start` and `stop` start and stop it there (the order of Faust's thread:
the service, then its method queue; on stop the method queue and the aiokafka consumer,
then its children), and `call_thread` / `cast_thread` await the call directly. Everything
else — which aiokafka calls are made, the rebalance listener, Faust's own method queue for
rebalance callbacks — is Faust's code, unchanged.

What the thread gave that this gives up: aiokafka's heartbeats and fetches no longer run
while the agent's loop is busy. The agent yields to the loop every 100 records
(drain.py) and between the checkpoint's 2 ms write slices (agent.py), so a heartbeat waits
milliseconds, against a session timeout of seconds. `LOOPGUARD_FAUST_CONSUMER_THREAD=true`
brings the thread back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mode import Service
from mode.utils.futures import maybe_async

__all__ = ["InLoop"]


class InLoop:
    """Mixin for a mode `ServiceThread` (Faust's consumer thread): run it in the caller's loop.

    Listed before the thread class in the bases, so that these methods win; `loop` must be
    given (Faust passes the consumer's loop).
    """

    # What the mixin uses of the class it is mixed into (mode's Service, ServiceThread and
    # QueueServiceThread, Faust's AIOKafkaConsumerThread), declared for the type checker.
    _thread_started: Any
    _started: Any
    _stopped: Any
    _shutdown: Any
    if TYPE_CHECKING:

        async def on_thread_started(self) -> None: ...  # starts the method queue
        async def on_thread_stop(self) -> None: ...  # stops it, then the aiokafka consumer
        async def _default_stop_children(self) -> None: ...
        async def _default_stop_futures(self) -> None: ...
        async def _default_stop_exit_stacks(self) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["thread_loop"] = kwargs["loop"]  # the "thread" runs in the worker's loop
        super().__init__(*args, **kwargs)

    async def start(self) -> None:
        """Start the service in this loop, then its method queue (as the thread would)."""
        self._thread_started.set()  # what ServiceThread.maybe_start reads
        await Service.start(self)  # type: ignore[arg-type]
        await self.on_thread_started()

    async def stop(self) -> None:
        """Stop it as a plain service; `_stop_children` stops what the thread stopped."""
        if self._started.is_set():
            await Service.stop(self)  # type: ignore[arg-type]

    def _stopped_set(self) -> None:
        self._stopped.set()  # the thread's version defers it to the thread's loop

    def set_shutdown(self) -> None:
        """Mark the service shut down (the thread's version hops to the parent loop)."""
        self._shutdown.set()

    async def _stop_children(self) -> None:
        # What ServiceThread._shutdown_thread does in the thread after `stop` returns: the
        # method queue and the aiokafka consumer (on_thread_stop), then the children.
        await self.on_thread_stop()
        await self._default_stop_children()
        self.set_shutdown()

    async def _stop_futures(self) -> None:
        await self._default_stop_futures()

    async def _stop_exit_stacks(self) -> None:
        await self._default_stop_exit_stacks()

    async def call_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fun` here and return what it returns (no thread to hand it to)."""
        return await maybe_async(fun(*args, **kwargs))

    async def cast_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run `fun` here (the thread's version queues it and does not wait)."""
        await maybe_async(fun(*args, **kwargs))
