// The plugin's behaviour, independent of how OpenClaw loads it: OpenClaw hooks in, LoopGuard
// wire events out, verdicts and commands from the control topic back into hook results.
//
//   before_tool_call  → tool_call (gate mode: want_verdict, wait ≤ verdictTimeoutMs, fail open)
//   after_tool_call   → tool_result          after_compaction → compaction
//   agent_end         → run_end              session_end      → run_end of its open runs
import { RunEvents, utcNow } from "./run-events.js";

const MAX_RUNS = 10_000;
const MAX_REMEMBERED = 10_000;
const FALLBACK_BLOCK_REASON = "LoopGuard blocked this tool call: it repeats a loop.";

const callKey = (runId, toolCallId) => `${runId}\u001f${toolCallId}`;

function remember(map, key, value) {
  map.set(key, value);
  if (map.size > MAX_REMEMBERED) map.delete(map.keys().next().value);
}

/** The synthetic result OpenClaw writes for a call a plugin vetoed: not an outcome of the tool. */
function isPluginVetoResult(result) {
  const details = result !== null && typeof result === "object" ? result.details : undefined;
  return details?.status === "blocked" && details?.deniedReason === "plugin-before-tool-call";
}

export class LoopGuardPlugin {
  /** `createTransport(onControl)` builds the Kafka side; it starts on the first event. */
  constructor({ config, logger, createTransport, runs = new Map(), clock = utcNow, now = () => Date.now() }) {
    this.config = config;
    this.logger = logger;
    this.createTransport = createTransport;
    this.runs = runs; // run id → {events, aborted}; may be shared across plugin reloads
    this.clock = clock;
    this.now = now;
    this.transport = null;
    this.lastRunOfSession = new Map();
    this.waiters = new Map();
    this.loopEvents = new Map(); // trigger event id → loop_event / block_call of our runs
    this.vetoed = new Set(); // calls this plugin blocked: their synthetic results are skipped
    this.stats = {
      published: 0, hashedOversized: 0, unkeyed: 0, verdicts: { allow: 0, warn: 0, block: 0 },
      verdictTimeouts: 0, failOpenDisconnected: 0, abortedRunBlocks: 0, approvalsRequested: 0,
      vetoResultsSkipped: 0, abortsReceived: 0,
    };
    this.onControl = (message) => this.#onControl(message);
  }

  #transport() {
    if (this.transport === null) {
      this.transport = this.createTransport(this.onControl);
      this.transport.start();
    }
    return this.transport;
  }

  #run(runId, ctx) {
    let run = this.runs.get(runId);
    if (run === undefined) {
      run = {
        events: new RunEvents(runId, {
          agentId: ctx?.agentId ?? null, sessionKey: ctx?.sessionKey ?? null,
          privacy: this.config.privacy, clock: this.clock, channelTools: this.config.channelTools,
        }),
        aborted: null,
      };
      this.runs.set(runId, run);
      if (this.runs.size > MAX_RUNS) this.runs.delete(this.runs.keys().next().value);
    }
    if (ctx?.sessionKey) this.lastRunOfSession.set(ctx.sessionKey, runId);
    if (this.lastRunOfSession.size > MAX_RUNS) this.lastRunOfSession.delete(this.lastRunOfSession.keys().next().value);
    return run;
  }

  /** Build one event with `build(privacy)` and queue it; an oversized raw event goes hashed. */
  #publish(run, build) {
    const seq = run.events.seq;
    let event = build(this.config.privacy);
    let value = JSON.stringify(event);
    if (!this.config.privacy && Buffer.byteLength(value) > this.config.maxEventBytes) {
      run.events.seq = seq; // the same seq and event_id, in the hashed form the worker also reads
      event = build(true);
      value = JSON.stringify(event);
      this.stats.hashedOversized += 1;
    }
    const lifecycle = event.type === "compaction" || event.type === "run_end";
    const { toolCalls, compactions } = this.config.topics;
    this.#transport().send(lifecycle ? compactions : toolCalls, event.run_id, value);
    this.stats.published += 1;
    return event;
  }

  /** before_tool_call: publish the call; in gate mode wait for its verdict and enforce it. */
  async beforeToolCall(event, ctx = {}) {
    const runId = event.runId ?? ctx.runId;
    if (!runId) {
      this.stats.unkeyed += 1;
      return undefined;
    }
    const run = this.#run(runId, ctx);
    const isGate = this.config.mode === "gate";
    const toolCallId = event.toolCallId ?? ctx.toolCallId ?? null;
    if (isGate && run.aborted !== null) {
      this.stats.abortedRunBlocks += 1;
      if (toolCallId) this.vetoed.add(callKey(runId, toolCallId));
      return { block: true, blockReason: run.aborted.reason };
    }
    if (!isGate) {
      this.#publish(run, (privacy) => run.events.toolCall(event.toolName, event.params, toolCallId, false, { privacy }));
      return undefined;
    }
    const deadline = this.now() + this.config.verdictTimeoutMs;
    const transport = this.#transport();
    if (!transport.isControlReady) await this.#until(transport.controlReady, deadline, ctx.abortSignal);
    const built = this.#publish(run, (privacy) => run.events.toolCall(event.toolName, event.params, toolCallId, true, { privacy }));
    if (!transport.isConnected) {
      this.stats.failOpenDisconnected += 1; // buffered for later; nobody can answer now
      return undefined;
    }
    const key = callKey(runId, built.tool_call_id);
    const verdict = await this.#until(new Promise((resolve) => this.waiters.set(key, resolve)), deadline, ctx.abortSignal);
    this.waiters.delete(key);
    if (verdict === undefined) {
      this.stats.verdictTimeouts += 1;
      this.logger.warn(`loopguard: no verdict for run ${runId} call ${built.tool_call_id} in ${this.config.verdictTimeoutMs} ms: failing open (allow)`);
      return undefined;
    }
    const decision = verdict.decision === "block" || verdict.decision === "warn" ? verdict.decision : "allow";
    this.stats.verdicts[decision] += 1;
    const loopEvent = this.loopEvents.get(built.event_id);
    if (decision === "block") {
      this.vetoed.add(key);
      return { block: true, blockReason: loopEvent?.message ?? FALLBACK_BLOCK_REASON };
    }
    if (decision === "warn" && this.config.onWarn === "requireApproval" && loopEvent?.published === true) {
      this.stats.approvalsRequested += 1;
      return {
        requireApproval: {
          title: `LoopGuard: possible ${loopEvent.detector ?? "tool"} loop`,
          description: loopEvent.message,
          severity: "warning",
          timeoutMs: this.config.approvalTimeoutMs,
        },
      };
    }
    return undefined;
  }

  /** Resolves with the promise's value, or undefined at the deadline or when the call is cancelled. */
  async #until(promise, deadline, abortSignal) {
    let timer;
    let onAbort;
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, Math.max(0, deadline - this.now()));
      onAbort = () => resolve(undefined);
      abortSignal?.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([promise, late]);
    } finally {
      clearTimeout(timer);
      abortSignal?.removeEventListener("abort", onAbort);
    }
  }

  /** after_tool_call: publish the outcome (error if OpenClaw reports one, else the result). */
  afterToolCall(event, ctx = {}) {
    const runId = event.runId ?? ctx.runId;
    if (!runId) {
      this.stats.unkeyed += 1;
      return;
    }
    const toolCallId = event.toolCallId ?? ctx.toolCallId ?? null;
    const key = callKey(runId, toolCallId);
    if (this.vetoed.delete(key) && isPluginVetoResult(event.result)) {
      this.stats.vetoResultsSkipped += 1; // our own block is no outcome (docs/semantics.md §3 rule 4)
      return;
    }
    const run = this.#run(runId, ctx);
    const outcome = event.error !== undefined ? { error: event.error } : { result: event.result };
    this.#publish(run, (privacy) => run.events.toolResult(toolCallId, event.toolName, event.params, outcome, { privacy }));
  }

  /** after_compaction: the run's post-compaction guard arms on this event. */
  afterCompaction(_event, ctx = {}) {
    const runId = ctx.runId ?? (ctx.sessionKey ? this.lastRunOfSession.get(ctx.sessionKey) : undefined);
    if (!runId) {
      this.stats.unkeyed += 1;
      return;
    }
    const run = this.#run(runId, ctx);
    this.#publish(run, () => run.events.compaction());
  }

  /** agent_end: publish run_end; the run's state here is dropped. */
  agentEnd(event, ctx = {}) {
    const runId = event?.runId ?? ctx.runId;
    if (!runId) {
      this.stats.unkeyed += 1;
      return;
    }
    this.#end(runId, ctx);
  }

  /** session_end: end every run of the session that is still open. */
  sessionEnd(event, ctx = {}) {
    const sessionKey = event?.sessionKey ?? ctx.sessionKey;
    if (!sessionKey) return;
    for (const [runId, run] of [...this.runs]) {
      if (run.events.sessionKey === sessionKey) this.#end(runId, ctx);
    }
    this.lastRunOfSession.delete(sessionKey);
  }

  #end(runId, ctx) {
    const run = this.runs.get(runId) ?? this.#run(runId, ctx);
    this.#publish(run, () => run.events.end());
    this.runs.delete(runId);
  }

  #onControl(message) {
    const run = this.runs.get(message.run_id);
    if (run === undefined) return; // another gateway's run
    if (message.type === "verdict") {
      this.waiters.get(callKey(message.run_id, message.tool_call_id))?.(message);
    } else if (message.type === "loop_event") {
      remember(this.loopEvents, message.trigger_event_id, message);
    } else if (message.type === "command" && message.command === "abort_run") {
      this.stats.abortsReceived += 1;
      if (run.aborted === null) {
        run.aborted = { reason: message.reason ?? FALLBACK_BLOCK_REASON, seq: message.seq };
        this.logger.warn(`loopguard: run ${message.run_id} aborted (${message.detector}); its further tool calls are blocked`);
      }
    }
  }

  /** Graceful shutdown: flush what is buffered (bounded by flushTimeoutMs), close Kafka. */
  async stop() {
    const transport = this.transport;
    this.transport = null;
    if (transport !== null) await transport.close(this.config.flushTimeoutMs);
  }
}
