"""LOOPGUARD_MALLOC_TRIM: the worker hands glibc's free heap back after each checkpoint, and
keeps large blocks mapped (a fixed mmap threshold) so that freeing them returns them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.worker.memory import (
    M_MMAP_THRESHOLD,
    HeapTrimmer,
    fix_mmap_threshold,
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


def test_the_mmap_threshold_is_fixed_at_128_kib_through_mallopt() -> None:
    calls: list[tuple[int, int]] = []

    def fake_mallopt(param: int, value: int) -> int:
        calls.append((param, value))
        return 1

    assert fix_mmap_threshold(fake_mallopt) is True
    assert calls == [(M_MMAP_THRESHOLD, 128 * 1024)]
    assert fix_mmap_threshold(lambda param, value: 0) is False  # glibc refused it


def test_glibc_accepts_the_mmap_threshold() -> None:
    assert fix_mmap_threshold() == _is_glibc()
