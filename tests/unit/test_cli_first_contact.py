"""What a new user hits in the first hour: one broker address format, a policy that detects
by default, arguments checked before any work, and a bad policy reported in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loopguard_fleet.config.broker_address import bootstrap_servers, broker_url
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.cli import MAX_JOBS, build_parser, main
from loopguard_fleet.streams.cli_errors import EXIT_BROKER_UNREACHABLE, EXIT_POLICY, EXIT_USAGE
from loopguard_fleet.streams.client import ClientError, RuntimeClient
from tests.wire import RunScript

REPO = Path(__file__).parents[2]
INVALID_POLICY = REPO / "tests" / "data" / "policies" / "invalid.json5"
CLOSED = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once


@pytest.fixture
def looping(tmp_path: Path) -> Path:
    """One run reading the same missing file 25 times: a loop with detection on."""
    run = RunScript()
    path = tmp_path / "events.jsonl"
    lines = [json.dumps(e) for _ in range(25) for e in run.both("read", {"p": 1}, error="x")]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(autouse=True)
def _no_loopguard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("LOOPGUARD_")]:
        monkeypatch.delenv(name)


# ---- one broker address format --------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "hosts"),
    [
        pytest.param("127.0.0.1:9092", ["127.0.0.1:9092"], id="host-port"),
        pytest.param("kafka://127.0.0.1:9092", ["127.0.0.1:9092"], id="kafka-url"),
        pytest.param("a:1,b:2", ["a:1", "b:2"], id="comma-list"),
        pytest.param("kafka://a:1;b:2", ["a:1", "b:2"], id="faust-url-list"),
        pytest.param(" a:1 , b:2 ", ["a:1", "b:2"], id="spaces"),
    ],
)
def test_every_entry_point_reads_the_same_address_forms(address: str, hosts: list[str]) -> None:
    assert bootstrap_servers(address) == hosts
    assert Settings(broker=address).bootstrap_servers == hosts  # worker, up
    assert RuntimeClient(address).bootstrap == hosts  # the runtime client
    for command in (["replay"], ["explain", "r1"], ["compare", "--candidate", "c.json5"]):
        args = build_parser().parse_args([*command, "--topic", "t", "--broker", address])
        assert args.broker == hosts, command  # replay | explain | compare --broker
    for command in (["policy", "push", "p.json5"], ["policy", "show"]):
        args = build_parser().parse_args([*command, "--broker", address])
        assert args.broker == hosts, command  # policy push | show --broker
    assert broker_url(address) == "kafka://" + ";".join(hosts)  # what Faust is given


@pytest.mark.parametrize("address", ["http://a:1", "a", "a:port", "", "a:99999"])
def test_a_malformed_address_is_a_usage_error_naming_the_format(address, capsys) -> None:
    assert main(["replay", "--topic", "t", "--broker", address]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "host:port[,host:port…] (kafka:// optional)" in err and len(err.splitlines()) == 1
    with pytest.raises(ClientError, match="kafka:// optional"):
        RuntimeClient(address)
    with pytest.raises(ValueError, match="kafka:// optional"):
        Settings(broker=address)


def test_replay_takes_the_kafka_url_that_up_and_the_worker_use(capsys) -> None:
    # Before, the kafka:// form was taken for a host name: "unreachable" while the broker was up.
    assert main(["replay", "--topic", "t", "--broker", f"kafka://{CLOSED}"]) == 69
    err = capsys.readouterr().err
    assert f"broker {CLOSED} unreachable" in err and "kafka://kafka" not in err
    assert EXIT_BROKER_UNREACHABLE == 69


@pytest.mark.parametrize(
    "address", [CLOSED, f"kafka://{CLOSED}", f"{CLOSED},{CLOSED}"], ids=["host-port", "url", "list"]
)
def test_policy_push_takes_every_address_form(address: str, capsys) -> None:
    # Each form reaches the broker (unreachable here, exit 69): none is a usage error or a
    # host named "kafka".
    policy = REPO / "tests" / "data" / "policies" / "openclaw.json5"
    assert main(["policy", "push", str(policy), "--broker", address]) == EXIT_BROKER_UNREACHABLE
    err = capsys.readouterr().err
    assert "broker unreachable" in err and "('127.0.0.1', 1," in err and "kafka://" not in err


# ---- no silent no-op policy -------------------------------------------------------------


def test_replay_without_a_policy_detects_like_loopguard_up(looping: Path, capsys) -> None:
    assert main(["replay", str(looping), "--quiet"]) == 0
    decisions = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert decisions, "no decision: the default policy detects nothing"
    for command in ("replay", "explain", "compare"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert "else OpenClaw's defaults with detection on" in help_text, command


def test_without_a_policy_the_audit_uses_loopguard_policy_file_like_the_worker(
    looping: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    off = tmp_path / "off.json5"
    off.write_text("{tools: {loopDetection: {enabled: false}}}")
    monkeypatch.setenv("LOOPGUARD_POLICY_FILE", str(off))
    assert main(["replay", str(looping), "--quiet"]) == 0
    quiet = capsys.readouterr().out
    monkeypatch.delenv("LOOPGUARD_POLICY_FILE")
    assert main(["replay", str(looping), "--quiet"]) == 0
    assert len(capsys.readouterr().out) > len(quiet)


# ---- arguments checked at parse time ----------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        pytest.param(["--jobs", "1000"], f"--jobs must be between 0 and {MAX_JOBS}", id="jobs-big"),
        pytest.param(["--jobs", "-1"], "--jobs must be between 0 and", id="jobs-negative"),
        pytest.param(["--idle-ttl", "-1"], "must be a finite number >= 0", id="ttl-negative"),
        pytest.param(["--idle-ttl", "nan"], "must be a finite number >= 0", id="ttl-nan"),
    ],
)
def test_replay_refuses_out_of_range_numbers(looping: Path, argv, text, capsys) -> None:
    assert main(["replay", str(looping), *argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert text in err and len(err.splitlines()) == 1


def test_a_topic_range_that_ends_before_it_starts_is_refused(capsys) -> None:
    # Refused before any connection: the broker address is closed and never tried.
    assert main(["replay", "--topic", "t", "--broker", CLOSED, "--from", "500", "--to", "10"]) == 2
    assert "--from 500 is after --to 10" in capsys.readouterr().err


def test_up_refuses_zero_runs_before_starting_a_broker(capsys) -> None:
    assert main(["up", "--demo", "--runs", "0"]) == EXIT_USAGE
    assert "--runs must be at least 1, got 0" in capsys.readouterr().err


def test_up_reports_a_bad_policy_in_one_line_as_the_worker_does(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LOOPGUARD_POLICY_FILE", str(INVALID_POLICY))
    assert main(["up"]) == EXIT_POLICY == 78
    err = capsys.readouterr().err
    assert err.startswith("loopguard up: invalid policy") and len(err.splitlines()) == 1


# ---- policy check warnings, unknown settings ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        pytest.param("{agents: {}}", "tools.loopDetection: absent everywhere", id="no-block"),
        pytest.param(
            "{tool: {loopDetection: {enabled: true}}}",
            "tool: unknown key, ignored; did you mean 'tools'?",
            id="top-level-typo",
        ),
        pytest.param(
            "{tools: {loopDetection: {enabled: true}}, agents: {list: [{id: 'a', "
            "tools: {loopDetecton: {enabled: false}}}]}}",
            "agents.list[0].tools.loopDetecton: unknown key, ignored; "
            "did you mean 'loopDetection'?",
            id="agent-block-typo",
        ),
        pytest.param(
            "{tools: {loopDetection: {enabled: true}}, agents: {list: [{id: 'a', "
            "tool: {loopDetection: {enabled: false}}}]}}",
            "agents.list[0].tool: unknown key, ignored; did you mean 'tools'?",
            id="agent-entry-typo",
        ),
    ],
)
def test_policy_check_warns_about_a_policy_that_silently_detects_less(
    tmp_path: Path, text: str, warning: str, capsys
) -> None:
    f = tmp_path / "p.json5"
    f.write_text(text)
    assert main(["policy", "check", str(f)]) == 0
    assert f"warning: {f}: {warning}" in capsys.readouterr().err
    assert main(["policy", "check", str(f), "--strict"]) == 1


def test_policy_check_is_quiet_about_a_clean_policy(capsys) -> None:
    assert main(["policy", "check", str(REPO / "examples" / "policy.json5"), "--strict"]) == 0
    assert capsys.readouterr().err == ""


def test_the_worker_refuses_a_misspelled_setting_with_a_did_you_mean(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LOOPGUARD_SEMANTIC", "openclaw-2026.9")
    assert main(["worker"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "LOOPGUARD_SEMANTIC: not a LoopGuard setting; did you mean LOOPGUARD_SEMANTICS?" in err


def test_worker_help_lists_every_setting(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    out = capsys.readouterr().out
    for name in ("LOOPGUARD_BROKER", "LOOPGUARD_SEMANTICS", "LOOPGUARD_POLICY_FILE"):
        assert f"\n  {name}\n" in out


def test_a_table_shows_the_full_run_id_that_explain_takes(tmp_path: Path, capsys) -> None:
    run = RunScript(run_id="sim2846-035-a-run-id-longer-than-twenty")
    path = tmp_path / "events.jsonl"
    lines = [json.dumps(e) for _ in range(25) for e in run.both("read", {"p": 1}, error="x")]
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path), "--format", "table", "--quiet"]) == 0
    shown = capsys.readouterr().out.split()
    assert run.run_id in shown
    assert main(["explain", run.run_id, str(path)]) == 0
