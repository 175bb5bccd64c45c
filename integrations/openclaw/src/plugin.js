// The plugin's behaviour, independent of how OpenClaw loads it: OpenClaw hooks in, LoopGuard
// wire events out, verdicts and commands from the control topic back into hook results.
//
//   before_tool_call  → tool_call (gate mode: want_verdict, wait ≤ verdictTimeoutMs, fail open)
//   after_tool_call   → tool_result of a call that ran (synthetic blocked results: see below)
//   tool_result_persist → the warning note appended to the result the model sees
//   after_compaction  → compaction
//   agent_end         → run_end              session_end      → run_end of its open runs
import { SharedConnection } from "./connection.js";
import { RunEvents, utcNow } from "./run-events.js";

const MAX_RUNS = 10_000;
const MAX_REMEMBERED = 10_000;
const FALLBACK_BLOCK_REASON = "LoopGuard blocked this tool call: it repeats a loop.";

const callKey = (runId, toolCallId) => `${runId}\u001f${toolCallId}`;
const noteKey = (sessionKey, toolCallId) => `${sessionKey ?? ""}\u001f${toolCallId}`;

function remember(map, key, value) {
  map.set(key, value);
  if (map.size > MAX_REMEMBERED) map.delete(map.keys().next().value);
}

/**
 * The `deniedReason` of a synthetic result OpenClaw wrote for a call that never ran
 * (`details.status` "blocked" or "skipped": plugin vetoes and approvals, its own tool-loop
 * veto, tool admission, steering, ...), else null: the result is an outcome of the tool.
 */
export function deniedReasonOf(result) {
  const details = result !== null && typeof result === "object" ? result.details : undefined;
  if (details === null || typeof details !== "object") return null;
  const isSynthetic = details.status === "blocked" || details.status === "skipped";
  return isSynthetic && typeof details.deniedReason === "string" && details.deniedReason !== "" ? details.deniedReason : null;
}

/** OpenClaw 2026.9's note on a published loop warning (`appendToolLoopWarning`, dist/internal-hooks-*.mjs). */
export const warningNote = (count) =>
  `[System note: Tool-loop warning after ${count} repeated calls. Change your approach or stop if you are not making progress.]`;

/**
 * What the gateway's own `tools.loopDetection` runs (docs/tools/loop-detection.md of OpenClaw):
 * the rolling detectors when `enabled` is true (globally or for an agent), the post-compaction
 * guard unless `enabled` is false. Either one decides before plugin hooks and shadows LoopGuard.
 */
export function gatewayLoopDetection(config) {
  const global = config?.tools?.loopDetection?.enabled;
  // openclaw.json lists agents in `agents.list`; the runtime config OpenClaw hands plugins
  // (api.config) keys them by id in `agents.entries`.
  const { list, entries } = config?.agents ?? {};
  const agents = [...(Array.isArray(list) ? list : []), ...(entries !== null && typeof entries === "object" ? Object.values(entries) : [])];
  const agentFlags = agents.map((a) => a?.tools?.loopDetection?.enabled);
  const rolling = global === true || agentFlags.includes(true);
  // An agent without its own flag follows the global one.
  const postCompaction = agentFlags.length ? agentFlags.some((f) => (f ?? global) !== false) : global !== false;
  return { rolling, postCompaction };
}

export class LoopGuardPlugin {
  /**
   * `createTransport(onControl)` builds the Kafka side; `connection` (shared by every instance
   * of the process) starts it on the first event and closes it once.
   */
  constructor({ config, logger, createTransport, connection = new SharedConnection(), runs = new Map(),
    clock = utcNow, now = () => Date.now(), gatewayConfig = undefined }) {
    this.config = config;
    this.logger = logger;
    this.createTransport = createTransport;
    this.connection = connection;
    this.runs = runs; // run id → {events, aborted}; may be shared across plugin reloads
    this.clock = clock;
    this.now = now;
    this.lastRunOfSession = new Map();
    this.waiters = new Map();
    this.loopEvents = new Map(); // trigger event id → loop_event / block_call of our runs
    this.vetoed = new Set(); // calls this plugin blocked: their synthetic results are skipped
    this.publishedCalls = new Map(); // calls published as tool_call: their results pair with them
    this.notes = new Map(); // session + tool call id → warning note for the result the model sees
    this.stats = {
      published: 0, hashedOversized: 0, unkeyed: 0, verdicts: { allow: 0, warn: 0, block: 0 },
      verdictTimeouts: 0, failOpenDisconnected: 0, abortedRunBlocks: 0, approvalsRequested: 0,
      vetoResultsSkipped: 0, abortsReceived: 0, abortedWhileWaiting: 0, notesAdded: 0,
      approvalsDegradedToNote: 0, notExecutedSkipped: {}, gatewayVetoesPublished: 0,
      lostAtShutdown: 0, lostAfterShutdown: 0,
      gatewayLoopDetection: gatewayLoopDetection(gatewayConfig),
    };
    this.unlisten = null; // attached on first use: discovery registrations never are
  }

  /** Receive the control messages of the process's connection (again, after dispose). */
  attach() {
    this.unlisten ??= this.connection.listen((message) => this.#onControl(message));
  }

  #transport() {
    this.attach();
    return this.connection.acquire(this.createTransport);
  }

  #send(topic, key, value) {
    const transport = this.#transport();
    if (transport !== null) {
      transport.send(topic, key, value);
      return true;
    }
    this.stats.lostAfterShutdown += 1;
    if (this.stats.lostAfterShutdown === 1) this.logger.warn("loopguard: an event after gateway_stop is not sent (counted in lostAfterShutdown)");
    return false;
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
    if (this.#send(lifecycle ? compactions : toolCalls, event.run_id, value)) this.stats.published += 1;
    if (event.type === "tool_call") remember(this.publishedCalls, callKey(event.run_id, event.tool_call_id), true);
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
    if (isGate && run.aborted !== null) return this.#blockAborted(run, runId, toolCallId);
    if (!isGate) {
      this.#publish(run, (privacy) => run.events.toolCall(event.toolName, event.params, toolCallId, false, { privacy }));
      return undefined;
    }
    const deadline = this.now() + this.config.verdictTimeoutMs;
    const transport = this.#transport();
    // Connection first: a broker that is down (or went down) can give no verdict, so the call
    // fails open at once instead of waiting for a control reader that never becomes ready.
    if (transport !== null && transport.isConnected && !transport.isControlReady) {
      await this.#untilDownOr(transport, transport.controlReady, deadline, ctx.abortSignal);
    }
    const built = this.#publish(run, (privacy) => run.events.toolCall(event.toolName, event.params, toolCallId, true, { privacy }));
    if (transport === null || !transport.isConnected || !transport.isControlReady) {
      this.stats.failOpenDisconnected += 1; // buffered for later; nobody can answer now
      return undefined;
    }
    const key = callKey(runId, built.tool_call_id);
    const answered = new Promise((resolve) => this.waiters.set(key, resolve));
    const verdict = await this.#untilDownOr(transport, answered, deadline, ctx.abortSignal);
    this.waiters.delete(key);
    // Abort wins: once the run is aborted no verdict of it, however late, lets a call run.
    if (run.aborted !== null) {
      if (verdict?.decision === "abort") this.stats.abortedWhileWaiting += 1;
      return this.#blockAborted(run, runId, built.tool_call_id);
    }
    if (verdict === null) {
      this.stats.failOpenDisconnected += 1;
      this.logger.warn(`loopguard: Kafka went down while run ${runId} call ${built.tool_call_id} waited for its verdict: failing open (allow)`);
      return undefined;
    }
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
      return { block: true, blockReason: verdict.message ?? loopEvent?.message ?? FALLBACK_BLOCK_REASON };
    }
    if (decision === "warn") return this.#warn(verdict, loopEvent, ctx, built.tool_call_id);
    return undefined;
  }

  #blockAborted(run, runId, toolCallId) {
    this.stats.abortedRunBlocks += 1;
    if (toolCallId) this.vetoed.add(callKey(runId, toolCallId));
    return { block: true, blockReason: run.aborted.reason };
  }

  /**
   * A warn verdict: the note for the model (`onWarn: "note"`), a human's approval where the run
   * has one to ask (`requireApproval`; else the note), or nothing (`allow`). Only a published
   * warning (OpenClaw's rate limit: the verdict carries its `note`) acts.
   */
  #warn(verdict, loopEvent, ctx, toolCallId) {
    const note = verdict.note ?? (loopEvent?.published === true || (loopEvent === undefined && Number.isInteger(verdict.count))
      ? warningNote(verdict.count ?? loopEvent.count) : null);
    if (note === null || this.config.onWarn === "allow") return undefined;
    // OpenClaw sets `requester` only for message runs; CLI, cron and heartbeat runs have no
    // surface to ask on, and OpenClaw fails the call when asked to (plugin-approval-unavailable).
    if (this.config.onWarn === "requireApproval" && ctx.requester?.channel) {
      this.stats.approvalsRequested += 1;
      const detector = verdict.detector ?? loopEvent?.detector ?? "tool";
      return {
        requireApproval: {
          title: `LoopGuard: possible ${detector} loop`,
          description: verdict.message ?? loopEvent?.message ?? note,
          severity: "warning",
          timeoutMs: this.config.approvalTimeoutMs,
        },
      };
    }
    if (this.config.onWarn === "requireApproval") this.stats.approvalsDegradedToNote += 1;
    remember(this.notes, noteKey(ctx.sessionKey, toolCallId), note);
    return undefined;
  }

  /** tool_result_persist (synchronous): the pending warning note appended to the tool result. */
  toolResultPersist(event, ctx = {}) {
    const toolCallId = event?.toolCallId ?? ctx.toolCallId;
    const key = noteKey(ctx.sessionKey, toolCallId);
    const note = this.notes.get(key);
    const message = event?.message;
    if (note === undefined || message === null || typeof message !== "object") return undefined;
    this.notes.delete(key);
    this.stats.notesAdded += 1;
    this.logger.info?.(`loopguard: tool-loop warning note added to the result of call ${toolCallId}`);
    const content = Array.isArray(message.content) ? message.content : [];
    return { message: { ...message, content: [...content, { type: "text", text: note }] } };
  }

  /** As #until, but null as soon as Kafka becomes unreachable (its listener removed after). */
  async #untilDownOr(transport, promise, deadline, abortSignal) {
    let cancel = () => {};
    const down = new Promise((resolve) => { cancel = transport.onDown(() => resolve(null)); });
    try {
      return await this.#until(Promise.race([promise, down]), deadline, abortSignal);
    } finally {
      cancel();
    }
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

  /**
   * after_tool_call: publish the outcome of a call that ran (the error OpenClaw reports, else
   * the result). A synthetic result of a call that never ran is no outcome and is skipped, but
   * for OpenClaw's own tool-loop veto, which the 2026.9 semantics record: its call never reached
   * before_tool_call, so the call and the veto are published as a pair.
   */
  afterToolCall(event, ctx = {}) {
    const runId = event.runId ?? ctx.runId;
    if (!runId) {
      this.stats.unkeyed += 1;
      return;
    }
    const toolCallId = event.toolCallId ?? ctx.toolCallId ?? null;
    const key = callKey(runId, toolCallId);
    const denied = deniedReasonOf(event.result);
    const ownVeto = this.vetoed.delete(key);
    if (ownVeto && denied === "plugin-before-tool-call") {
      this.stats.vetoResultsSkipped += 1; // our own block is no outcome (docs/semantics.md §3 rule 4)
      return;
    }
    const run = this.#run(runId, ctx);
    if (denied === "tool-loop" && !this.config.privacy) {
      if (!this.publishedCalls.has(key)) {
        this.#publish(run, (privacy) => run.events.toolCall(event.toolName, event.params, toolCallId, false, { privacy }));
      }
      this.stats.gatewayVetoesPublished += 1;
      const veto = { details: { status: "blocked", deniedReason: "tool-loop" } }; // all the worker reads
      this.#publish(run, (privacy) => run.events.toolResult(toolCallId, event.toolName, event.params, { result: veto }, { privacy }));
      return;
    }
    if (denied !== null) {
      this.stats.notExecutedSkipped[denied] = (this.stats.notExecutedSkipped[denied] ?? 0) + 1;
      return;
    }
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
      // A call of this run still waiting for its verdict is blocked now, not when it arrives.
      const prefix = callKey(message.run_id, "");
      for (const [key, resolve] of this.waiters) if (key.startsWith(prefix)) resolve({ decision: "abort" });
    }
  }

  /**
   * Flush what is buffered (bounded by flushTimeoutMs) and close the process's Kafka connection,
   * whichever instance opened it; `shutdown` (gateway_stop): nothing reopens it afterwards.
   */
  async stop({ shutdown = true } = {}) {
    const lost = await this.connection.close(this.config.flushTimeoutMs, { shutdown });
    this.stats.lostAtShutdown += lost;
    if (lost > 0) this.logger.warn(`loopguard: ${lost} buffered event(s) lost at shutdown (Kafka did not take them within ${this.config.flushTimeoutMs} ms)`);
  }

  /** Stop receiving control messages (the instance is being replaced). */
  dispose() {
    this.unlisten?.();
    this.unlisten = null;
  }
}
