"""Detects a broker that lost LoopGuard's data (restarted without its storage), and says so.

Found by tests/chaos (broker restart): after the embedded broker restarts with an empty memory
store, aiokafka reconnects, the clients' metadata requests auto-create the topics again (with
the broker's default partition count, not necessarily ours) and the group rejoins with no
committed offsets, so the worker looks healthy and carries on, silently: its table's changelog
is gone (the run states it holds can no longer move to another worker, and Faust's stored
changelog offsets now point past the new changelog's end). The same happens on any Kafka whose
topics were deleted and recreated under a running worker.

`BrokerWatch.check` (a timer in every worker) compares the offsets this worker committed with
the group's offsets on the broker. Committed offsets never move backwards, so a lower or
missing one means the broker lost them: the worker logs what happened and stops with exit
code `EXIT_BROKER_DATA_LOST`, leaving a marker in its data dir (streams/worker/unclean_stop.py).
Its supervisor restarts it; `ensure_topics` then recreates the topics and `open_store` drops
the local table store, whose changelog is gone (run states restart empty: a loop in progress
is counted anew).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from loopguard_fleet.streams.errors import StreamError
from loopguard_fleet.streams.kafka.security import PLAINTEXT, ClientSecurity
from loopguard_fleet.streams.worker.faust.internals import committed_offsets
from loopguard_fleet.streams.worker.unclean_stop import mark_data_lost

__all__ = [
    "EXIT_BROKER_DATA_LOST",
    "BrokerDataLost",
    "BrokerWatch",
]

log = logging.getLogger(__name__)

#: Exit status of a worker that found the broker had lost its data (EX_TEMPFAIL: retry).
EXIT_BROKER_DATA_LOST: Final = 75
#: How long a crashed worker tries to reach a restarting broker before it exits (s), and how
#: often: a Kafka node restarted here answers again within ~10 s (tests/chaos).
CONFIRM_WAIT_S: Final = 20.0
CONFIRM_RETRY_S: Final = 0.5


class BrokerDataLost(StreamError, RuntimeError):
    """The broker no longer has offsets this worker committed: its data was lost."""


class BrokerWatch:
    """Compares this worker's committed offsets with the broker's, from a Faust timer."""

    def __init__(
        self,
        app: Any,
        group_id: str,
        topics: tuple[str, ...],
        bootstrap: list[str],
        data_dir: Path,
        *,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self._security = security
        self._app = app
        self._group = group_id
        self._topics = frozenset(topics)
        self._bootstrap = bootstrap
        self._data_dir = data_dir
        self._admin: AIOKafkaAdminClient | None = None
        self._committed: dict[Any, int] = {}
        self.lost: BrokerDataLost | None = None

    async def check(self) -> None:
        """One comparison; on a loss, log it, leave the marker and crash the app (exit 75)."""
        if self.lost is not None:
            return
        # Faust's own record of what it committed (private; see the module docstring). Faust
        # forgets a partition's entry when the partition is revoked, and a rejoin after the
        # broker restart revokes them all, so the highest offsets seen are remembered here.
        # Committed offsets only grow, whichever worker commits them, so they stay valid.
        self.remember(committed_offsets(self._app))
        if not self._committed:
            return
        try:
            theirs = await self._broker_offsets(list(self._committed))
        except (KafkaError, OSError) as exc:  # unreachable or restarting: conclude nothing
            log.debug("broker watch: cannot read the group's offsets: %r", exc)
            await self._close()
            return
        if self._declare_if_lost(theirs):
            await self._close()
            await self._app.crash(self.lost)

    def remember(self, committed: Mapping[Any, int]) -> None:
        """Keep the highest committed offset seen per input partition (they only grow)."""
        mine = self._committed
        for tp, off in committed.items():
            if off and tp.topic in self._topics and off > mine.get(tp, 0):
                mine[tp] = off

    async def confirm_after_crash(self, wait_s: float = CONFIRM_WAIT_S) -> bool:
        """After the worker stopped on a crash: True if the broker lost what it committed.

        A crash can come before the timer's next check while the broker loses its data (a
        rebalance with the topics gone, say), and a worker restarted without the marker would
        then recover from a changelog that no longer exists. Retries for `wait_s` while the
        broker cannot be reached (it may be restarting); runs on a new event loop.
        """
        if self.lost is not None:
            return True
        self._admin = None  # bound to the stopped worker's loop
        self.remember(committed_offsets(self._app))  # what Faust still has of it
        if not self._committed:
            return False
        deadline = time.monotonic() + wait_s
        while True:
            try:
                theirs = await self._broker_offsets(list(self._committed))
                break
            except (KafkaError, OSError) as exc:
                await self._close()
                if time.monotonic() >= deadline:
                    log.debug("broker watch: cannot read the group's offsets: %r", exc)
                    return False
                await asyncio.sleep(CONFIRM_RETRY_S)
        await self._close()
        return self._declare_if_lost(theirs)

    def _declare_if_lost(self, theirs: dict[Any, int]) -> bool:
        """Compare with the broker's offsets; on a loss, log it and leave the marker."""
        behind = {
            tp: (off, theirs.get(tp))
            for tp, off in self._committed.items()
            if (theirs.get(tp) or 0) < off
        }
        if not behind:
            return False
        shown = ", ".join(
            f"{tp.topic}[{tp.partition}] committed {ours}, broker has {theirs_ or 'none'}"
            for tp, (ours, theirs_) in sorted(behind.items())[:4]
        )
        self.lost = BrokerDataLost(
            f"the broker lost this worker's data: {shown}. It restarted without its storage or "
            "the topics were deleted. Stopping with exit code "
            f"{EXIT_BROKER_DATA_LOST}; on restart the worker recreates its topics and starts "
            "with empty run states (decisions published before the loss are gone with it)"
        )
        log.error("%s", self.lost)
        mark_data_lost(self._data_dir, str(self.lost))
        return True

    async def _broker_offsets(self, tps: list[Any]) -> dict[Any, int]:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self._bootstrap,
                request_timeout_ms=1500,
                **self._security.aiokafka_kwargs(),
            )
            await admin.start()
            self._admin = admin
        # Partitions named explicitly: Tansu's answer for "all partitions" does not decode.
        asked = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        got = await self._admin.list_consumer_group_offsets(self._group, partitions=asked)
        by_key = {(tp.topic, tp.partition): tp for tp in tps}
        return {
            by_key[(tp.topic, tp.partition)]: meta.offset
            for tp, meta in got.items()
            if (tp.topic, tp.partition) in by_key and meta.offset >= 0
        }

    async def _close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await admin.close()
            except (KafkaError, OSError):
                log.debug("broker watch: closing the admin client failed", exc_info=True)
