"""Readiness: the worker consumes its input partitions (what `/readyz` answers).

The web server answers `/healthz` as soon as the event loop runs, seconds before the consumer
group has assigned partitions and Faust has recovered the table and sought the inputs to their
committed offsets; a verdict asked for in between fails open. Faust sets its recovery's
`completed` event after that seek and clears `rebalancing` right after, and sets `rebalancing`
again when the next rebalance starts: together with an input partition assigned, they say the
agent is reading (faust-streaming has no public readiness flag).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def is_consuming(app: Any, input_topics: Iterable[str]) -> bool:
    """True when `app` holds an input partition, has recovered and is not rebalancing."""
    if app.rebalancing or not app.tables.recovery.completed.is_set():
        return False
    topics = set(input_topics)
    return any(tp.topic in topics for tp in app.consumer.assignment())
