"""Faust's own floor on workload P: the worker with an agent body that does (almost) nothing.

`python bench/faust_floor.py empty|table` runs exactly `loopguard worker` (same
settings, app, tuned consumer, topics, table, broker watch, /metrics), except that the
detection agent is replaced:

    empty   counts each batch and does nothing else
    table   also writes one 1-byte table entry per event (the issue's "trivial Faust agent
            that updates one table entry per event")

What these reach on workload P is the ceiling of any agent built on Faust's stream path on
this machine: nothing LoopGuard does per event can make the worker faster than `empty`.
bench/pipeline.py `--floor` measures them beside the relay and the real worker. Batches come
as the worker takes them: the fast path (streams/worker/faust/drain.py, batches.py) unless
`LOOPGUARD_FAUST_FAST_PATH=0`, then Faust's own loop and `take_events`.
"""

from __future__ import annotations

import sys
import weakref
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODES = ("empty", "table")


def _install(mode: str) -> None:
    """Make streams.worker.assemble build the app with the floor agent instead of ours."""
    from faust.streams import _current_event

    import loopguard_fleet.streams.worker.run as worker
    from loopguard_fleet.config.settings import Settings
    from loopguard_fleet.streams.processing.metrics import Metrics
    from loopguard_fleet.streams.worker.app import Wiring, build_app
    from loopguard_fleet.streams.worker.faust.batches import take_batches
    from loopguard_fleet.streams.worker.faust.bulk import Bulk, messages_of, records_in

    def assemble(settings: Settings, metrics: Metrics | None = None) -> tuple[Wiring, None]:
        metrics = metrics if metrics is not None else Metrics()
        settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
        wiring = build_app(settings, metrics)
        table = wiring.table
        within = settings.batch_within_ms / 1000
        writes = mode == "table"

        @wiring.app.agent(wiring.inputs, name="loopguard-detect", concurrency=1)
        async def floor(stream: Any) -> None:
            """Count batches; with `table`, one table write per event."""
            batches = (  # the worker's own choice of batching (streams/worker/agent.py)
                take_batches(stream, settings.batch_max_events)
                if settings.faust_fast_path
                else stream.take_events(settings.batch_max_events, within=within)
            )
            async for events in batches:  # Faust events and bulks (faust/bulk.py)
                if writes:
                    for event in events:
                        routing = event.event if type(event) is Bulk else event
                        _current_event.set(weakref.ref(routing))  # table writes route by it
                        for message in messages_of([event]):
                            table[message.key] = b"x"
                metrics.count_events("tool_call", sum(records_in(e) for e in events))

        return wiring, None

    worker.assemble = assemble  # type: ignore[assignment]


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: python bench/faust_floor.py {'|'.join(MODES)}")
    _install(sys.argv[1])
    from loopguard_fleet.streams.main import main

    sys.exit(main(["worker"]))
