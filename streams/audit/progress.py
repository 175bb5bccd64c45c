"""A progress bar on stderr for long replays (tqdm): rate and ETA, silent when not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["TICK_EVERY", "Progress"]

TICK_EVERY = 4096  # events between two updates: the bar costs nothing per event


class Progress:
    """Bytes read of `total_bytes` (with ETA) when the size is known, else events counted."""

    def __init__(
        self,
        enabled: bool,
        total_bytes: int | None = None,
        done_bytes: Callable[[], int] | None = None,
    ) -> None:
        self._bar: Any = None
        self._done_bytes = done_bytes if total_bytes else None
        if not enabled:
            return
        from tqdm import tqdm  # type: ignore[import-untyped]  # no type hints shipped

        common: dict[str, Any] = {"file": sys.stderr, "leave": False, "mininterval": 0.5}
        if self._done_bytes is not None:
            self._bar = tqdm(
                total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, **common
            )
        else:
            self._bar = tqdm(unit=" events", unit_scale=True, **common)

    @staticmethod
    def wanted(quiet: bool) -> bool:
        """A bar only for a person watching: stderr is a terminal and --quiet was not given."""
        return not quiet and sys.stderr.isatty()

    def tick(self, events: int) -> None:
        """Show `events` processed so far."""
        bar = self._bar
        if bar is None:
            return
        if self._done_bytes is not None:
            bar.update(self._done_bytes() - bar.n)
            bar.set_postfix_str(f"{events:,} events", refresh=False)
        else:
            bar.update(events - bar.n)

    def close(self) -> None:
        """Remove the bar from the terminal."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
