"""LOOPGUARD_SEMANTICS picks the worker's semantics profile; a wrong name stops start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loopguard_fleet.config import Settings


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "configurable"),
        ("configurable", "configurable"),
        ("openclaw-2026.9", "openclaw-2026.9"),
    ],
    ids=["default", "configurable", "openclaw-2026.9"],
)
def test_semantics_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv("LOOPGUARD_SEMANTICS", raising=False)
    else:
        monkeypatch.setenv("LOOPGUARD_SEMANTICS", value)
    assert Settings().semantics == expected


def test_an_unknown_profile_names_the_valid_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_SEMANTICS", "openclaw-2027")
    with pytest.raises(ValidationError, match=r"'configurable' or 'openclaw-2026\.9'"):
        Settings()
