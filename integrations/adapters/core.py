"""What every framework adapter shares: publish, gate, enforce, through `RuntimeClient`.

    async with LoopGuard(RuntimeClient("127.0.0.1:9092")) as guard:
        gate = await guard.before_call("thread-1", "main", "read", {"path": "/a"}, "c1")
        if gate.is_allowed:
            result = ...  # run the tool
            await guard.after_call(gate, result=result)
        else:
            ...  # hand gate.message to the model as the tool's refusal

The adapters translate their framework's hooks to `before_call` / `after_call` / `compaction`
/ `end` and a `Gate` to the framework's refusal; the rules live here once:
- gate mode publishes the call with `want_verdict` and waits at most `verdict_timeout`; on
  expiry (or an undeliverable event) it fails open, or closed with `fail_closed=True`;
- a blocked call publishes no tool_result: LoopGuard's own veto is no outcome of the tool
  (the OpenClaw plugin's rule, docs/semantics.md §3);
- an `abort_run` command marks the run: its later calls are refused without asking, and the
  adapter ends the run its framework's way;
- a warning verdict's `note` is handed to the model appended to the tool result
  (`with_note`); the raw outcome is what LoopGuard records;
- privacy mode is the client's (`RuntimeClient(privacy=True)` hashes at the edge).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Mapping
from types import TracebackType
from typing import Final

from loopguard_fleet.adapters.gate import (
    ABORT_MESSAGE,
    FALLBACK_BLOCK_MESSAGE,
    TIMEOUT_BLOCK_MESSAGE,
    Gate,
)
from loopguard_fleet.detectors.values import JSON
from loopguard_fleet.streams.client import (
    MISSING,
    ClientError,
    Missing,
    RunHandle,
    RuntimeClient,
    VerdictReply,
)

__all__ = ["LoopGuard", "jsonable"]

log = logging.getLogger(__name__)

_MAX_REMEMBERED: Final = 10_000
_LOOP_EVENT_WAIT: Final = 0.05  # the loop_event precedes its verdict on the partition


def jsonable(value: object) -> JSON:
    """A framework value as JSON: containers recursively, models dumped, anything else str()."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)  # pydantic models (tool args, framework parts)
    if callable(dump):
        with contextlib.suppress(TypeError, ValueError):
            return jsonable(dump(mode="json"))
    return str(value)


class LoopGuard:
    """One runtime's LoopGuard session: a `RuntimeClient`, its runs, and the gate's rules."""

    def __init__(
        self,
        client: RuntimeClient,
        *,
        gate: bool = True,
        verdict_timeout: float = 0.5,
        fail_closed: bool = False,
        show_warnings: bool = True,
        max_runs: int = 10_000,
    ) -> None:
        self.client = client
        self.gate = gate
        self.verdict_timeout = verdict_timeout
        self.fail_closed = fail_closed
        self.show_warnings = show_warnings
        self._max_runs = max_runs
        self._runs: OrderedDict[str, RunHandle] = OrderedDict()
        self._aborted: OrderedDict[str, str] = OrderedDict()
        self._loop_events: OrderedDict[str, Mapping[str, JSON]] = OrderedDict()
        self._loop_waiters: dict[str, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopGuard:
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
        """Start the client and the reader of its commands (aborts, loop events)."""
        await self.client.start()
        self._reader = asyncio.create_task(self._read_commands(), name="loopguard-adapter")

    async def close(self) -> None:
        """Close the client (flushing what was published) and stop the command reader."""
        try:
            await self.client.close()
        finally:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
                self._reader = None

    def run(
        self, run_id: str, agent_id: str | None = None, session_key: str | None = None
    ) -> RunHandle:
        """The publishing handle of one run (kept, so its seq continues across calls)."""
        handle = self._runs.get(run_id)
        if handle is None:
            handle = self.client.run(run_id, agent_id=agent_id, session_key=session_key)
            self._runs[run_id] = handle
            if len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)
        self._runs.move_to_end(run_id)
        return handle

    def abort_reason(self, run_id: str) -> str | None:
        """The reason LoopGuard aborted this run, or None while it runs."""
        return self._aborted.get(run_id)

    async def before_call(
        self,
        run_id: str,
        agent_id: str | None,
        tool: str,
        args: JSON,
        tool_call_id: str | None = None,
    ) -> Gate:
        """Publish a tool call; in gate mode wait for its verdict and say whether it may run."""
        handle = self.run(run_id, agent_id)
        reason = self._aborted.get(run_id)
        if reason is not None:  # no event: the run is over for LoopGuard
            return Gate("abort", run_id, tool_call_id or "", tool, args, message=reason)
        try:
            call_id = await handle.tool_call(tool, args, tool_call_id, want_verdict=self.gate)
        except ClientError as exc:
            log.warning("loopguard: tool call of run %s not delivered: %s", run_id, exc)
            return self._unanswered(run_id, tool_call_id or "", tool, args)
        if not self.gate:
            return Gate("allow", run_id, call_id, tool, args)
        reply = await handle.verdict(call_id, timeout=self.verdict_timeout)
        if reply.is_timeout:
            return self._unanswered(run_id, call_id, tool, args)
        if reply.decision == "block":
            message = reply.message or await self._loop_message(reply)
            return Gate(
                "block", run_id, call_id, tool, args,
                message=message or FALLBACK_BLOCK_MESSAGE, detector=reply.detector,
            )  # fmt: skip
        note = reply.note if reply.decision == "warn" and self.show_warnings else None
        return Gate("allow", run_id, call_id, tool, args, note=note, detector=reply.detector)

    def _unanswered(self, run_id: str, call_id: str, tool: str, args: JSON) -> Gate:
        if self.fail_closed:
            return Gate(
                "block", run_id, call_id, tool, args, TIMEOUT_BLOCK_MESSAGE, is_timeout=True
            )
        return Gate("allow", run_id, call_id, tool, args, is_timeout=True)

    async def after_call(
        self,
        gate: Gate,
        *,
        result: object | Missing = MISSING,
        error: object | Missing = MISSING,
    ) -> None:
        """Publish the outcome of a call the gate allowed (a refused call has none)."""
        if not gate.is_allowed:
            return
        handle = self.run(gate.run_id)
        try:
            if not isinstance(error, Missing):
                await handle.tool_result(
                    gate.tool_call_id, gate.tool, gate.args,
                    error=error if isinstance(error, BaseException) else jsonable(error),
                )  # fmt: skip
            else:
                outcome = result if isinstance(result, Missing) else jsonable(result)
                await handle.tool_result(gate.tool_call_id, gate.tool, gate.args, result=outcome)
        except ClientError as exc:
            log.warning("loopguard: tool result of run %s not delivered: %s", gate.run_id, exc)

    async def compaction(self, run_id: str) -> None:
        """Publish a compaction (the framework summarised the run's history)."""
        with contextlib.suppress(ClientError):
            await self.run(run_id).compaction()

    async def end(self, run_id: str) -> None:
        """Publish run_end and forget the run."""
        handle = self._runs.pop(run_id, None)
        if handle is not None:
            with contextlib.suppress(ClientError):
                await handle.end()

    async def _loop_message(self, reply: VerdictReply) -> str | None:
        """The message of the loop_event behind a block (read from the control topic)."""
        trigger = reply.payload.get("trigger_event_id")
        if not isinstance(trigger, str):
            return None
        if trigger not in self._loop_events:
            waiter = self._loop_waiters.setdefault(
                trigger, asyncio.get_running_loop().create_future()
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), _LOOP_EVENT_WAIT)
            self._loop_waiters.pop(trigger, None)
        message = self._loop_events.get(trigger, {}).get("message")
        return message if isinstance(message, str) and message else None

    async def _read_commands(self) -> None:
        async for msg in self.client.commands():
            self.observe(msg)

    def observe(self, msg: Mapping[str, JSON]) -> None:
        """Take in one control message of this client's runs (aborts, loop events)."""
        run_id = msg.get("run_id")
        if not isinstance(run_id, str):
            return
        if msg.get("type") == "loop_event":
            trigger = msg.get("trigger_event_id")
            if isinstance(trigger, str):
                self._loop_events[trigger] = msg
                if len(self._loop_events) > _MAX_REMEMBERED:
                    self._loop_events.popitem(last=False)
                waiter = self._loop_waiters.get(trigger)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        elif (
            msg.get("type") == "command"
            and msg.get("command") == "abort_run"
            and run_id not in self._aborted
        ):
            reason = msg.get("reason")
            self._aborted[run_id] = reason if isinstance(reason, str) else ABORT_MESSAGE
            log.warning("loopguard: run %s aborted (%s)", run_id, msg.get("detector"))
            if len(self._aborted) > _MAX_REMEMBERED:
                self._aborted.popitem(last=False)
