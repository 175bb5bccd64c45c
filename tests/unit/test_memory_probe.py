"""bench/memory_probe.py's readings (what `bench/memory.py --probe` attributes memory with)
agree with the process they read: a block it allocates shows up where it should."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import memory_probe  # glibc's malloc_info: the suites run on Linux with glibc

REPO = Path(__file__).resolve().parents[2]
_BLOCK = 64 << 20  # far above glibc's mmap threshold: one mapped, resident chunk
# Read in a fresh interpreter: the readings are the whole process's, and in the suite's own
# process the tests before this one can leave threads and allocator state behind (once, run
# after the integration suites in one process, the block did not show in the mappings).
_MEASURE = f"""
import json
from bench import memory_probe
before_maps, before_malloc = memory_probe.smaps(), memory_probe.malloc_info()
block = b"x" * {_BLOCK}  # written, so resident
after_maps, after_malloc = memory_probe.smaps(), memory_probe.malloc_info()
print(json.dumps({{
    "anon_mmap": after_maps["anon_mmap"] - before_maps["anon_mmap"],
    "mmapped": after_malloc["mmapped"] - before_malloc["mmapped"],
    "size": len(block),
}}))
"""


def test_a_large_block_shows_in_the_anonymous_mappings_and_in_glibcs_mapped_chunks() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE], capture_output=True, text=True, cwd=REPO, timeout=60,
        check=True,
    )  # fmt: skip
    grown = json.loads(proc.stdout)
    assert grown["anon_mmap"] >= _BLOCK * 0.95
    assert grown["mmapped"] >= _BLOCK
    assert grown["size"] == _BLOCK


def test_the_mappings_add_up_to_the_resident_size() -> None:
    resident = sum(memory_probe.smaps().values())
    with open("/proc/self/status") as status:
        vm_rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    assert abs(resident - vm_rss) <= 0.05 * vm_rss


def test_small_objects_fill_pymallocs_blocks() -> None:
    before = memory_probe.pymalloc_info()
    kept = [str(i) * 3 for i in range(200_000)]  # ~60 B each, pymalloc's
    after = memory_probe.pymalloc_info()
    assert after["arenas_bytes"] > 0
    assert after["used_blocks"] - before["used_blocks"] >= 200_000 * 40
    assert len(kept) == 200_000


def test_deep_size_counts_each_reachable_object_once() -> None:
    shared = ["a" * 100, 12345678901234567890]
    expected = sys.getsizeof(shared) + sum(sys.getsizeof(x) for x in shared)
    assert memory_probe.deep_size(shared) == expected
    outer = [shared, shared]
    assert memory_probe.deep_size(outer) == sys.getsizeof(outer) + expected
