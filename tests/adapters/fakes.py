"""A RuntimeClient fake for the adapters' tests without a broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from loopguard_fleet.streams.client import RuntimeClient, VerdictReply

NOTE = (
    "[System note: Tool-loop warning after 10 repeated calls. Change your approach or stop if "
    "you are not making progress.]"
)


class FakeClient(RuntimeClient):
    """A RuntimeClient that records what it publishes and answers verdicts from a script."""

    def __init__(
        self,
        replies: Mapping[str, VerdictReply] | None = None,
        default: VerdictReply | None = None,
        **kw: Any,
    ) -> None:
        super().__init__("127.0.0.1:9", **kw)
        self.sent: list[dict[str, Any]] = []
        self.replies = dict(replies or {})
        self.default = default or VerdictReply("allow", is_timeout=True)
        self.control: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self.control.put_nowait(None)

    async def publish(self, event: Mapping[str, Any]) -> None:
        self.sent.append(dict(event))

    async def verdict(self, run_id: str, tool_call_id: str, timeout: float = 2.0) -> VerdictReply:  # noqa: ASYNC109
        return self.replies.get(tool_call_id, self.default)

    async def commands(self) -> AsyncIterator[dict[str, Any]]:
        while (msg := await self.control.get()) is not None:
            yield msg
