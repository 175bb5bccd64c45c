"""LOOPGUARD_MALLOC_TRIM: the worker hands glibc's free heap back after each checkpoint, and
keeps large blocks mapped (a fixed mmap threshold) so that freeing them returns them, all but
the buffer asyncio reads every socket into (it stays on the heap)."""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import os
import resource
import socket
from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.worker.memory import (
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    SOCKET_READ_BYTES,
    HeapTrimmer,
    fix_thresholds,
    glibc_malloc_trim,
)
from loopguard_fleet.streams.worker.run import assemble


def _rss() -> int:
    """This process's resident bytes (/proc/self/statm: pages)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # type: ignore[union-attr]
    except (ValueError, OSError):
        return False


def test_glibc_is_found_exactly_when_this_process_runs_on_glibc() -> None:
    assert (glibc_malloc_trim() is not None) == _is_glibc()


def test_trimming_returns_the_free_heap_that_live_objects_keep_resident() -> None:
    trim = glibc_malloc_trim()
    assert trim is not None, "the worker's platform (Debian) has glibc"
    # 2 KB objects come from malloc's heap (pymalloc takes 512 B and under); keeping every
    # 32nd alive leaves 62 KB holes that free() alone never returns (only the heap's top).
    blocks = [bytes(2000) + bytes([i % 256]) for i in range(30_000)]
    kept = blocks[::32]
    del blocks
    before = _rss()
    trim(0)
    after = _rss()
    assert kept  # alive until here
    assert before - after > 20 * 2**20, (before, after)  # of the ~58 MB freed


def test_the_trimmer_runs_at_most_once_per_interval() -> None:
    calls: list[int] = []
    now = [100.0]

    def fake_trim(pad: int) -> int:
        calls.append(pad)
        return 1

    trimmer = HeapTrimmer(fake_trim, min_interval_s=1.0, clock=lambda: now[0])
    assert trimmer.trim() is True
    now[0] += 0.5
    assert trimmer.trim() is False
    now[0] += 0.6
    assert trimmer.trim() is True
    assert calls == [0, 0]
    assert trimmer.trims == 2


def test_without_glibc_the_trimmer_does_nothing() -> None:
    trimmer = HeapTrimmer(None)
    assert trimmer.enabled is False
    assert trimmer.trim() is False
    assert trimmer.trims == 0


def test_the_worker_trims_last_in_its_commit_hooks_after_the_checkpoint(tmp_path: Path) -> None:
    wiring, processor = assemble(Settings(data_dir=tmp_path, store="memory://"))
    hooks = wiring.app.before_commit
    assert hooks[0] == processor.before_commit  # checkpoint and producer drain first
    trimmer = hooks[-1].__self__
    assert isinstance(trimmer, HeapTrimmer)
    assert trimmer.enabled == _is_glibc()
    calls: list[int] = []
    trimmer._trim = lambda pad: calls.append(pad) or 1

    async def commit_hooks() -> None:  # as LoopGuardApp's consumer runs them before a commit
        for hook in hooks:
            await hook()

    asyncio.run(commit_hooks())
    assert calls == [0]


def test_the_trim_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().malloc_trim is True
    monkeypatch.setenv("LOOPGUARD_MALLOC_TRIM", "false")
    settings = Settings(data_dir=tmp_path, store="memory://")
    assert settings.malloc_trim is False
    wiring, processor = assemble(settings)
    assert wiring.app.before_commit == [processor.before_commit]


def test_the_thresholds_are_fixed_through_mallopt() -> None:
    calls: list[tuple[int, int]] = []

    def fake_mallopt(param: int, value: int) -> int:
        calls.append((param, value))
        return 1

    assert fix_thresholds(fake_mallopt) is True
    assert calls == [(M_MMAP_THRESHOLD, 272 * 1024), (M_TRIM_THRESHOLD, 1024 * 1024)]
    assert fix_thresholds(lambda param, value: 0) is False  # glibc refused it
    assert fix_thresholds(lambda param, value: int(param == M_MMAP_THRESHOLD)) is False


def test_glibc_accepts_the_thresholds() -> None:
    assert fix_thresholds() == _is_glibc()


def test_the_socket_read_buffer_is_asyncios() -> None:
    # A private name of asyncio, read here only: the thresholds are sized above it.
    assert asyncio.selector_events._SelectorSocketTransport.max_size == SOCKET_READ_BYTES


def test_reading_a_socket_as_asyncio_does_faults_no_fresh_pages_per_read() -> None:
    # Each read allocates a SOCKET_READ_BYTES buffer; mapped (glibc's 128 KiB threshold) or
    # trimmed off the heap's top when freed, every read faulted its first page in again.
    assert fix_thresholds() is True, "the worker's platform (Debian) has glibc"
    sender, receiver = socket.socketpair()
    with sender, receiver:

        def read(times: int) -> None:
            for _ in range(times):
                sender.send(b"x" * 100)
                assert receiver.recv(SOCKET_READ_BYTES) == b"x" * 100

        read(100)  # the heap grown once
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        read(2_000)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    # ~4,000 at an mmap threshold of 128 KiB, ~2,000 at a trim threshold of 128 KiB (glibc's)
    assert faults < 500, faults
