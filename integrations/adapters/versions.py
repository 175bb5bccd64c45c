"""The adapters' version guard: a framework outside its tested range fails the import in one
line."""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["require_version"]

_VERSION_PART = re.compile(r"\d+")


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        m = _VERSION_PART.match(piece)
        if m is None:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def require_version(distribution: str, lowest: str, below: str) -> str:
    """The installed version of `distribution`; ImportError naming the range if outside it."""
    try:
        found = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"loopguard_fleet.adapters needs {distribution}>={lowest},<{below}, which is not "
            "installed (docs/integrations.md names the extra that installs it)"
        ) from None
    if not _version_tuple(lowest) <= _version_tuple(found) < _version_tuple(below):
        raise ImportError(
            f"loopguard_fleet.adapters supports {distribution}>={lowest},<{below}; "
            f"{found} is installed"
        )
    return found
