"""Canonical JSON (docs/semantics.md §3) against JavaScript's own output, plus Python-only cases."""

from __future__ import annotations

import json
import struct
from collections import OrderedDict
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from loopguard_fleet.detectors.canonical import JSONLike, canonical_json, js_number_text
from loopguard_fleet.detectors.errors import DetectorError
from loopguard_fleet.detectors.hashing import digest
from loopguard_fleet.detectors.values import UNDEFINED
from tests.mappings import Record

VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "canonical_vectors.json").read_text(encoding="utf-8")
)
SPECIAL: dict[str, Any] = {
    "undefined": UNDEFINED,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
    "-0": -0.0,
}


def revive(value: Any, ancestors: tuple[Any, ...] = ()) -> Any:
    """Turn the generator's tags ($js, $f64, $anc) back into values (see the .mjs header)."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, arg),) = value.items()
        if tag == "$js":
            return SPECIAL[arg]
        if tag == "$f64":
            return struct.unpack(">d", bytes.fromhex(arg))[0]
        if tag == "$anc":
            return ancestors[-arg]
    if isinstance(value, dict):
        for key in value:
            value[key] = revive(value[key], (*ancestors, value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            value[index] = revive(item, (*ancestors, value))
    return value


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=lambda v: v["id"])
def test_canonical_json_writes_what_javascript_writes(vector: dict[str, str]) -> None:
    value = revive(json.loads(vector["input"]))
    assert canonical_json(value) == vector["canonical"]
    assert digest(value) == vector["sha256"]


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=lambda v: v["id"])
def test_the_careful_encoder_writes_the_same_text(vector: dict[str, str]) -> None:
    value = revive(json.loads(vector["input"]))
    assert canonical_json(Record(v=value)) == '{"v":' + vector["canonical"] + "}"


def test_the_vectors_cover_every_control_character_and_many_numbers() -> None:
    ids = [v["id"] for v in VECTORS["canonical"]]
    assert sum(i.startswith("string control") for i in ids) == 32
    assert sum(i.startswith("number") for i in ids) > 800


class Level(IntEnum):
    HIGH = 3


class Tag(str):
    pass


shared = [1, 2]
self_list: list[Any] = [1]
self_list.append(self_list)
self_dict: dict[str, Any] = {"a": 1}
self_dict["me"] = self_dict
outer: dict[str, Any] = {"inner": {"items": []}}
outer["inner"]["items"].append(outer)
outer["inner"]["items"].append(outer["inner"])

PYTHON_CASES = [
    pytest.param((1, "a", (None,)), '[1,"a",[null]]', id="tuples are arrays"),
    pytest.param({"x": shared, "y": shared}, '{"x":[1,2],"y":[1,2]}', id="shared value in full"),
    pytest.param([shared, [shared]], "[[1,2],[[1,2]]]", id="shared list nested in full"),
    pytest.param(self_list, '[1,"[Circular]"]', id="list containing itself"),
    pytest.param(self_dict, '{"a":1,"me":"[Circular]"}', id="dict containing itself"),
    pytest.param(
        outer, '{"inner":{"items":["[Circular]","[Circular]"]}}', id="cycles to two ancestors"
    ),
    pytest.param(
        [self_dict, self_dict],
        '[{"a":1,"me":"[Circular]"},{"a":1,"me":"[Circular]"}]',
        id="a cyclic value shared twice",
    ),
    pytest.param("\ud83d\ude00", '"\U0001f600"', id="surrogate code points pair up"),
    pytest.param("\ude00\ud83d", '"\\ude00\\ud83d"', id="reversed surrogates stay lone"),
    pytest.param(
        {"\ud83d\ude00": 1, "\uffff": 2, "\U0001f600x": 3},
        '{"\U0001f600":1,"\U0001f600x":3,"\uffff":2}',
        id="surrogate code point keys sort as UTF-16",
    ),
    pytest.param(OrderedDict([("b", 1), ("a", 2)]), '{"a":2,"b":1}', id="OrderedDict"),
    pytest.param(MappingProxyType({"k": [1]}), '{"k":[1]}', id="read-only mapping"),
    pytest.param(Level.HIGH, "3", id="IntEnum as its number"),
    pytest.param(Tag("t"), '"t"', id="str subclass as string"),
    pytest.param([True, False, 1, 0], "[true,false,1,0]", id="booleans never numbers"),
    pytest.param([UNDEFINED, {"a": UNDEFINED}], '[undefined,{"a":undefined}]', id="undefined"),
    pytest.param(2**53 + 1, "9007199254740992", id="int rounds to a double"),
    pytest.param(-(2**64), "-18446744073709552000", id="negative big int"),
    pytest.param(10**400, '"Infinity"', id="int too big for a double"),
    pytest.param(-(10**400), '"-Infinity"', id="negative int too big for a double"),
    pytest.param(1e21, "1e+21", id="1e21"),
    pytest.param(1e-7, "1e-7", id="1e-7"),
    pytest.param(1.0, "1", id="1.0"),
    pytest.param(-0.0, "0", id="negative zero"),
    pytest.param(float("nan"), '"NaN"', id="NaN quoted"),
    pytest.param({}, "{}", id="empty object"),
    pytest.param({"": ""}, '{"":""}', id="empty key"),
]


@pytest.mark.parametrize(("value", "expected"), PYTHON_CASES)
def test_canonical_json_of_python_values(value: JSONLike, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("depth", [1_000, 100_000], ids=["1k", "100k"])
def test_deep_nesting_is_encoded_without_recursion_errors(depth: int) -> None:
    nested_list: Any = []
    nested_dict: Any = None
    for _ in range(depth):
        nested_list = [nested_list]
        nested_dict = {"a": nested_dict}
    assert canonical_json(nested_list) == "[" * (depth + 1) + "]" * (depth + 1)
    assert canonical_json(nested_dict) == '{"a":' * depth + "null" + "}" * depth


def test_a_deep_cycle_is_cut_where_it_closes() -> None:
    root: list[Any] = []
    node = root
    for _ in range(5_000):
        child: list[Any] = []
        node.append(child)
        node = child
    node.append(root)
    assert canonical_json(root) == "[" * 5_001 + '"[Circular]"' + "]" * 5_001


INVALID = [
    pytest.param(b"bytes", "cannot hash a value of type bytes", id="bytes"),
    pytest.param({"a": {1, 2}}, "cannot hash a value of type set", id="set nested"),
    pytest.param([object()], "cannot hash a value of type object", id="object in list"),
    pytest.param({1: "a"}, "cannot hash an object key of type int", id="int key"),
    pytest.param({"a": 1, 2: "b"}, "cannot hash an object key of type int", id="mixed keys"),
    pytest.param({b"k": 1}, "cannot hash an object key of type bytes", id="bytes key"),
]


@pytest.mark.parametrize(("value", "message"), INVALID)
def test_values_that_are_not_json_raise_a_detector_error(value: Any, message: str) -> None:
    with pytest.raises(DetectorError, match=message):
        canonical_json(value)


NUMBER_TEXTS = [
    pytest.param(1, "1", id="int"),
    pytest.param(1.0, "1", id="whole float"),
    pytest.param(-1.5, "-1.5", id="negative"),
    pytest.param(0.000001, "0.000001", id="1e-6 plain"),
    pytest.param(1.5e-7, "1.5e-7", id="1.5e-7 exponent"),
    pytest.param(123456789012345680000.0, "123456789012345680000", id="padded with zeros"),
    pytest.param(1e21, "1e+21", id="1e21 exponent"),
    pytest.param(2.5e300, "2.5e+300", id="large exponent"),
    pytest.param(float("inf"), "Infinity", id="Infinity unquoted"),
    pytest.param(float("-inf"), "-Infinity", id="-Infinity unquoted"),
    pytest.param(float("nan"), "NaN", id="NaN unquoted"),
    pytest.param(2**64, "18446744073709552000", id="2**64"),
]


@pytest.mark.parametrize(("number", "expected"), NUMBER_TEXTS)
def test_js_number_text_writes_numbers_as_javascript_string_does(
    number: float, expected: str
) -> None:
    assert js_number_text(number) == expected
