"""A worker that reports where its memory sits: `python bench/memory_probe.py` (bench/memory.py).

Runs exactly `loopguard worker` (same environment, same code), plus one web page,
`GET /memprobe`, answering a JSON breakdown of the process's resident memory:

    rss, smaps          /proc: resident anonymous heap ([heap], brk) vs anonymous mmaps vs files
    malloc              glibc malloc_info: bytes in use vs free-but-kept (RocksDB, big objects)
    pymalloc            sys._debugmallocstats: arenas, used vs free bytes in pools/arenas
    rocksdb             per partition DB: memtable bytes and entries, block cache, readers
    cache               RunDriver's live runs: and their deep size (sys.getsizeof walk)
    table               Faust's key index / memory store sizes
    tracemalloc         top allocation sites, when started with PYTHONTRACEMALLOC=N (by line,
                        or by whole traceback with MEMPROBE_TRACE_GROUP=traceback)
    census              gc-tracked object types that grew most (MEMPROBE_CENSUS=1)

`GET /memprobe?trim=1` first runs gc.collect() and malloc_trim(0) and reports both RSS figures
(what glibc was holding as free). Nothing in streams/ is changed; the probe wraps
`streams.worker.assemble` to reach the app and processor. With MEMPROBE_TABLE_OPTIONS (a JSON
object, e.g. {"write_buffer_size": 4194304}) it passes `options=` to the run-state table, the
hook Faust offers for RocksDB options (faust/stores/rocksdb.py: RocksDBOptions).
tests/unit/test_memory_probe.py holds the /proc and allocator readings to the process's own.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.memory import rss_bytes  # noqa: E402

_CHANGELOG_APPLIED = {"events": 0, "batches": 0, "store_sets": 0}
_libc = ctypes.CDLL("libc.so.6")
_libc.fdopen.restype = ctypes.c_void_p
_libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]


def smaps() -> dict[str, int]:
    """Resident bytes by kind of mapping: brk heap, anonymous mmaps, file-backed, stack."""
    out = {"heap": 0, "anon_mmap": 0, "file": 0, "other": 0}
    kind = "other"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split()
            path = parts[5] if len(parts) > 5 else ""
            if path == "[heap]":
                kind = "heap"
            elif not path:
                kind = "anon_mmap"
            elif path.startswith("/"):
                kind = "file"
            else:
                kind = "other"
        elif line.startswith("Rss:"):
            out[kind] += int(line.split()[1]) * 1024
    return out


def malloc_info() -> dict[str, int]:
    """glibc's view over all its arenas (malloc_info(3); mallinfo2 sees the main arena only).

    `in_use` is what C code (RocksDB, Python objects over 512 B) holds, `free_kept` what glibc
    keeps in its arenas after frees, `mmapped` the large chunks it maps one by one.
    """
    with tempfile.TemporaryFile() as tmp:
        stream = _libc.fdopen(os.dup(tmp.fileno()), b"w")
        _libc.malloc_info(0, stream)
        _libc.fclose(stream)
        tmp.seek(0)
        text = tmp.read().decode()
    tail = text[text.rindex("</heap>") :] if "</heap>" in text else text

    def total(kind: str, part: str = "total") -> int:
        m = re.search(rf'<{part} type="{kind}"(?: count="\d+")? size="(\d+)"/>', tail)
        return int(m.group(1)) if m else 0

    system = total("current", "system")
    free = total("fast") + total("rest")
    return {
        "in_use": system - free,
        "free_kept": free,
        "arena_total": system,
        "mmapped": total("mmap"),
        "arenas": text.count("<heap nr="),
    }


def pymalloc_info() -> dict[str, int]:
    """pymalloc's arenas and how full they are (parsed from sys._debugmallocstats)."""
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, int] = {}
    wanted = {
        "# arenas allocated total": "arenas_allocated_total",
        "# arenas reclaimed": "arenas_reclaimed",
        "# arenas highwater mark": "arenas_highwater",
        "# arenas allocated current": "arenas_current",
        "# bytes in allocated blocks": "used_blocks",
        "# bytes in available blocks": "free_blocks",
    }
    for line in text.splitlines():
        name, _, value = line.partition("=")
        key = wanted.get(name.strip())
        if key is None and name.strip() == "Total" and "arenas_bytes" not in out:
            key = "arenas_bytes"  # the first Total: bytes in pymalloc arenas
        if key is not None:
            out[key] = int(value.strip().replace(",", ""))
    return out


def deep_size(root: Any) -> int:
    """Bytes reachable from `root` (sys.getsizeof walk; shared objects counted once)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif not isinstance(obj, str | bytes | int | float | bool):
            slots = getattr(type(obj), "__slots__", ())
            for name in slots if isinstance(slots, tuple) else (slots,):
                stack.append(getattr(obj, name, None))
            d = getattr(obj, "__dict__", None)
            if d is not None:
                stack.append(d)
            if hasattr(obj, "__dataclass_fields__") and not slots and d is None:
                for name in obj.__dataclass_fields__:
                    stack.append(getattr(obj, name, None))
    return total


_ROCKS_PROPS = (
    "rocksdb.cur-size-all-mem-tables",
    "rocksdb.size-all-mem-tables",
    "rocksdb.num-entries-active-mem-table",
    "rocksdb.num-immutable-mem-table",
    "rocksdb.block-cache-usage",
    "rocksdb.estimate-table-readers-mem",
    "rocksdb.estimate-num-keys",
)


def rocksdb_info(table: Any) -> dict[str, Any]:
    """Memtable and cache figures of each open partition DB, summed and per partition."""
    store = table.data
    dbs = getattr(store, "_dbs", None)
    if dbs is None:
        data = getattr(store, "data", {})
        return {
            "store": type(store).__module__,
            "keys": len(data),
            "deep_bytes": deep_size(data) + deep_size(getattr(store, "_key_partition", {})),
        }
    out: dict[str, Any] = {"store": type(store).__module__, "partitions": {}}
    totals: dict[str, int] = {}
    for partition, db in sorted(dbs.items()):
        props = {}
        for prop in _ROCKS_PROPS:
            try:
                value = db.property_int_value(prop)
            except Exception:  # a probe: report what is there
                value = None
            if value is not None:
                short = prop.removeprefix("rocksdb.")
                props[short] = value
                totals[short] = totals.get(short, 0) + value
        props["sequence"] = db.latest_sequence_number()  # RocksDB writes so far
        totals["sequence"] = totals.get("sequence", 0) + props["sequence"]
        out["partitions"][partition] = props
    out["total"] = totals
    out["key_index"] = len(getattr(store, "_key_index", ()))
    opts = store.rocksdb_options
    out["options"] = {
        "write_buffer_size": opts.write_buffer_size,
        "max_write_buffer_number": opts.max_write_buffer_number,
        "block_cache_size": opts.block_cache_size,
    }
    return out


def tracemalloc_top(probe: dict[str, Any], limit: int = 25) -> list[dict[str, Any]]:
    """Allocation sites (file:line) that grew most since the first /memprobe call.

    Only when the worker runs under PYTHONTRACEMALLOC; the first call keeps the baseline.
    """
    if not tracemalloc.is_tracing():
        return []
    snap = tracemalloc.take_snapshot()
    snap = snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    base = probe.setdefault("tracemalloc_base", snap)
    group = os.environ.get("MEMPROBE_TRACE_GROUP", "lineno")  # or "traceback"
    stats = snap.compare_to(base, "traceback" if group == "traceback" else "lineno")
    stats.sort(key=lambda s: -s.size_diff)
    out: list[dict[str, Any]] = [{"total_growth": sum(s.size_diff for s in stats)}]
    for s in stats[:limit]:
        frames = [_where(f) for f in reversed(s.traceback)]  # innermost first
        out.append({"site": frames[0], "bytes": s.size_diff, "count": s.count_diff})
        if group == "traceback":
            out[-1]["stack"] = frames[:8]
    return out


def watch_peak(probe: dict[str, Any], every_s: float = 0.2) -> None:
    """Under PYTHONTRACEMALLOC with MEMPROBE_PEAK=1: from the first /memprobe call on, keep a
    snapshot of the traced heap at its highest (a thread samples the traced size and takes a
    snapshot each time it grew 5 % past the last one), for `peak_top`."""
    if not tracemalloc.is_tracing() or os.environ.get("MEMPROBE_PEAK") != "1":
        return
    import threading
    import time

    def watch() -> None:
        high = 0
        while True:
            time.sleep(every_s)
            now = tracemalloc.get_traced_memory()[0]
            if now > high * 1.05:
                probe["peak_snapshot"] = tracemalloc.take_snapshot()
                high = probe["peak_bytes"] = tracemalloc.get_traced_memory()[0]

    threading.Thread(target=watch, daemon=True).start()


def peak_top(probe: dict[str, Any], limit: int = 25) -> list[dict[str, Any]]:
    """Allocation sites at the traced heap's peak (`watch_peak`) against the first call's."""
    peak, base = probe.get("peak_snapshot"), probe.get("tracemalloc_base")
    if peak is None or base is None:
        return []
    stats = peak.compare_to(base, "lineno")
    stats.sort(key=lambda s: -s.size_diff)
    out: list[dict[str, Any]] = [{"total_growth": sum(s.size_diff for s in stats)}]
    out += [
        {"site": _where(s.traceback[0]), "bytes": s.size_diff, "count": s.count_diff}
        for s in stats[:limit]
    ]
    return out


def _where(frame: tracemalloc.Frame) -> str:
    where = frame.filename.replace(str(REPO) + "/", "")
    return f"{re.sub(r'.*/site-packages/', '', where)}:{frame.lineno}"


def type_census(probe: dict[str, Any], limit: int = 20) -> list[dict[str, Any]]:
    """The object types (those the cyclic collector tracks) whose counts grew most since the
    first /memprobe call, with their shallow sizes (MEMPROBE_CENSUS=1)."""
    if os.environ.get("MEMPROBE_CENSUS") != "1":
        return []
    counts: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        slot = counts.setdefault(name, [0, 0])
        slot[0] += 1
        slot[1] += sys.getsizeof(obj)
    base = probe.setdefault("census_base", counts)
    grown = [
        (n, c - base.get(n, [0, 0])[0], b - base.get(n, [0, 0])[1]) for n, (c, b) in counts.items()
    ]
    grown.sort(key=lambda g: -g[2])
    return [{"type": n, "count": c, "bytes": b} for n, c, b in grown[:limit]]


def acked_offsets(consumer: Any) -> dict[str, int]:
    """The acked-but-uncommitted offsets (`Consumer._acked`: the worker's `AckedOffsets`, or
    Faust's lists beside its `_acked_index` sets): how many are held, in how many ranges, and
    what Faust's containers take (a set's table never shrinks)."""
    lists = list(getattr(consumer, "_acked", {}).values())
    sets = list(getattr(consumer, "_acked_index", {}).values())
    return {
        "pending": sum(len(x) for x in lists),
        "ranges": sum(len(x.ranges) if hasattr(x, "ranges") else len(x) for x in lists),
        "index_len": sum(len(x) for x in sets),
        "index_bytes": sum(sys.getsizeof(x) for x in sets),
        "list_bytes": sum(sys.getsizeof(x) for x in lists),
        "by_partition": {
            f"{tp.topic}:{tp.partition}": [
                len(acked),
                min(acked, default=None),
                max(acked, default=None),
                getattr(consumer, "_committed_offset", {}).get(tp),
            ]
            for tp, acked in getattr(consumer, "_acked", {}).items()
        },
    }


def report(probe: dict[str, Any], trim: bool) -> dict[str, Any]:
    """The whole breakdown."""
    wiring, processor = probe["wiring"], probe["processor"]
    out: dict[str, Any] = {"rss": rss_bytes(os.getpid())}
    runs = {p: held.live for p, held in processor.driver.partitions.items()}
    packed = [run.packed for r in runs.values() for run in r.values() if run.packed is not None]
    out["cache"] = {
        "runs": sum(len(r) for r in runs.values()),
        "deep_bytes": deep_size(runs),
        "packed_runs": len(packed),  # streams/processing/hot.py
        "packed_bytes": sum(sys.getsizeof(p) for p in packed),
    }
    out["table"] = rocksdb_info(wiring.table)
    out["changelog_applied"] = dict(_CHANGELOG_APPLIED)  # table rows read back from Kafka
    out["checkpoints"] = probe["checkpoints"]
    from loopguard_fleet.streams.worker.memory import HeapTrimmer

    for hook in wiring.app.before_commit:  # the worker's malloc_trim (LOOPGUARD_MALLOC_TRIM)
        trimmer = getattr(hook, "__self__", None)
        if isinstance(trimmer, HeapTrimmer):
            out["trims"] = {"count": trimmer.trims, "seconds": trimmer.seconds}
    out["table_writes"] = probe["table_writes"]
    out["acks"] = acked_offsets(wiring.app.consumer)
    out["smaps"] = smaps()
    out["malloc"] = malloc_info()
    out["pymalloc"] = pymalloc_info()
    out["gc_objects"] = len(gc.get_objects())
    out["tracemalloc"] = tracemalloc_top(probe)
    if "peak_watch" not in probe:
        probe["peak_watch"] = True
        watch_peak(probe)
    out["tracemalloc_peak"] = peak_top(probe)
    out["census"] = type_census(probe)
    if trim:
        gc.collect()
        _libc.malloc_trim(0)
        trimmed = rss_bytes(os.getpid())
        out["after_trim"] = {"rss": trimmed, "smaps": smaps(), "malloc": malloc_info()}
    return out


def _install() -> None:
    """Wrap assemble() to add the page, and Table() to pass MEMPROBE_TABLE_OPTIONS."""
    import faust

    import loopguard_fleet.streams.worker.run as worker

    options = json.loads(os.environ.get("MEMPROBE_TABLE_OPTIONS") or "null")
    if options:
        original_table = faust.App.Table

        def table(self: Any, name: str, **kwargs: Any) -> Any:
            kwargs.setdefault("options", dict(options))
            return original_table(self, name, **kwargs)

        faust.App.Table = table  # type: ignore[method-assign]

    import faust.stores.memory
    import faust.stores.rocksdb

    counts = _CHANGELOG_APPLIED
    for store_class in (faust.stores.rocksdb.Store, faust.stores.memory.Store):
        original_apply = store_class.apply_changelog_batch

        def apply_changelog_batch(
            self: Any, batch: Any, *args: Any, _o: Any = original_apply
        ) -> Any:
            batch = list(batch)
            counts["events"] += len(batch)
            counts["batches"] += 1
            return _o(self, batch, *args)

        store_class.apply_changelog_batch = apply_changelog_batch  # type: ignore[method-assign]
        original_set = getattr(store_class, "_set", None)
        if original_set is None:  # the memory store is a plain dict
            continue

        def _set(self: Any, key: Any, value: Any, _o: Any = original_set) -> Any:
            counts["store_sets"] += 1
            return _o(self, key, value)

        store_class._set = _set  # type: ignore[method-assign]

    original = worker.assemble
    probe: dict[str, Any] = {}

    def assemble(settings: Any, metrics: Any = None) -> Any:
        wiring, processor = original(settings, metrics)
        probe.update(wiring=wiring, processor=processor, checkpoints=0, table_writes=0)
        driver = processor.driver
        take_dirty = driver.take_dirty  # every checkpoint (locked or not) starts here

        def counted() -> Any:  # how often states are written (memtable versions)
            taken = take_dirty()
            probe["checkpoints"] += 1
            probe["table_writes"] += len(taken)
            return taken

        driver.take_dirty = counted  # type: ignore[method-assign]

        @wiring.app.page("/memprobe")
        async def memprobe(self: Any, request: Any) -> Any:
            trim = request.query.get("trim") == "1"
            body = json.dumps(report(probe, trim)).encode()
            return self.bytes(body, content_type="application/json")

        return wiring, processor

    worker.assemble = assemble


if __name__ == "__main__":
    _install()
    from loopguard_fleet.streams.main import main

    sys.exit(main(["worker"]))
