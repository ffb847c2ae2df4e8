"""When each request is sent: the load (:mod:`.loads`) and the schedule built from it
(:mod:`.build`). The names below are the package's public surface."""

from kvroute.bench.schedule.build import Schedule, Slot, build_schedule, open_loop_offsets
from kvroute.bench.schedule.loads import (
    Arrival,
    CancelSpec,
    ClosedLoop,
    Load,
    OpenLoop,
    TraceTimes,
    parse_sweep,
)

__all__ = [
    "Arrival",
    "CancelSpec",
    "ClosedLoop",
    "Load",
    "OpenLoop",
    "Schedule",
    "Slot",
    "TraceTimes",
    "build_schedule",
    "open_loop_offsets",
    "parse_sweep",
]
