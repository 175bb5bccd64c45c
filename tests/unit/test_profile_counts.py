"""openclaw-2026.9 counts: no progress with vetoes and exec failure identity, argument churn."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from loopguard_fleet.detectors.hashkeys import HashKey, hash_key
from loopguard_fleet.detectors.rules.argument_churn import churn
from loopguard_fleet.detectors.streaks import no_progress_2026_9, recent_count


@dataclass(frozen=True)
class Rec:
    """A history record as the 2026.9 counts read it."""

    tool: str
    args_hash: str
    result_hash: str | None = None
    outcome_kind: str | None = None
    failure_identity: str | None = None
    no_progress: bool = False

    @property
    def result_key(self) -> HashKey | None:
        return None if self.result_hash is None else hash_key(self.result_hash)


def ok(tool: str, args: str, rhash: str = "h", **kw: object) -> Rec:
    return Rec(tool, f"{tool}:{args}", rhash, **kw)  # type: ignore[arg-type]


def veto(tool: str, args: str) -> Rec:
    return Rec(tool, f"{tool}:{args}", None, "tool-loop-veto")


def fail(args: str, rhash: str, identity: str) -> Rec:
    return Rec("exec", f"exec:{args}", rhash, "terminal-exec-failure", identity)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([ok("read", "a")] * 3, (3, "h")),
        ([ok("read", "a"), veto("read", "a"), ok("read", "a")], (3, "h")),
        ([ok("read", "a"), veto("read", "a"), veto("read", "a")], (3, "h")),
        ([veto("read", "a"), veto("read", "a")], (2, None)),
        ([ok("read", "a", "x"), veto("read", "a"), ok("read", "a", "y")], (1, "y")),
        ([ok("read", "a"), Rec("read", "read:a"), ok("read", "b"), ok("read", "a")], (2, "h")),
        ([ok("list", "a"), veto("read", "b")], (0, None)),
    ],
    ids=[
        "three-equal",
        "a-veto-counts-inside-the-streak",
        "newest-vetoes-join-the-first-hashed-record",
        "only-vetoes",
        "a-veto-before-a-different-hash-is-lost",
        "pending-and-other-args-are-skipped",
        "nothing-of-this-call",
    ],
)
def test_the_same_args_walk_counts_vetoes(
    history: list[Rec], expected: tuple[int, str | None]
) -> None:
    assert no_progress_2026_9(history, "read", "read:a") == expected


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([fail("b", "h1", "I"), fail("c", "h2", "I"), fail("a", "h3", "I")], (3, "h3")),
        ([fail("a", "h1", "I"), fail("b", "h2", "I"), fail("a", "h3", "I")], (2, "h3")),
        ([fail("b", "h1", "J"), fail("c", "h2", "I"), fail("a", "h3", "I")], (2, "h3")),
        ([fail("b", "h1", "I"), ok("exec", "x"), fail("a", "h3", "I")], (1, "h3")),
        ([fail("b", "h1", "I"), ok("read", "x"), fail("a", "h3", "I")], (1, "h3")),
        ([fail("b", "h1", "I"), veto("exec", "z"), fail("c", "h2", "I")], (3, "h2")),
        ([ok("exec", "a"), ok("exec", "a"), fail("b", "h", "I")], (2, "h")),
    ],
    ids=[
        "identity-survives-changing-args",
        "coming-back-to-the-args-ends-the-walk",
        "another-identity-ends-it",
        "a-success-ends-it",
        "another-tool-ends-it",
        "vetoes-of-any-args-count",
        "same-args-walk-wins-a-tie-or-more",
    ],
)
def test_exec_takes_the_terminal_failure_walk_when_longer(
    history: list[Rec], expected: tuple[int, str | None]
) -> None:
    assert no_progress_2026_9(history, "exec", "exec:a") == expected


def test_recent_count_counts_pending_completed_and_vetoed_records() -> None:
    history = [ok("read", "a"), veto("read", "a"), Rec("read", "read:a"), ok("read", "b")]
    assert recent_count(history, "read", "read:a") == 3


def _np(args: str, rhash: str = "same") -> Rec:
    return ok("write", args, rhash, no_progress=True)


@pytest.mark.parametrize(
    ("history", "current", "expected"),
    [
        ([_np("a"), _np("b")] * 3, "a", (6, 2)),
        ([_np("a"), _np("b"), _np("c")] * 4, "c", (12, 3)),
        ([_np("a"), _np("b")] * 3 + [_np("c")], "a", (0, 0)),
        ([_np("a")] * 3 + [_np("b")] * 2, "a", (0, 0)),
        ([_np("a")] * 3 + [_np("b", "other")] * 3, "a", (0, 0)),
        ([_np("a")] * 3 + [_np("b")] * 3, "c", (0, 0)),
        ([_np("a", "x")] + [_np("a"), _np("b")] * 3, "a", (6, 2)),
        ([ok("write", "z")] + [_np("a"), _np("b")] * 3, "a", (6, 2)),
        ([_np("a"), _np("b")] * 3 + [Rec("write", "write:q")], "a", (6, 2)),
        ([_np("a"), _np("b")] * 3 + [ok("read", "a", no_progress=True)], "a", (0, 0)),
    ],
    ids=[
        "two-stable-variants",
        "three-stable-variants",
        "an-unstable-variant-spoils-it",
        "one-variant-short",
        "variants-with-different-outcomes",
        "current-variant-not-stable",
        "a-variant-changing-outcome-ends-the-walk",
        "a-progress-outcome-ends-the-walk",
        "pending-records-are-skipped",
        "another-tool-ends-the-walk",
    ],
)
def test_argument_churn(history: list[Rec], current: str, expected: tuple[int, int]) -> None:
    assert churn(history, "write", f"write:{current}") == expected
