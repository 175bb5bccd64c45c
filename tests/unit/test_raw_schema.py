"""The worker's topics decode records into events holding the record's own key and value,
exactly what Faust's bytes/raw schema gives, without its serializer registry."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest
from faust.types import Message

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.app import build_app
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

FAUST_RAW = faust.Schema(
    key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
)


def _message(key: bytes | None, value: bytes | None) -> Message:
    return Message(
        topic="t",
        partition=3,
        offset=17,
        timestamp=1.5,
        timestamp_type=0,
        headers=[("h", b"1")],
        key=key,
        value=value,
        checksum=None,
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"run-1", b'{"type":"tool_call"}'),
        (b"", b""),
        (None, b"{}"),
        (b"r", None),  # a tombstone-like record: the driver dead-letters it
        (b"\xff\xfe", b"\x00not utf-8"),
    ],
)
async def test_an_event_holds_what_fausts_raw_schema_gives(
    key: bytes | None, value: bytes | None, tmp_path: Path
) -> None:
    wiring = build_app(Settings(data_dir=str(tmp_path)), Metrics())
    message = _message(key, value)
    ours = await RawSchema().compile(wiring.app)(message)
    theirs = await FAUST_RAW.compile(wiring.app)(message)
    assert (ours.key, ours.value, ours.headers) == (theirs.key, theirs.value, theirs.headers)
    assert type(ours) is type(theirs) and ours.app is wiring.app
    assert ours.message is message
    assert ours.key is message.key and ours.value is message.value  # no copy


def test_every_topic_of_the_worker_uses_it(tmp_path: Path) -> None:
    wiring = build_app(Settings(data_dir=str(tmp_path)), Metrics())
    for topic in (wiring.inputs, wiring.control, wiring.dead_letter):
        assert isinstance(topic.schema, RawSchema)
