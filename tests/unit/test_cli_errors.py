"""Every command fails like a Unix tool: one line on stderr, a documented exit code, and a
traceback only with --debug (docs/audit.md, "Exit codes")."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import (
    EXIT_BROKER_UNREACHABLE,
    EXIT_CANNOT_WRITE,
    EXIT_FAILED,
    EXIT_NO_INPUT,
    EXIT_POLICY,
    EXIT_USAGE,
)
from tests.wire import RunScript

REPO = Path(__file__).parents[2]
TRACE = REPO / "tests" / "data" / "traces" / "openclaw-P2-r7.jsonl"
INVALID_POLICY = REPO / "tests" / "data" / "policies" / "invalid.json5"
CLOSED_PORT = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once


@pytest.fixture
def events(tmp_path: Path) -> Path:
    run = RunScript()
    path = tmp_path / "events.jsonl"
    lines = [json.dumps(e) for _ in range(25) for e in run.both("read", {"p": 1}, error="x")]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def corrupt_gz(tmp_path: Path) -> Path:
    whole = gzip.compress(TRACE.read_bytes())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    return path


def _cases(events: Path, corrupt_gz: Path, tmp_path: Path) -> list[tuple[list[str], int, str]]:
    trace = str(TRACE)
    return [
        (["replay", "/no/such/file"], EXIT_NO_INPUT, "cannot read /no/such/file: No such file"),
        (["replay", str(tmp_path)], EXIT_NO_INPUT, "Is a directory"),
        (["replay", str(corrupt_gz)], EXIT_NO_INPUT, "corrupt gzip stream after line"),
        (["replay", trace, "--policy", "/no/p.json5"], EXIT_POLICY, "cannot read the policy"),
        (["replay", trace, "--policy", str(INVALID_POLICY)], EXIT_POLICY, "invalid policy: "),
        (["replay", trace, "--bogus"], EXIT_USAGE, "unrecognized arguments: --bogus"),
        (["replay", trace, "--jobs", "two"], EXIT_USAGE, "invalid int value: 'two'"),
        (["replay"], EXIT_USAGE, "no input: give a file, - for stdin, or --topic"),
        (["replay", trace, "--from", "5"], EXIT_USAGE, "--from and --to bound a --topic"),
        (["replay", "--topic", "t", "--from", "yesterday"], EXIT_USAGE, "--from: 'yesterday'"),
        (["replay", trace, "--output", "/no/dir/out"], EXIT_CANNOT_WRITE, "cannot write /no/dir"),
        (
            ["replay", "--topic", "t", "--broker", CLOSED_PORT],
            EXIT_BROKER_UNREACHABLE,
            f"broker {CLOSED_PORT} unreachable",
        ),
        (["explain", "nope", trace], EXIT_FAILED, "run 'nope' not found in the input"),
        (["explain", "r1", "/no/such/file"], EXIT_NO_INPUT, "cannot read /no/such/file"),
        (
            ["compare", trace],
            EXIT_USAGE,
            "one of the arguments --candidate --candidate-topic is required",
        ),
        (
            ["compare", trace, "--candidate", str(INVALID_POLICY)],
            EXIT_POLICY,
            "invalid policy: ",
        ),
        (
            ["compare", str(events), "--candidate", str(INVALID_POLICY).replace("invalid", "x")],
            EXIT_POLICY,
            "cannot read the policy file",
        ),
        (
            [
                "compare",
                trace,
                "--candidate",
                str(REPO / "examples" / "policy.json5"),
                "--html",
                "/no/dir/r.html",
            ],
            EXIT_CANNOT_WRITE,
            "cannot write /no/dir/r.html",
        ),
        (["nosuchcommand"], EXIT_USAGE, "invalid choice: 'nosuchcommand'"),
    ]


def test_every_failure_is_one_line_with_its_exit_code(events, corrupt_gz, tmp_path, capsys) -> None:
    for argv, code, text in _cases(events, corrupt_gz, tmp_path):
        got = main(argv)
        err = capsys.readouterr().err
        lines = err.splitlines()
        assert (got, len(lines)) == (code, 1), (argv, err)
        assert lines[0].startswith("loopguard"), (argv, err)
        assert text in lines[0], (argv, err)
        assert "Traceback" not in err


def test_debug_shows_the_traceback_instead(capsys) -> None:
    with pytest.raises(Exception, match="cannot read /no/such/file"):
        main(["--debug", "replay", "/no/such/file"])
    with pytest.raises(Exception, match="cannot read /no/such/file"):
        main(["replay", "/no/such/file", "--debug"])


def _run(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.cli", *argv],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
    )  # fmt: skip
    return proc.returncode, proc.stderr


def _unreachable_worker_env(tmp_path: Path, wait_s: str) -> dict[str, str]:
    """A worker's environment (none of ours inherited) naming a broker nobody listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    return env | {
        "LOOPGUARD_BROKER": f"kafka://{CLOSED_PORT}",
        "LOOPGUARD_BROKER_WAIT_SECONDS": wait_s,
        "LOOPGUARD_STORE": "memory://",
        "LOOPGUARD_DATA_DIR": str(tmp_path),
    }


def test_the_worker_retries_an_unreachable_broker_then_exits_69_in_one_line(tmp_path) -> None:
    code, err = _run("worker", env=_unreachable_worker_env(tmp_path, "1.5"))
    lines = err.splitlines()
    assert code == EXIT_BROKER_UNREACHABLE == 69
    assert "not reachable yet" in lines[0] and "retrying for up to 1.5 s" in lines[0]
    assert lines[-1].startswith(f"loopguard worker: broker kafka://{CLOSED_PORT} unreachable ")
    assert "after 1.5 s (" in lines[-1] and len(lines) == 2
    assert "Traceback" not in err


def test_a_replay_cut_off_by_head_stops_quietly(events: Path) -> None:
    text = events.read_text()
    big = "".join(text.replace('"r1', f'"r{i}-') for i in range(400))  # 400 runs, ~6,000 lines
    replay = (
        f"{sys.executable} -m loopguard_fleet.streams.cli replay - --quiet"
        " --policy examples/policy.json5"
    )
    proc = subprocess.run(
        f"{replay} | head -c 10",
        shell=True, input=big, capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.stdout == '{"type":"l' and proc.stderr == ""
