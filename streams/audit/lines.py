"""Numbered non-blank lines of one pass over a byte stream: the loop every line of a file
replay goes through, compiled with the replayer (setup.py). `FileInput` (inputs.py) is the
source that opens, reports and closes the file."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

__all__ = ["LineSource", "NumberedLines"]


class LineSource(Protocol):
    """What `NumberedLines` reads: a stream opened for one pass, and how to end it."""

    def open(self) -> Iterator[bytes]:
        """Open the stream for one pass (a file object is its own iterator)."""
        ...

    def failed(self, exc: OSError | EOFError, line: int) -> Exception:
        """The error to raise for a read that failed after line `line`."""
        ...

    def close(self, stream: Iterator[bytes]) -> None:
        """End the pass (read to its end, failed, or dropped unfinished)."""
        ...


class NumberedLines:
    """(1-based line number, line) of each non-blank line of one pass over a source (an
    `Iterator[tuple[int, bytes]]`, typed as one by its caller): the stream opens at the first
    `next`, and closes once, when the pass ends however it ends.

    An iterator class, not a generator: a compiled generator dropped unfinished (a strict
    replay stopping at a bad line) never runs its `finally`, and the file would stay open."""

    def __init__(self, source: LineSource) -> None:
        self._source = source
        self._stream: Iterator[bytes] | None = None
        self._n = 0
        self._started = False

    def __iter__(self) -> NumberedLines:
        return self

    # `object`, not `tuple[int, bytes]`: mypyc would put a method returning its unboxed tuple
    # in the iterator slot, which takes a function returning an object (a C type error).
    def __next__(self) -> object:
        stream = self._stream
        if stream is None:
            if self._started:
                raise StopIteration
            self._started = True  # one pass: an open that fails ends it too
            stream = self._stream = self._source.open()
        try:
            # `next`, not a `for` over the stream: each `for` asks the file for its iterator
            # again, and a file answers that by looking up whether it is closed (~0.6 % of M).
            while (line := next(stream, None)) is not None:
                self._n += 1
                if not line.isspace():
                    return self._n, line
        except (EOFError, OSError) as exc:
            self._end()
            raise self._source.failed(exc, self._n) from None
        self._end()
        raise StopIteration

    def _end(self) -> None:
        stream = self._stream
        self._stream = None
        if stream is not None:
            self._source.close(stream)

    def __del__(self) -> None:
        self._end()  # dropped unfinished: the file closes, as a generator's `finally` would
