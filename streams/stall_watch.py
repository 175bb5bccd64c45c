"""Detects a worker whose Faust consumer stopped delivering while its partitions hold events.

Found by tests/chaos (graceful restart, memory store, about one run in six): after a restart
with a backlog, Faust sometimes never delivers to the agent again. Its fetcher waits on flow
control that no rebalance will resume, or has read ahead while the agent waits on an empty
queue, and the worker looks healthy but stops committing. This happens on Tansu, whose rejoin
keeps the generation id unchanged, and resembles faust-streaming issue #471 ("Consumer
doesn't consume from some of its assigned partition"). `StallWatch.check` (a timer in every
worker) notices it. If no input offset was committed for `stall_after_s`, no rebalance or
recovery is in progress, and the broker holds events past the committed offsets, the worker
logs it and stops with exit code 75, like BrokerWatch. Its supervisor restarts it, and
processing resumes from the committed offsets (at-least-once: nothing is lost, redelivered
events are dropped by seq).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

__all__ = ["EXIT_STALLED", "ConsumerStalled", "StallWatch"]

log = logging.getLogger(__name__)

#: Exit status of a worker whose consumer stalled (EX_TEMPFAIL: restart me).
EXIT_STALLED: Final = 75


class ConsumerStalled(RuntimeError):
    """Faust's consumer stopped delivering events although its partitions hold more."""


class StallWatch:
    """Watches commits; when they stand still, asks the broker whether events are waiting."""

    def __init__(
        self,
        app: Any,
        group_id: str,
        topics: tuple[str, ...],
        bootstrap: list[str],
        stall_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._app = app
        self._group = group_id
        self._topics = frozenset(topics)
        self._bootstrap = bootstrap
        self._stall_after_s = stall_after_s
        self._clock = clock
        self._last_commits: dict[Any, int] = {}
        self._quiet_since = clock()
        self.stalled: ConsumerStalled | None = None

    def _assigned(self) -> list[Any]:
        consumer = self._app.consumer
        return sorted(tp for tp in consumer.assignment() if tp.topic in self._topics)

    async def check(self) -> None:
        """One look; on a stall, log it and crash the app (the worker exits 75)."""
        if self.stalled is not None:
            return
        app = self._app
        now = self._clock()
        # Faust's record of what it committed (private). Commits are what matter: a stopped
        # fetcher and a stopped agent both leave them standing still.
        commits = dict(app.consumer._committed_offset)
        if app.rebalancing or app.in_recovery or commits != self._last_commits:
            self._last_commits = commits
            self._quiet_since = now
            return
        assigned = self._assigned()
        if not assigned or now - self._quiet_since < self._stall_after_s:
            return
        try:
            waiting = await self._waiting(assigned)
        except (KafkaError, OSError) as exc:  # the broker is away: BrokerWatch's business
            log.debug("stall watch: cannot look at the partitions: %r", exc)
            return
        if not waiting:
            self._quiet_since = now  # idle, not stalled
            return
        shown = ", ".join(f"{t}[{p}] from offset {o}" for (t, p), o in sorted(waiting.items()))
        self.stalled = ConsumerStalled(
            f"the consumer delivered nothing for {now - self._quiet_since:.0f}s although the "
            f"broker holds uncommitted events ({shown}); Faust's consumer is stuck (see "
            f"streams/stall_watch.py). Stopping with exit code {EXIT_STALLED} to be restarted; "
            "processing resumes from the committed offsets"
        )
        log.error("%s", self.stalled)
        await app.crash(self.stalled)

    async def _waiting(self, assigned: list[Any]) -> dict[tuple[str, int], int]:
        """Partitions holding a record at or past the group's committed offset."""
        tps = [TopicPartition(tp.topic, tp.partition) for tp in assigned]
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, request_timeout_ms=3000)
        await admin.start()
        try:
            # Partitions named explicitly: Tansu's answer for "all partitions" does not decode.
            got = await admin.list_consumer_group_offsets(self._group, partitions=tps)
        finally:
            await admin.close()
        committed = {tp: max(got[tp].offset, 0) if tp in got else 0 for tp in tps}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await consumer.start()
        try:
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, committed[tp])
            batch = await consumer.getmany(timeout_ms=1000, max_records=len(tps))
        finally:
            await consumer.stop()
        return {(tp.topic, tp.partition): committed[tp] for tp, recs in batch.items() if recs}
