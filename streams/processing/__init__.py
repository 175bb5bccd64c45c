"""The processing core: per-partition run state and the one `RunDriver` (Faust-free)."""

from loopguard_fleet.streams.processing.driver import (
    DriverLimits,
    Message,
    Outputs,
    RunDriver,
    StateStore,
)
from loopguard_fleet.streams.processing.partition import LiveRun, PartitionRuns

__all__ = [
    "DriverLimits",
    "LiveRun",
    "Message",
    "Outputs",
    "PartitionRuns",
    "RunDriver",
    "StateStore",
]
