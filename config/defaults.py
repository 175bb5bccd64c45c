"""LoopGuard's default names, in one place: the worker's `Settings`, the runtime client and
`loopguard up` all take their topic names from here (the OpenClaw plugin's defaults are the
same strings, checked by tests/unit/test_defaults.py)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DISTRIBUTION",
    "TOPIC_COMPACTIONS",
    "TOPIC_CONTROL",
    "TOPIC_DEAD_LETTER",
    "TOPIC_POLICY",
    "TOPIC_TOOL_CALLS",
]

TOPIC_TOOL_CALLS: Final = "loopguard.tool-calls"
TOPIC_COMPACTIONS: Final = "loopguard.compactions"
TOPIC_CONTROL: Final = "loopguard.control"
TOPIC_DEAD_LETTER: Final = "loopguard.dead-letter"
#: The live policy (compacted, one partition, one key): `loopguard policy push` and `show`.
TOPIC_POLICY: Final = "loopguard.policy"

#: The distribution's name on the package index (`pip install loopguard-fleet`); the import root
#: is `loopguard_fleet`. PyPI's `loopguard` is an unrelated project.
DISTRIBUTION: Final = "loopguard-fleet"
