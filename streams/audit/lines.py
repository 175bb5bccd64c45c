"""Numbered non-blank lines of one pass over a byte stream: the loop every line of a file
replay goes through, compiled with the replayer (setup.py). `FileInput` (inputs.py) is the
source that opens, reports and closes the file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

__all__ = ["LineSource", "numbered_lines"]


class LineSource(Protocol):
    """What `numbered_lines` reads: a stream opened for one pass, and how to end it."""

    def open(self) -> Iterable[bytes]:
        """Open the stream for one pass."""
        ...

    def failed(self, exc: OSError | EOFError, line: int) -> Exception:
        """The error to raise for a read that failed after line `line`."""
        ...

    def close(self, stream: Iterable[bytes]) -> None:
        """End the pass (read to its end, failed, or abandoned)."""
        ...


def numbered_lines(source: LineSource) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) of each non-blank line; the stream opens at the first
    `next`, as a generator's body runs, and closes when the pass ends however it ends."""
    stream = source.open()
    n = 0
    try:
        for line in stream:
            n += 1
            if line.isspace():
                continue
            yield n, line
    except (EOFError, OSError) as exc:
        raise source.failed(exc, n) from None
    finally:
        source.close(stream)
