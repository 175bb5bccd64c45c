"""The `loopguard` command: replay, policy check, schema, worker, up, simulate."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import orjson

from config import Policy, PolicyError, load_policy
from detectors import Decision
from streams.replay import Rejected, Replayer, encode_decision, replay_lines

PROGRESS_EVERY = 5000


def _policy(path: str | None) -> Policy:
    return Policy.default() if path is None else load_policy(path)


def _table_row(d: Decision) -> str:
    p = d.to_wire()
    if d.kind == "loop_event":
        pub = "" if p["published"] else " (unpublished)"
        return (
            f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} {p['action']!s:<6} {p['detector']!s:<26} "
            f"{p['count']!s:>4}  {p['tool']}{pub}"
        )
    if d.kind == "command":
        return f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} → {p['command']} ({p['detector']})"
    return f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} verdict {p['decision']} {p['tool_call_id']}"


def cmd_replay(args: argparse.Namespace) -> int:
    """Run the engine offline over a JSONL file (or a topic) and print the decisions."""
    replayer = Replayer(_policy(args.policy))
    out: IO[bytes] = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    progress = sys.stderr.isatty() and not args.quiet
    try:
        if args.topic:
            from streams.topic_reader import read_topic_lines

            lines = read_topic_lines(args.broker, args.topic)
        else:
            lines = Path(args.file).read_bytes().splitlines()
        total = len(lines)
        for i, item in enumerate(replay_lines(replayer, lines), 1):
            if isinstance(item, Rejected):
                print(f"line {item.line}: {item.reason}: {item.detail}", file=sys.stderr)
                if args.strict:
                    return 2
                continue
            if args.format == "table":
                out.write(_table_row(item).encode() + b"\n")
            else:
                out.write(encode_decision(item) + b"\n")
            if progress and i % PROGRESS_EVERY == 0:
                done = replayer.stats.events
                print(f"\r{done}/{total} events", end="", file=sys.stderr)
    finally:
        if args.output:
            out.close()
    s = replayer.stats
    if progress:
        print("\r", end="", file=sys.stderr)
    if not args.quiet:
        print(
            f"{s.events} events, {s.decisions} decisions, {s.duplicates} duplicates, "
            f"{s.rejected} rejected",
            file=sys.stderr,
        )
    return 1 if s.rejected and args.strict else 0


def cmd_policy_check(args: argparse.Namespace) -> int:
    """Validate a policy file and print the effective block for an agent."""
    try:
        policy = load_policy(args.file)
    except PolicyError as e:
        print(f"invalid policy {args.file}:", file=sys.stderr)
        for issue in e.issues:
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        return 1
    eff = policy.effective(args.agent)
    sys.stdout.write(orjson.dumps(eff, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schemas of the wire input events."""
    from streams.schema import wire_schema

    sys.stdout.write(orjson.dumps(wire_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker against LOOPGUARD_BROKER."""
    from streams.main import worker_main

    return worker_main()


def cmd_up(args: argparse.Namespace) -> int:
    """Start the embedded broker, a worker, and optionally the demo fleet."""
    from streams.up import up_main

    return up_main(demo=args.demo, runs=args.runs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = argparse.ArgumentParser(prog="loopguard", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("replay", help="run the engine offline over recorded events")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="wire events, one JSON object per line")
    src.add_argument("--topic", help="replay a topic's messages instead of a file")
    r.add_argument("--broker", default="127.0.0.1:9092", help="bootstrap for --topic")
    r.add_argument("--policy", help="OpenClaw-shaped JSON5 policy file (default: defaults)")
    r.add_argument("--format", choices=["jsonl", "table"], default="jsonl")
    r.add_argument("--output", help="write decisions here instead of stdout")
    r.add_argument("--strict", action="store_true", help="stop at the first malformed line")
    r.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    r.set_defaults(func=cmd_replay)

    pol = sub.add_parser("policy", help="policy tools")
    psub = pol.add_subparsers(dest="policy_command", required=True)
    chk = psub.add_parser("check", help="validate a policy and print the effective thresholds")
    chk.add_argument("file")
    chk.add_argument("--agent", default=None, help="agent id whose overlay to apply")
    chk.set_defaults(func=cmd_policy_check)

    sc = sub.add_parser("schema", help="print the JSON Schemas of the wire events")
    sc.set_defaults(func=cmd_schema)

    w = sub.add_parser("worker", help="run a worker against LOOPGUARD_BROKER")
    w.set_defaults(func=cmd_worker)

    u = sub.add_parser("up", help="embedded broker + worker (+ --demo fleet)")
    u.add_argument("--demo", action="store_true", help="also run a simulated fleet")
    u.add_argument("--runs", type=int, default=50, help="runs in the demo fleet")
    u.set_defaults(func=cmd_up)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `loopguard` console script."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
