"""`loopguard up`: the embedded default — broker, worker, metrics, and (`--demo`) a fleet.

Starts the bundled Tansu broker (or, with `--broker kafka`, Apache Kafka: streams/embedded/)
on a free 127.0.0.1 port (unless LOOPGUARD_BROKER is set),
runs one worker as a child process, prints where /metrics is, and with --demo publishes a
simulated fleet while printing the decisions as they arrive. Ctrl-C (SIGINT) or SIGTERM (a
supervisor's stop) stops everything it started, by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from loopguard_fleet.config.policy import DETECTION_ON_TEXT
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.jsjson import loads
from loopguard_fleet.streams.client.runtime import Topics
from loopguard_fleet.streams.demo.simulate import heartbeat, simulate
from loopguard_fleet.streams.embedded.child import free_port
from loopguard_fleet.streams.embedded.kafka import (
    KAFKA_VERSION,
    KafkaBroker,
    find_java,
    install_jars,
    is_installed,
)
from loopguard_fleet.streams.embedded.processes import stop_process
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.admin import topic_partitions
from loopguard_fleet.streams.kafka.connection import cancel_until_done

READY_TIMEOUT_S = 90.0
UP_FETCH_MAX_WAIT_MS = 5  # the embedded worker's default: docs/client.md, "Verdict latency"
UP_POLICY = "// written by `loopguard up`\n" + DETECTION_ON_TEXT
#: `--demo` adds fleet signals with a short window, so its outage fires, blocks early and
#: resolves within the demo (docs/fleet.md, "Try it"); the defaults are 300 s and `warn`.
DEMO_POLICY = (
    "// written by `loopguard up --demo`\n"
    "{tools: {loopDetection: {enabled: true}},\n"
    " loopguard: {fleet: {enabled: true, windowSeconds: 6, minRuns: 5, earlyAction: 'block',"
    " earlyAtCount: 3}}}\n"
)
DEMO_OUTAGE_RUNS = 12  # runs the demo's outage hits, beside the healthy and stuck ones


def _worker_env(
    settings: Settings,
    broker_url: str,
    is_tansu: bool,
    data_dir: Path,
    web_port: int,
    demo: bool = False,
) -> dict[str, str]:
    """The worker's environment: the user's, with the broker, port and demo defaults set."""
    env = dict(os.environ)  # the worker builds its own Settings from it (streams/main.py)
    env["LOOPGUARD_BROKER"] = broker_url
    env.setdefault("LOOPGUARD_DATA_DIR", str(data_dir))
    env["LOOPGUARD_WEB_PORT"] = str(web_port)
    if settings.policy_file is None:
        # OpenClaw ships the rolling detectors off; the embedded default turns them on.
        policy = data_dir / "policy.json5"
        policy.write_text(DEMO_POLICY if demo else UP_POLICY)
        env["LOOPGUARD_POLICY_FILE"] = str(policy)
    # A verdict waits for the worker's next fetch: Tansu holds a fetch for the whole
    # max-wait, so the settings' 100 ms would be most of a verdict's latency (docs/client.md).
    env.setdefault("LOOPGUARD_FETCH_MAX_WAIT_MS", str(UP_FETCH_MAX_WAIT_MS))
    if is_tansu:
        # Tansu under-reports end offsets of batched partitions, which trips Faust's check.
        env["LOOPGUARD_RECOVERY_CONSISTENCY_CHECK"] = "false"
    return env


def _wait_ready(proc: subprocess.Popen[bytes], web_port: int, log_path: Path) -> None:
    # /readyz, not /healthz: the web server answers seconds before the worker has its
    # partitions, and a verdict asked for in between fails open (streams/worker/faust/readiness.py).
    deadline = time.monotonic() + READY_TIMEOUT_S
    url = f"http://127.0.0.1:{web_port}/readyz"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise SystemExit("worker exited during start-up:\n" + "\n".join(tail))
        # A 503 (not consuming yet) raises HTTPError, an OSError: keep waiting.
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as resp:
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"worker not ready after {READY_TIMEOUT_S:.0f}s; see {log_path}")


def format_decision(msg: dict[str, Any]) -> str:
    """One control message as a terminal line."""
    run = str(msg.get("run_id", ""))[:18]
    if msg.get("type") == "loop_event":
        action = str(msg.get("action", "")).upper()
        quiet = "" if msg.get("published") else "  (unpublished)"
        return (
            f"{action:<6} {run:<18} {msg.get('tool', '')!s:<14} {msg.get('detector', '')!s:<26}"
            f" count {msg.get('count')}{quiet}"
        )
    if msg.get("type") == "command":
        return f"  → {msg.get('command')} {run} ({msg.get('detector')})"
    if msg.get("type") == "fleet_signal":
        what = f"tool {msg.get('tool')}" if msg.get("kind") == "tool" else str(msg.get("tool"))
        state = str(msg.get("state", ""))
        evidence = f" in {msg.get('runs')} runs across {msg.get('agents')} agents"
        return (
            f"FLEET  {state.upper():<8} {what}{evidence if state == 'firing' else ''}"
            f" (signal {str(msg.get('signal_id', ''))[:12]})"
        )
    return f"verdict {run} {msg.get('tool_call_id')} {msg.get('decision')}"


async def _tail(bootstrap: str, topic: str, show_unpublished: bool) -> None:
    parts = (await topic_partitions(bootstrap, [topic], wait=30))[topic]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(parts)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for rec in records:
                    msg = loads(rec.value or b"{}")
                    is_quiet = msg.get("type") == "loop_event" and not msg.get("published")
                    if is_quiet and not show_unpublished:
                        continue
                    print(format_decision(msg), flush=True)
    finally:
        await consumer.stop()


async def _demo(bootstrap: str, topics: Topics, runs: int) -> None:
    # Inside the loop SIGTERM cancels this task, as asyncio.run does for SIGINT: an exception
    # raised from a signal handler could land in the middle of the loop's own code.
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    tail = asyncio.create_task(_tail(bootstrap, topics.control, show_unpublished=False))
    beat: asyncio.Task[None] | None = None
    try:
        await asyncio.sleep(1.0)  # let the tail position itself before the fleet starts
        sent = await simulate(bootstrap, topics, runs=runs, outage_runs=DEMO_OUTAGE_RUNS)
        print(
            f"demo fleet: {sent} events from {runs} runs and {DEMO_OUTAGE_RUNS} hit by an outage"
            " sent; a heartbeat run keeps the fleet's time moving; Ctrl-C to stop",
            flush=True,
        )
        beat = asyncio.create_task(heartbeat(bootstrap, topics))
        await asyncio.wait([tail, beat], return_when=asyncio.FIRST_COMPLETED)
        for task in (tail, beat):
            if task.done():
                task.result()  # a failure of either ends the demo with its error
    finally:
        await cancel_until_done([t for t in (tail, beat) if t is not None])


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM handler outside the event loop: stop the way Ctrl-C does."""
    raise KeyboardInterrupt


def _ignore_stop_signals() -> None:
    """Ignore further SIGTERMs and Ctrl-Cs: the clean-up must not be cut short."""
    # A second Ctrl-C once raised inside the clean-up: `up` exited and its worker ran on,
    # orphaned. stop_process is bounded by its SIGKILL, so finishing the clean-up loses nothing.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_broker(kind: str) -> EmbeddedBroker | KafkaBroker:
    """Start the broker `up` runs: Tansu (in memory), or Apache Kafka (jars installed once)."""
    if kind == "tansu":
        return EmbeddedBroker().start()
    find_java()  # before a Maven download: fail first on what cannot be fixed by one
    if not is_installed():
        print(f"broker   installing the Apache Kafka {KAFKA_VERSION} jars (Maven)…", flush=True)
        install_jars()
    return KafkaBroker().start()


def _describe(broker: EmbeddedBroker | KafkaBroker) -> str:
    if isinstance(broker, KafkaBroker):
        return f" (Apache Kafka {KAFKA_VERSION}, data in {broker.data_dir}, pid {broker.pid})"
    return f" (embedded Tansu, in memory, pid {broker.pid})"


def up_main(settings: Settings, demo: bool, runs: int = 50, broker_kind: str = "tansu") -> int:
    """Run the embedded default until Ctrl-C or SIGTERM; returns the exit code.

    `settings` come from the environment (the CLI builds them); a broker or web port the user
    did not set is chosen here: an embedded broker, a free port.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    chosen = settings.model_fields_set
    external = settings.broker if "broker" in chosen else None
    if external and broker_kind != "tansu":
        raise SystemExit(f"--broker {broker_kind} starts a broker: unset LOOPGUARD_BROKER")
    broker: EmbeddedBroker | KafkaBroker | None = None
    data_dir = Path(tempfile.mkdtemp(prefix="loopguard-"))
    log_path = data_dir / "worker.log"
    topics = Topics(settings.topic_tool_calls, settings.topic_compactions, settings.topic_control)
    proc = None
    stopped = False  # by the user (Ctrl-C, SIGTERM), not by a failure
    try:
        if not external:
            try:
                broker = _start_broker(broker_kind)
            except BrokerError as exc:
                raise SystemExit(f"loopguard up: {exc}") from exc
        broker_url = external or broker.url  # type: ignore[union-attr]
        # Picked once the broker listens: picked before, the OS could hand the broker the same
        # port, and the worker's web server then failed to bind (address already in use).
        web_port = settings.web_port if "web_port" in chosen else free_port()
        bootstrap = ",".join(settings.model_copy(update={"broker": broker_url}).bootstrap_servers)
        where = "" if broker is None else _describe(broker)
        # The one address form every consumer takes: LOOPGUARD_BROKER, --broker, RuntimeClient.
        print(f"broker   {bootstrap}{where}")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"],
                env=_worker_env(
                    settings,
                    broker_url,
                    isinstance(broker, EmbeddedBroker),
                    data_dir,
                    web_port,
                    demo,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us; we stop the worker cleanly
            )
        print(f"worker   pid {proc.pid}, log {log_path}")
        print(f"policy   {settings.policy_file or data_dir / 'policy.json5'}")
        _wait_ready(proc, web_port, log_path)
        print(f"metrics  http://127.0.0.1:{web_port}/metrics", flush=True)
        if demo:
            asyncio.run(_demo(bootstrap, topics, runs))
        else:
            print("ready; Ctrl-C to stop", flush=True)
            proc.wait()
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM during the demo
        _ignore_stop_signals()  # before the line that tells the user a second Ctrl-C is moot
        print("\nstopping…", flush=True)
        stopped = True
    finally:
        _ignore_stop_signals()
        worker_code = 0 if proc is None else stop_process(proc, timeout=20)
        if broker is not None:
            broker.stop()
        _leave_data_dir(data_dir, log_path, keep=not stopped or worker_code != 0)
    return 0


def _leave_data_dir(data_dir: Path, log_path: Path, keep: bool) -> None:
    """Remove `up`'s data directory after a clean stop; after a failure keep it, for its log."""
    # It holds the worker's store, the policy file `up` wrote and the worker's log; nothing
    # reads them again (each `up` makes a new directory). With no log (a failure before the
    # worker started) there is nothing worth keeping.
    if keep and log_path.exists():
        print(f"log      kept: {log_path}", flush=True)
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
