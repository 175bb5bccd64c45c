"""Test helper: a Mapping that is not a dict (exercises the careful canonical-JSON path)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class Record(Mapping[str, Any]):
    """A non-dict mapping: it sends the value down the careful (iterative) encoder."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)
