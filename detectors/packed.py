"""A run's state at rest in a worker's memory: `pack` and `unpack`, RunState's compact form.

The stream worker keeps its most recently used runs' states as objects and the others packed
(streams/processing/hot.py; docs/performance.md). As objects, a
record of a run that reads a new file at every call is five objects (the record, its args
hash text, its outcome key, its event id, a list slot: ~340 B); packed, it is its two digests,
three small indexes, a seq delta and its event id's characters (~80 B), and a record whose
call and outcome recur in the run costs a few bytes.

The form never leaves the process: the table and the changelog keep the JSON form
(detectors/state.py, docs/wire-format.md), so it may change with the code, and `unpack` only
reads what this version's `pack` wrote. It is `marshal` (the standard library's C codec, exact
for str, bytes, int, bool, None and tuples; never given outside data here) of one tuple:

    the state's scalars, buckets, guard observations and held events, as they are;
    the run's tools, in first use;
    its hash keys (detectors/hashkeys.py), the args hashes' then the outcomes', in first use:
        per key the index of its prefix (past the last for a key that is text), the 32-byte
        digests joined, the text keys;
    per record: its tool's and args key's index, its outcome key's index + 1 (0: pending),
        its seq as a delta from the record before, its event id (None, the id, or the index
        of its shared `<prefix>` when the id is `<prefix><seq>`), its rare fields (all None:
        None);
    the run's critical verdicts (the openclaw-2026.9 recovery allowance);

each column of integers in the narrowest array type that holds it. Records, hash keys and
texts come back as `RunState.from_doc` makes them: the keys and tools shared with other runs
(detectors/sharing.py), an event id prefix shared by the run's records.
"""

from __future__ import annotations

import marshal
from array import array
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import Any

from loopguard_fleet.detectors.hashkeys import HashKey, hash_key, hash_text
from loopguard_fleet.detectors.records import Record, record_cells
from loopguard_fleet.detectors.sharing import share
from loopguard_fleet.detectors.state import RunState

__all__ = ["pack", "unpack"]

_DIGEST = 32


def _column(values: list[int], signed: bool = False) -> tuple[str, bytes | tuple[int, ...]]:
    """The values as (array typecode, bytes), in the narrowest type that holds them all; as
    ("", the values) when one needs more than 64 bits (a seq is any JSON integer)."""
    if not values:
        return "B", b""
    top = max(values)
    if signed:
        top = max(top, -min(values) - 1)
        code = "b" if top < 1 << 7 else "h" if top < 1 << 15 else "i" if top < 1 << 31 else "q"
        if top >= 1 << 63:
            return "", tuple(values)
    else:
        code = "B" if top < 1 << 8 else "H" if top < 1 << 16 else "I" if top < 1 << 32 else "Q"
    return code, array(code, values).tobytes()


def _ints(column: tuple[str, bytes | tuple[int, ...]]) -> Sequence[int]:
    """A column `_column` wrote."""
    code, raw = column
    if not code:
        assert isinstance(raw, tuple)
        return raw
    out = array(code)
    out.frombytes(raw)  # type: ignore[arg-type]
    return out


def _key_table(
    keys: list[HashKey],
) -> tuple[tuple[bytes, ...], tuple[str, bytes | tuple[int, ...]], bytes, tuple[str, ...]]:
    """(prefixes, each key's kind column, the digests joined, the text keys) of hash keys."""
    digest_keys = [k for k in keys if type(k) is bytes]
    texts = tuple(k for k in keys if type(k) is str)  # a privacy-mode edge's own hashes
    prefixes = {p: i for i, p in enumerate(dict.fromkeys(k[:-_DIGEST] for k in digest_keys))}
    text_kind = len(prefixes)  # a text key's kind: past every prefix's index
    kinds = [prefixes[k[:-_DIGEST]] if type(k) is bytes else text_kind for k in keys]
    digests = b"".join([k[-_DIGEST:] for k in digest_keys])
    return tuple(prefixes), _column(kinds), digests, texts


def _keys(
    prefixes: tuple[bytes, ...],
    kinds: tuple[str, bytes | tuple[int, ...]],
    digests: bytes,
    texts: tuple[str, ...],
) -> list[HashKey]:
    """The hash keys `_key_table` wrote, shared with other runs' (detectors/sharing.py)."""
    keys: list[HashKey] = []
    text_kind = len(prefixes)
    d = t = 0
    for kind in _ints(kinds):
        if kind == text_kind:
            keys.append(share(texts[t]))
            t += 1
        else:
            keys.append(share(prefixes[kind] + digests[d : d + _DIGEST]))
            d += _DIGEST
    return keys


def pack(state: RunState) -> bytes:
    """The state in its compact form (`unpack` gives an equal state back)."""
    history = state.history
    tools: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    results: tuple[HashKey | None, ...] = ()
    seqs: tuple[int, ...] = ()
    eids: tuple[str | tuple[str] | None, ...] = ()
    rares: tuple[Any, ...] = ()
    if history:
        tools, args, results, seqs, eids, rares = zip(*map(record_cells, history), strict=True)
    tool_index = {t: i for i, t in enumerate(dict.fromkeys(tools))}
    arg_index = {a: i for i, a in enumerate(dict.fromkeys(args))}
    result_keys = list(dict.fromkeys(r for r in results if r is not None))
    result_index = {r: i for i, r in enumerate(result_keys, 1)}  # 0: pending
    keys = [hash_key(a) for a in arg_index] + result_keys
    eprefixes: dict[str, int] = {}
    first = seqs[0] if seqs else 0
    return marshal.dumps(
        (
            state.agent_id,
            tuple(state.buckets.items()),
            state.guard_remaining,
            state.guard_seq,
            tuple(state.guard_obs),
            state.guard_policy,
            state.tool_seq,
            state.life_seq,
            state.ended_seq,
            state.life_done,
            tuple(state.held),
            tuple(tool_index),
            len(arg_index),
            *_key_table(keys),
            _column([tool_index[t] for t in tools]),
            _column([arg_index[a] for a in args]),
            _column([0 if r is None else result_index[r] for r in results]),
            first,
            _column([b - a for a, b in zip((first, *seqs), seqs, strict=False)], signed=True),
            tuple(
                eprefixes.setdefault(e[0], len(eprefixes)) if type(e) is tuple else e for e in eids
            ),
            tuple(eprefixes),
            None if rares.count(None) == len(rares) else rares,
            state.critical_loops,
        )
    )


def unpack(raw: bytes) -> RunState:
    """The state `pack` packed."""
    (
        agent_id,
        buckets,
        guard_remaining,
        guard_seq,
        guard_obs,
        guard_policy,
        tool_seq,
        life_seq,
        ended_seq,
        life_done,
        held,
        tool_names,
        n_args,
        prefixes,
        kinds,
        digests,
        texts,
        tool_col,
        arg_col,
        result_col,
        first,
        deltas,
        eids,
        eprefixes,
        rares,
        critical_loops,
    ) = marshal.loads(raw)
    keys = _keys(prefixes, kinds, digests, texts)
    tools = [share(t) for t in tool_names]
    arg_texts = [hash_text(k) for k in keys[:n_args]]
    results: list[HashKey | None] = [None, *keys[n_args:]]
    if eprefixes:  # `<prefix><seq>` ids: one `(prefix,)` for the run's records
        # Of any length to the type checker: mypyc keeps a fixed-length tuple unboxed and would
        # box a fresh copy for each record, where the run's records must share one.
        shared: list[tuple[str, ...]] = [(p,) for p in eprefixes]
        eids = [shared[e] if type(e) is int else e for e in eids]
    seqs = accumulate(_ints(deltas), initial=first)
    next(seqs)
    history = list(
        map(
            Record.from_cells,
            map(tools.__getitem__, _ints(tool_col)),
            map(arg_texts.__getitem__, _ints(arg_col)),
            map(results.__getitem__, _ints(result_col)),
            seqs,
            eids,
            repeat(None) if rares is None else rares,
        )
    )
    return RunState(
        history=history,
        buckets=dict(buckets),
        agent_id=agent_id,
        guard_remaining=guard_remaining,
        guard_seq=guard_seq,
        guard_obs=list(guard_obs),
        guard_policy=guard_policy,
        tool_seq=tool_seq,
        life_seq=life_seq,
        ended_seq=ended_seq,
        life_done=life_done,
        held=list(held),
        critical_loops=critical_loops,
    )
