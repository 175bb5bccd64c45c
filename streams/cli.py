"""The `loopguard` command: replay, explain, compare, policy check, schema, worker, up.

Every failure is one line on stderr and a documented exit code (streams/cli_errors.py,
docs/audit.md); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any, NoReturn

import orjson

from loopguard_fleet.config import Policy, PolicyError, load_policy
from loopguard_fleet.config.broker_address import (
    ADDRESS_FORMAT,
    BrokerAddressError,
    bootstrap_servers,
)
from loopguard_fleet.config.defaults import (
    DISTRIBUTION,
    TOPIC_COMPACTIONS,
    TOPIC_POLICY,
    TOPIC_TOOL_CALLS,
)
from loopguard_fleet.config.policy import DETECTION_ON, read_policy_document
from loopguard_fleet.config.policy_lint import policy_warnings
from loopguard_fleet.config.settings import parse_names, setting_names
from loopguard_fleet.detectors.build_info import engine_build
from loopguard_fleet.detectors.profiles import CONFIGURABLE, SEMANTICS
from loopguard_fleet.detectors.values import DEFAULT_CHANNEL_TOOLS
from loopguard_fleet.streams.audit.explain import json_text
from loopguard_fleet.streams.audit.inputs import (
    Bound,
    FileInput,
    InputError,
    TopicInput,
    parse_bound,
)
from loopguard_fleet.streams.audit.otlp_input import OtlpInput
from loopguard_fleet.streams.cli_errors import (
    EXIT_CANNOT_WRITE,
    EXIT_FAILED,
    EXIT_NO_EVENTS,
    EXIT_NO_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    describe,
)
from loopguard_fleet.streams.collector import batch_collector
from loopguard_fleet.streams.otlp.options import AUDIT_OPTIONS, OtlpOptions

if TYPE_CHECKING:
    from loopguard_fleet.streams.audit.compare import CompareReport
    from loopguard_fleet.streams.audit.shadow import ShadowDecisions
    from loopguard_fleet.streams.kafka.security import ClientSecurity

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a filter cut off by `| head`
DEFAULT_IDLE_TTL_S = 1800.0  # the worker's LOOPGUARD_RUN_IDLE_TTL_SECONDS default
MAX_SHOWN_REJECTIONS = 20  # rejected lines printed one by one; the summary counts them all


def _default_policy_source() -> str | dict[str, object]:
    """What `loopguard up` runs without --policy: LOOPGUARD_POLICY_FILE, else detection on."""
    return os.environ.get("LOOPGUARD_POLICY_FILE") or DETECTION_ON


def _as_workers(policy: Policy, args: argparse.Namespace) -> Policy:
    """`policy` as workers run it with the profile and channel tools the flags name."""
    return policy.with_semantics(args.semantics).with_channel_tools(args.channel_tools)


def _policy(path: str | None, args: argparse.Namespace) -> Policy:
    return _as_workers(load_policy(_default_policy_source() if path is None else path), args)


def _policy_name(path: str | None) -> str:
    if path is not None:
        return path
    source = _default_policy_source()
    return source if isinstance(source, str) else "(default: detection on)"


def _bound(text: str | None, flag: str) -> Bound | None:
    if text is None:
        return None
    try:
        return parse_bound(text)
    except InputError as e:
        raise CliError(f"{flag}: {e}", EXIT_USAGE) from None


def _kafka_security() -> ClientSecurity:
    """TLS/SASL for --topic from LOOPGUARD_SECURITY_*, _SASL_*, _SSL_* (docs/security.md)."""
    from pydantic import ValidationError

    from loopguard_fleet.streams.kafka.security import ClientSecurity

    try:
        return ClientSecurity.from_env()
    except ValidationError as exc:  # its messages never carry a secret (config/settings.py)
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise CliError(f"invalid Kafka security settings: {problems}", EXIT_USAGE) from None


def _input_topics() -> list[str]:
    """The worker's two input topics: LOOPGUARD_TOPIC_TOOL_CALLS / _COMPACTIONS or defaults."""
    return [
        os.environ.get("LOOPGUARD_TOPIC_TOOL_CALLS") or TOPIC_TOOL_CALLS,
        os.environ.get("LOOPGUARD_TOPIC_COMPACTIONS") or TOPIC_COMPACTIONS,
    ]


def _topics(given: list[str]) -> list[str]:
    """--topic values: comma lists, repeatable; a bare --topic means both input topics."""
    names: list[str] = []
    for value in given:
        parts = [p.strip() for p in value.split(",")]
        names.extend(_input_topics() if value == "" else [p for p in parts if p])
    return list(dict.fromkeys(names))


def _source(args: argparse.Namespace) -> FileInput | TopicInput | OtlpInput:
    """The input named on the command line: a file, `-` (stdin) or `--topic`, read in
    LoopGuard's wire format or, with `--input-format otlp`, as OTLP traces."""
    otlp = args.input_format == "otlp"
    if not otlp:
        given = [flag for flag, dest in _OTLP_FLAGS if getattr(args, dest) not in (None, False)]
        if given:
            raise CliError(f"{given[0]} needs --input-format otlp", EXIT_USAGE)
    source: FileInput | TopicInput
    if args.topic is not None:
        if args.input is not None:
            raise CliError("give either an input file or --topic, not both", EXIT_USAGE)
        if otlp and "" in args.topic:  # bare --topic: the wire-format input topics
            raise CliError("--input-format otlp: name the OTLP topic (--topic NAME)", EXIT_USAGE)
        start, end = _bound(args.from_, "--from"), _bound(args.to, "--to")
        if start is not None and end is not None and start.is_after(end):
            raise CliError(f"--from {args.from_} is after --to {args.to}", EXIT_USAGE)
        topics = _topics(args.topic)
        source = TopicInput(
            ",".join(args.broker), topics, start, end, _kafka_security(), marks_partitions=not otlp
        )
    else:
        if args.input is None:
            raise CliError("no input: give a file, - for stdin, or --topic", EXIT_USAGE)
        if args.from_ is not None or args.to is not None:
            raise CliError("--from and --to bound a --topic, not a file", EXIT_USAGE)
        source = FileInput(args.input)
    return _otlp(args, source) if otlp else source


# The OTLP mapping's flags (flag, argparse dest): they only mean something for OTLP input.
_OTLP_FLAGS = (
    ("--otlp-run-id-keys", "otlp_run_id_keys"),
    ("--otlp-openinference", "otlp_openinference"),
    ("--otlp-privacy", "otlp_privacy"),
    ("--otlp-reorder-window", "otlp_reorder_window"),
    ("--otlp-dedupe-memory", "otlp_dedupe_memory"),
)


def _otlp(args: argparse.Namespace, source: FileInput | TopicInput) -> OtlpInput:
    """`source` read as OTLP traces, or one line naming the extra that reads them."""
    from loopguard_fleet.streams.audit.otlp_input import otlp_input
    from loopguard_fleet.streams.otlp import OTLP_EXTRA

    try:
        return otlp_input(source, _otlp_options(args))
    except ImportError:
        raise CliError(
            f"--input-format otlp needs the optional extra: {OTLP_EXTRA}", EXIT_USAGE
        ) from None


def _otlp_options(args: argparse.Namespace) -> OtlpOptions:
    """The `--otlp-*` flags as the options a worker's `LOOPGUARD_OTLP_*` settings give."""
    options = replace(AUDIT_OPTIONS, channel_tools=frozenset(args.channel_tools))
    if args.otlp_run_id_keys is not None:
        options = replace(options, run_id_keys=args.otlp_run_id_keys)
    if args.otlp_dedupe_memory is not None:
        options = replace(options, dedupe_memory_s=args.otlp_dedupe_memory)
    return replace(
        options,
        openinference=args.otlp_openinference,
        privacy=args.otlp_privacy,
        reorder_window_s=args.otlp_reorder_window,
    )


def _no_events(rejected: int, unit: str) -> str:
    return f"no event in the input: {rejected} {unit}{'s' if rejected != 1 else ''}, all rejected"


def _write(text: str) -> None:
    """Text to stdout as UTF-8; a lone surrogate (from the input) is shown as `\\udc00`."""
    sys.stdout.buffer.write(text.encode(errors="backslashreplace"))
    sys.stdout.flush()


def _open_output(path: str | None) -> IO[bytes]:
    if path is None:
        return sys.stdout.buffer
    try:
        return open(path, "wb")
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}", EXIT_CANNOT_WRITE) from None


def _ttl_ms(seconds: float) -> int | None:
    return int(seconds * 1000) if seconds > 0 else None


def _jobs(value: int) -> int:
    return value if value > 0 else os.cpu_count() or 1


MAX_JOBS = max(4, 2 * (os.cpu_count() or 1))  # more processes than this only add overhead


def _int_in(low: int, high: int | None, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be a finite number > 0, got 0")
    return value


def _names(text: str) -> tuple[str, ...]:
    """An argparse type: names as the list-valued settings take them (`parse_names`)."""
    try:
        return parse_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _broker(text: str) -> list[str]:
    """An argparse type: a broker address, `host:port[,host:port…]`, `kafka://` optional."""
    try:
        return bootstrap_servers(text)
    except BrokerAddressError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _offline(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`command` run with the collector set for an offline command (streams/collector.py)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        with batch_collector():
            return command(args)

    return run


@_offline
def cmd_replay(args: argparse.Namespace) -> int:
    """Run the engine offline over recorded events and print the decisions."""
    from loopguard_fleet.streams.audit.progress import TICK_EVERY, Progress
    from loopguard_fleet.streams.audit.replay_jobs import ReplaySpec, replay_local, replay_sharded

    policy, follows = _replay_policy(args)
    spec = ReplaySpec(policy, args.format == "table", _ttl_ms(args.idle_ttl), follows=follows)
    source = _source(args)
    jobs = _jobs(args.jobs)
    out = _open_output(args.output)
    progress = Progress(Progress.wanted(args.quiet), source.total_bytes, source.done_bytes)
    # Fleet signals are computed over the input's one order: no sharding (docs/fleet.md).
    if jobs == 1 or spec.policy.fleet.enabled:
        outputs, stats = replay_local(spec, source)
    else:
        outputs, stats = replay_sharded(spec, source, jobs)
    next_tick = TICK_EVERY
    shown = 0
    try:
        for o in outputs:
            if o.rejected is not None:
                r = o.rejected
                shown += 1
                if shown <= MAX_SHOWN_REJECTIONS or args.strict:
                    progress.close()
                    print(f"{source.unit} {r.line}: {r.reason}: {r.detail}", file=sys.stderr)
                elif shown == MAX_SHOWN_REJECTIONS + 1:
                    print(f"(further rejected {source.unit}s not shown)", file=sys.stderr)
                if args.strict:
                    return EXIT_USAGE
                continue
            out.write(o.data)
            if o.pos >= next_tick:
                progress.tick(o.pos)
                next_tick = o.pos + TICK_EVERY
    finally:
        progress.close()
        out.flush()
        if args.output:
            out.close()
    if not args.quiet:
        print(stats.summary(), file=sys.stderr)
        if isinstance(source, OtlpInput):
            print(source.counts.summary(), file=sys.stderr)
    if stats.events == 0 and stats.rejected > 0:
        raise CliError(
            _no_events(stats.rejected, source.unit),
            EXIT_NO_EVENTS,
        )
    return EXIT_OK


@_offline
def cmd_explain(args: argparse.Namespace) -> int:
    """Print one run's timeline: every call, its hashes, the counts the rules saw, decisions."""
    from loopguard_fleet.streams.audit.explain import explain_run, render_json, render_table

    policy, follows = _replay_policy(args)
    source = _source(args)
    timeline = explain_run(policy, source, args.run_id, _ttl_ms(args.idle_ttl), follows)
    if timeline.lines > 0 and timeline.rejected == timeline.lines:
        raise CliError(
            _no_events(timeline.lines, source.unit) + " (`loopguard replay` shows why)",
            EXIT_NO_EVENTS,
        )
    if not timeline.rows:
        raise CliError(f"run {args.run_id!r} not found in the input", EXIT_FAILED)
    text = render_json(timeline) if args.format == "json" else render_table(timeline)
    _write(text)
    return EXIT_OK


@_offline
def cmd_compare(args: argparse.Namespace) -> int:
    """Replay two policies over the same history and report what the candidate changes."""
    from loopguard_fleet.streams.audit.compare import compare, compare_shadow, render_summary

    base, follows = _replay_policy(args)
    source = _source(args)
    shadow = _shadow_decisions(args) if args.candidate_topic else None
    cand = None if shadow is not None else _policy(args.candidate, args)
    html = _open_output(args.html) if args.html else None  # fail before the replay, not after
    try:
        if shadow is not None:
            report = compare_shadow(
                base, shadow, args.candidate_topic, source, _ttl_ms(args.idle_ttl),
                follows=follows,
            )  # fmt: skip
            candidate_name = _check_shadow_side(report, args.candidate_topic)
        else:
            assert cand is not None
            report = compare(base, cand, source, _ttl_ms(args.idle_ttl), follows=follows)
            candidate_name = args.candidate
        current_name = args.policy_topic if args.policy_topic else _policy_name(args.policy)
        report.policy_names = (current_name, candidate_name)
        if html is not None:
            from loopguard_fleet.streams.audit.report_html import render_html

            html.write(render_html(report).encode(errors="backslashreplace"))
    finally:
        if html is not None:
            html.close()
    if report.events == 0 and report.rejected > 0:
        raise CliError(
            _no_events(report.rejected, source.unit) + " (`loopguard replay` shows why)",
            EXIT_NO_EVENTS,
        )
    if args.format == "json":
        _write(json_text(report.to_json()))
    else:
        _write(render_summary(report))
    return EXIT_OK


def _shadow_decisions(args: argparse.Namespace) -> ShadowDecisions:
    """The shadow loop events of --candidate-topic (read whole), or one line refusing it."""
    from loopguard_fleet.streams.audit.inputs import topic_items
    from loopguard_fleet.streams.audit.shadow import read_shadow_decisions

    topic = args.candidate_topic
    shadow = read_shadow_decisions(
        topic_items(",".join(args.broker), topic, security=_kafka_security())
    )
    if shadow.enforced:
        raise CliError(
            f"--candidate-topic {topic}: {shadow.enforced} loop events were enforced "
            "(enforced: true); a shadow group observes for every agent (loopguard.mode: "
            "observe, no agent in enforce)",
            EXIT_NO_EVENTS,
        )
    if shadow.decisions == 0:
        raise CliError(
            f"--candidate-topic {topic}: no shadow decision (a loop_event with enforced: "
            f"false) in its {shadow.records} records",
            EXIT_NO_EVENTS,
        )
    if shadow.unreadable:
        print(
            f"warning: --candidate-topic {topic}: {shadow.unreadable} records are neither "
            "control messages nor loop events (passed over)",
            file=sys.stderr,
        )
    return shadow


def _check_shadow_side(report: CompareReport, topic: str) -> str:
    """The candidate's name in the report (its topic and policy version), or one line
    refusing a shadow side that matched no input event or mixes policy versions."""
    side = report.shadow
    assert side is not None
    if side.decisions == 0:
        raise CliError(
            f"--candidate-topic {topic}: none of its {side.unmatched} shadow decisions is "
            "about an event of the input (another input, or outside --from/--to)",
            EXIT_NO_EVENTS,
        )
    if len(side.versions) > 1:
        counts = ", ".join(f"{v}: {n}" for v, n in sorted(side.versions.items()))
        raise CliError(
            f"--candidate-topic {topic}: decisions of {len(side.versions)} policy versions "
            f"({counts}); bound the input with --from/--to to one version's span",
            EXIT_NO_EVENTS,
        )
    return f"{topic} (shadow, {next(iter(side.versions))})"


def cmd_policy_check(args: argparse.Namespace) -> int:
    """Validate a policy file; print one agent's effective block, or every agent's."""
    try:
        policy = load_policy(args.file).with_semantics(args.semantics)
    except PolicyError as e:
        print(f"invalid policy {args.file}:", file=sys.stderr)
        for issue in e.issues:
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        return EXIT_FAILED
    if args.agent is not None:
        eff = policy.effective(args.agent)
    else:  # the version the workers will export (loopguard_policy_info), then every block
        eff = {"version": policy.version, **policy.effective_all()}
    _write(json_text(eff))
    warnings = policy_warnings(read_policy_document(args.file))
    for issue in warnings:
        print(f"warning: {args.file}: {issue.path}: {issue.message}", file=sys.stderr)
    return EXIT_FAILED if warnings and args.strict else EXIT_OK


def _policy_topic_io(args: argparse.Namespace, work: Any) -> Any:
    """Run one policy-topic exchange with the broker of --broker (no retry: one line)."""
    client_log = logging.getLogger("aiokafka")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # its "Unable connect" line: ours says it once
    try:
        return asyncio.run(work(",".join(args.broker), _kafka_security()))
    finally:
        client_log.setLevel(level)


def _live_policy(records: Sequence[Any]) -> tuple[Policy | None, int | None]:
    """The last valid policy of the topic's records (what workers decide with), its offset."""
    from loopguard_fleet.config.policy_record import PolicyRecordError, read_policy_record

    for record in reversed(records):
        try:
            return read_policy_record(record.value), record.offset
        except PolicyRecordError:
            continue
    return None, None


def cmd_policy_push(args: argparse.Namespace) -> int:
    """Validate a policy file as `policy check` does, show what changes, publish it."""
    from loopguard_fleet.config.policy_record import (
        MAX_POLICY_RECORD_BYTES,
        effective_changes,
        encode_policy_record,
    )
    from loopguard_fleet.streams.kafka.policy_topic import (
        ensure_policy_topic,
        publish_policy,
        read_policy_records,
    )

    try:
        policy = load_policy(args.file)
    except PolicyError as e:
        print(f"invalid policy {args.file}: not pushed", file=sys.stderr)
        for issue in e.issues:
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        return EXIT_FAILED
    value = encode_policy_record(read_policy_document(args.file))
    if len(value) > MAX_POLICY_RECORD_BYTES:
        raise CliError(
            f"{args.file}: {len(value)} bytes as JSON, more than the {MAX_POLICY_RECORD_BYTES} "
            "a policy record may have: not pushed",
            EXIT_FAILED,
        )

    async def push(broker: str, security: Any) -> tuple[Policy | None, int]:
        await ensure_policy_topic(broker, args.topic, security=security)
        live, _ = _live_policy(await read_policy_records(broker, args.topic, security=security))
        if live is not None and live.version == policy.version:
            return live, -1
        return live, await publish_policy(broker, args.topic, value, security=security)

    live, offset = _policy_topic_io(args, push)
    if offset < 0:
        _write(f"{policy.version} is already live on {args.topic}: nothing pushed\n")
        return EXIT_OK
    changes = effective_changes(live, policy)
    was = live.version if live is not None else "none"
    lines = [f"{was} → {policy.version} ({args.topic} offset {offset})", *changes]
    _write("\n".join(lines) + "\n")
    return EXIT_OK


def _replay_policy(args: argparse.Namespace) -> tuple[Policy, str]:
    """The policy a replay starts each partition with, and the policy topic whose switch
    records it applies: --policy (else the default) and every topic's; with --policy-topic T,
    T's only, starting from --policy, else from T's last valid version (docs/policy.md)."""
    from loopguard_fleet.streams.kafka.policy_topic import read_policy_records
    from loopguard_fleet.streams.processing.policy_switch import EVERY_POLICY_TOPIC

    topic = args.policy_topic
    if topic is None:
        return _policy(args.policy, args), EVERY_POLICY_TOPIC
    if args.policy is not None:  # the workers' file: before each partition's first switch
        return _policy(args.policy, args), topic

    async def read(broker: str, security: Any) -> Any:
        return await read_policy_records(broker, topic, security=security)

    live, _ = _live_policy(_policy_topic_io(args, read))
    if live is None:
        raise CliError(f"no valid policy on {topic}", EXIT_NO_INPUT)
    return _as_workers(live, args), topic


def cmd_policy_show(args: argparse.Namespace) -> int:
    """Print the live policy of the policy topic: its version and effective blocks."""
    from loopguard_fleet.streams.kafka.policy_topic import read_policy_records

    async def show(broker: str, security: Any) -> Any:
        return await read_policy_records(broker, args.topic, security=security)

    live, offset = _live_policy(_policy_topic_io(args, show))
    if live is None:
        raise CliError(f"no valid policy on {args.topic}", EXIT_NO_INPUT)
    _write(json_text({"version": live.version, "offset": offset, **live.effective_all()}))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schemas of the wire input events, or of the policy file (--policy)."""
    if args.policy:
        from loopguard_fleet.config.policy_json_schema import policy_schema

        schema = policy_schema()
    else:
        from loopguard_fleet.streams.wire.schema import wire_schema

        schema = wire_schema()
    sys.stdout.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode() + "\n")
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker against LOOPGUARD_BROKER."""
    from loopguard_fleet.streams.main import worker_main

    return worker_main()


def cmd_up(args: argparse.Namespace) -> int:
    """Start the embedded broker, a worker, and optionally the demo fleet."""
    from loopguard_fleet.streams.demo.up import up_main
    from loopguard_fleet.streams.main import settings_or_report

    settings = settings_or_report()
    if settings is None:
        return EXIT_USAGE
    if settings.policy_file is not None:  # as the worker would, before starting anything
        load_policy(settings.policy_file)
    return up_main(settings, demo=args.demo, runs=args.runs, broker_kind=args.broker)


POLICY_HELP = (
    "OpenClaw-shaped JSON5 policy file (default: what `loopguard up` runs: "
    "LOOPGUARD_POLICY_FILE if set, else OpenClaw's defaults with detection on)"
)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and EXIT_USAGE, like every other failure."""

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage block."""
        raise CliError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _add_policy_topic(p: argparse.ArgumentParser) -> None:
    """--policy-topic, shared by replay, explain and compare."""
    p.add_argument(
        "--policy-topic",
        metavar="TOPIC",
        help="apply only this policy topic's policy_switch records; without --policy, start "
        "from its last valid version (read from --broker)",
    )


def _add_input(p: argparse.ArgumentParser) -> None:
    """The input arguments shared by replay, explain and compare."""
    p.add_argument("input", nargs="?", help="JSONL events (plain or .gz); - reads stdin")
    p.add_argument(
        "--topic",
        action="append",
        nargs="?",
        const="",
        metavar="NAMES",
        help="read topics instead of a file: comma-separated or repeated; bare --topic reads "
        "the worker's two input topics (LOOPGUARD_TOPIC_TOOL_CALLS, _COMPACTIONS), merged "
        "into each run's seq order as the worker decides",
    )
    p.add_argument(
        "--broker",
        type=_broker,
        default=os.environ.get("LOOPGUARD_BROKER") or "127.0.0.1:9092",
        help=f"bootstrap for --topic: {ADDRESS_FORMAT} (default: LOOPGUARD_BROKER or "
        "127.0.0.1:9092)",
    )
    p.add_argument("--from", dest="from_", metavar="POS", help="offset or RFC 3339 time")
    p.add_argument("--to", metavar="POS", help="offset or RFC 3339 time (exclusive)")
    p.add_argument(
        "--input-format",
        choices=["loopguard", "otlp"],
        default="loopguard",
        help="loopguard: wire events, one a line or message; otlp: OpenTelemetry traces, "
        "OTLP JSON lines (the Collector's file exporter) or one otlp_proto/otlp_json payload a "
        "message (its kafka exporter), whose GenAI execute_tool spans become the events",
    )
    p.add_argument(
        "--otlp-run-id-keys",
        type=_names,
        metavar="KEYS",
        help="span or resource attributes naming the run, comma-separated or a JSON list, "
        "first found wins (default: gen_ai.conversation.id; the trace id when none is set; "
        "empty: the trace id)",
    )
    p.add_argument(
        "--otlp-openinference",
        action="store_true",
        help="also read OpenInference TOOL spans (tool.name, input.value, output.value)",
    )
    p.add_argument(
        "--otlp-privacy",
        action="store_true",
        help="hash arguments and results as a privacy-mode bridge does (events carry hashes)",
    )
    p.add_argument(
        "--otlp-reorder-window",
        type=_seconds,
        metavar="S",
        help="release each run's spans S seconds of span time behind the latest span end "
        "(bounded memory; a later span is refused as otlp_late_span); default: hold every "
        "span until the end of the input",
    )
    p.add_argument(
        "--otlp-dedupe-memory",
        type=_positive_seconds,
        metavar="S",
        help="with a reorder window: a run quiet S seconds of span time past it forgets its "
        "span ids, so a later copy of a span is no longer a duplicate (default: 3600)",
    )
    p.add_argument(
        "--idle-ttl",
        type=_seconds,
        default=DEFAULT_IDLE_TTL_S,
        metavar="S",
        help="drop a run quiet this long in event time, as the worker does (0: never)",
    )
    p.add_argument(
        "--channel-tools",
        type=_names,
        default=tuple(sorted(DEFAULT_CHANNEL_TOOLS)),
        metavar="TOOLS",
        help="provider channel tools whose results are hashed as outbound sends, as the "
        "workers' LOOPGUARD_CHANNEL_TOOLS (same format: comma-separated or a JSON list; "
        f"default: {','.join(sorted(DEFAULT_CHANNEL_TOOLS))})",
    )
    _add_semantics(p)


def _add_semantics(p: argparse.ArgumentParser) -> None:
    """--semantics: which OpenClaw release's rules decide (docs/semantics.md)."""
    p.add_argument(
        "--semantics", choices=SEMANTICS, default=CONFIGURABLE, help="detection rules' profile"
    )


def package_version() -> str:
    """The installed distribution's version (`loopguard --version`)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, show the traceback instead of one line",
    )
    p = _Parser(prog="loopguard", description=__doc__, parents=[common])
    version = f"%(prog)s {package_version()} ({engine_build()} engine)"  # compiled: setup.py
    p.add_argument("--version", action="version", version=version)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser(
        "replay", help="run the engine offline over recorded events", parents=[common]
    )
    _add_input(r)
    r.add_argument("--policy", help=POLICY_HELP)
    _add_policy_topic(r)
    r.add_argument("--format", choices=["jsonl", "table"], default="jsonl")
    r.add_argument("--output", help="write decisions here instead of stdout")
    r.add_argument("--strict", action="store_true", help="stop at the first malformed line")
    r.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    r.add_argument(
        "--jobs",
        type=_int_in(0, MAX_JOBS, "--jobs"),
        default=1,
        help=f"processes, sharded by run id: 1 to {MAX_JOBS} (twice the cores, at least 4); "
        "0: one per core",
    )
    r.set_defaults(func=cmd_replay)

    e = sub.add_parser("explain", help="one run's timeline and why", parents=[common])
    e.add_argument("run_id", metavar="RUN_ID")
    _add_input(e)
    e.add_argument("--policy", help=POLICY_HELP)
    _add_policy_topic(e)
    e.add_argument("--format", choices=["table", "json"], default="table")
    e.set_defaults(func=cmd_explain)

    c = sub.add_parser(
        "compare", help="what-if: a candidate policy vs the current one", parents=[common]
    )
    _add_input(c)
    c.add_argument("--policy", help="the current " + POLICY_HELP)
    _add_policy_topic(c)
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--candidate", help="the policy to evaluate")
    which.add_argument(
        "--candidate-topic",
        metavar="TOPIC",
        help="read the candidate's decisions back from a shadow worker group's control topic "
        "(its loop events with enforced: false, read whole from --broker) instead of "
        "replaying a candidate file",
    )
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    c.set_defaults(func=cmd_compare)

    pol = sub.add_parser("policy", help="policy tools", parents=[common])
    psub = pol.add_subparsers(dest="policy_command", required=True)
    chk = psub.add_parser(
        "check", help="validate a policy and print the effective thresholds", parents=[common]
    )
    chk.add_argument("file")
    chk.add_argument("--agent", default=None, help="only this agent's effective block")
    chk.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on a warning too (no tools.loopDetection anywhere, a key one typo away "
        "from tools, agents or loopDetection); warnings alone exit 0",
    )
    _add_semantics(chk)
    chk.set_defaults(func=cmd_policy_check)
    for name, func, what in (
        ("push", cmd_policy_push, "validate a policy and publish it to the policy topic"),
        ("show", cmd_policy_show, "print the live policy of the policy topic"),
    ):
        cmd = psub.add_parser(name, help=what, parents=[common])
        if name == "push":
            cmd.add_argument("file")
        cmd.add_argument(
            "--broker",
            type=_broker,
            default=os.environ.get("LOOPGUARD_BROKER") or "127.0.0.1:9092",
            help=f"{ADDRESS_FORMAT} (default: LOOPGUARD_BROKER or 127.0.0.1:9092)",
        )
        cmd.add_argument(
            "--topic",
            default=os.environ.get("LOOPGUARD_POLICY_TOPIC") or TOPIC_POLICY,
            help=f"the policy topic (default: LOOPGUARD_POLICY_TOPIC or {TOPIC_POLICY})",
        )
        cmd.set_defaults(func=func)

    sc = sub.add_parser(
        "schema", help="print the JSON Schemas of the wire events", parents=[common]
    )
    sc.add_argument(
        "--policy",
        action="store_true",
        help="print the JSON Schema of the policy file (tools.loopDetection, loopguard) instead",
    )
    sc.set_defaults(func=cmd_schema)

    w = sub.add_parser(
        "worker",
        help="run a worker against LOOPGUARD_BROKER",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a worker. It is configured only by LOOPGUARD_* variables "
        "(docs/architecture.md); an unknown one is refused with a did-you-mean:\n\n  "
        + "\n  ".join(setting_names()),
    )
    w.set_defaults(func=cmd_worker)

    u = sub.add_parser("up", help="embedded broker + worker (+ --demo fleet)", parents=[common])
    u.add_argument("--demo", action="store_true", help="also run a simulated fleet")
    u.add_argument(
        "--runs", type=_int_in(1, None, "--runs"), default=50, help="runs in the demo fleet"
    )
    u.add_argument(
        "--broker",
        choices=["tansu", "kafka"],
        default="tansu",
        help="broker to start: embedded Tansu (default) or Apache Kafka (needs Java and Maven)",
    )
    u.set_defaults(func=cmd_up)
    return p


def _prog(argv: Sequence[str]) -> str:
    """`loopguard <command>` for the message prefix, from the raw arguments."""
    commands = {"replay", "explain", "compare", "policy", "schema", "worker", "up"}
    named = next((a for a in argv if a in commands), None)
    return f"loopguard {named}" if named else "loopguard"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `loopguard` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # known before parsing, so parse errors honour it too
    try:
        args = build_parser().parse_args(argv)
        rc: int = args.func(args)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, like any Unix filter.
        # stdout may be no file descriptor (embedded use): then nothing is left to flush.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (Exception, KeyboardInterrupt) as exc:
        if debug:
            raise
        message, code = describe(exc)
        print(f"{_prog(argv)}: {message}", file=sys.stderr)
        return code
    return rc


if __name__ == "__main__":
    sys.exit(main())
