// One run's wire events, built without I/O: the same events, field for field and in the same
// order, as the Python runtime client's streams/client/run_events.py (tests/data/wire_vectors.json).
// `seq` increases across all event types of the run; `event_id` is `<run_id>:<seq>`.
import {
  DEFAULT_CHANNEL_TOOLS,
  argsHash,
  normalizeTool,
  outcomeUnknownToolName,
  resultHash,
} from "./hashing.js";

/** The current time as an RFC 3339 UTC string with milliseconds (the events' `ts`). */
export const utcNow = () => new Date().toISOString();

export class RunEvents {
  /** Builds one run's events; `clock` null leaves `ts` out (as the Python client's clock=None). */
  constructor(runId, { agentId = null, sessionKey = null, privacy = false, startSeq = 0,
    clock = null, channelTools = DEFAULT_CHANNEL_TOOLS } = {}) {
    if (typeof runId !== "string" || runId === "") throw new TypeError("runId must be a non-empty string");
    this.runId = runId;
    this.agentId = agentId;
    this.sessionKey = sessionKey;
    this.privacy = privacy;
    this.seq = startSeq;
    this.clock = clock;
    this.channelTools = channelTools; // privacy mode: must match the worker's LOOPGUARD_CHANNEL_TOOLS
  }

  #base(type) {
    this.seq += 1;
    const ev = { type, event_id: `${this.runId}:${this.seq}`, run_id: this.runId, seq: this.seq };
    if (this.agentId != null) ev.agent_id = this.agentId;
    if (this.sessionKey != null) ev.session_key = this.sessionKey;
    if (this.clock != null) ev.ts = this.clock();
    return ev;
  }

  #callFields(tool, args, privacy) {
    if (!privacy) return { tool, args };
    const name = normalizeTool(tool);
    const action = args !== null && typeof args === "object" && !Array.isArray(args) ? args.action : undefined;
    // Only the engine's known-poll rule reads the action; other actions stay on the host.
    const isPoll = name === "process" && (action === "poll" || action === "log");
    return { tool, args_hash: argsHash(name, args), poll_action: isPoll ? action : null };
  }

  /** A tool_call event; the call id defaults to `call-<seq>`. */
  toolCall(tool, args, toolCallId = null, wantVerdict = false, { privacy = this.privacy } = {}) {
    const ev = this.#base("tool_call");
    ev.tool_call_id = toolCallId || `call-${ev.seq}`;
    Object.assign(ev, this.#callFields(tool, args, privacy));
    if (wantVerdict) ev.want_verdict = true;
    return ev;
  }

  /** A tool_result event: `outcome` is `{result}` or `{error}` (any value; null is an error). */
  toolResult(toolCallId, tool, args, outcome = {}, { privacy = this.privacy } = {}) {
    const ev = this.#base("tool_result");
    ev.tool_call_id = toolCallId ?? null;
    Object.assign(ev, this.#callFields(tool, args, privacy));
    let normalized = outcome;
    if (Object.hasOwn(outcome, "error") && outcome.error instanceof Error) {
      normalized = { error: outcome.error.message || outcome.error.name };
    }
    if (!privacy) {
      if (Object.hasOwn(normalized, "error")) ev.error = normalized.error;
      else if (normalized.result !== undefined) ev.result = normalized.result;
      return ev;
    }
    ev.result_hash = resultHash(tool, args, normalized, this.channelTools);
    ev.unknown_tool_name = outcomeUnknownToolName(normalized);
    return ev;
  }

  /** A compaction event (a compaction retry succeeded). */
  compaction() {
    return this.#base("compaction");
  }

  /** A run_end event. */
  end() {
    return this.#base("run_end");
  }
}
