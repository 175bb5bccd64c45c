// Differential driver: runs LoopGuard's generated streams through the published OpenClaw
// tool-loop detector (npm openclaw, pinned in package-lock.json) the way OpenClaw's runner
// calls it for a batch of one call (docs/semantics.md, "openclaw-2026.9"), and models the
// runner around it: the recovery allowance of runLoop and the warning note.
//
// stdin:  {"mode": "verdicts", "streams": [{"run_id": "...", "events": [wire events]}]}
//      or {"mode": "facts", "outcomes": [{"tool", "args", "result" | "error"}]}
//      or {"mode": "config", "configs": [{"cfg": openclaw.json, "agents": [agent ids]}]}
//      or {"mode": "runner", "streams": [...]} (Node >= 22: the real agent-core runLoop)
// stdout: {"streams": [[one entry per event]]}, {"facts": [outcome facts]},
//         {"runs": [{"ended_at", "closing", "notes": {event index: text}, "calls"}]} or
//         {"configs": [{"default_agent", "global", "agents": {id: {"enabled", "guard"}}}]}
//
// OpenClaw's own loggers are silenced (OPENCLAW_LOG_LEVEL=silent, console muted), and its
// state directory points at a throwaway folder, so stdout carries only the answer.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { bundle, detector, dist, silence, toolName, vetoResult } from "./openclaw.mjs";

const writeOut = silence("loopguard-differential-", process.env.LOOPGUARD_DIFFERENTIAL_HOME);
const { detectToolCallLoop, recordToolCall, recordToolCallOutcome } = await detector();
// The runner (dist/agent-core-*.mjs): its terminal message, and the note it appends to the
// result of a published warning through the internal-hooks bundle it imports.
const coreFile = readdirSync(dist).find((name) => /^agent-core-[\w-]+\.mjs$/.test(name));
if (!coreFile) throw new Error(`no dist/agent-core-*.mjs in ${dist}`);
const core = readFileSync(join(dist, coreFile), "utf8");
const terminated = core.match(/const TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE = ("(?:[^"\\]|\\.)*");/);
if (!terminated) throw new Error(`no TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE in ${coreFile}`);
const TERMINATED_MESSAGE = JSON.parse(terminated[1]);
const hooksImport = core.match(/import \{([^}]*)\} from "\.\/(internal-hooks-[\w-]+\.mjs)"/);
const noteAlias = hooksImport?.[1].split(",").map((part) => part.trim().split(/\s+as\s+/))
  .find(([, name]) => name === "appendToolLoopWarning")?.[0];
if (!noteAlias) throw new Error(`${coreFile} does not import appendToolLoopWarning`);
const appendToolLoopWarning = (await import(pathToFileURL(join(dist, hooksImport[2])).href))[noteAlias];
// The text appendToolLoopWarning adds to a tool result for a warning of `count` calls.
const warningNote = (count) => appendToolLoopWarning({ content: [] }, { count }).content.at(-1).text;

// The runner's warning publication (shouldEmitLoopWarning): buckets of 10, at most 256 keys.
function shouldEmit(buckets, key, count) {
  const bucket = Math.floor(count / 10);
  if (bucket <= (buckets.get(key) ?? 0)) return false;
  buckets.set(key, bucket);
  while (buckets.size > 256) buckets.delete(buckets.keys().next().value);
  return true;
}

function isVeto(result) {
  const details = result && typeof result === "object" ? result.details : undefined;
  return Boolean(details && details.status === "blocked" && details.deniedReason === "tool-loop");
}

// The detector side of one run, event by event: each call's verdict (null when none), the
// runner's warning publication and note, the veto record of a block, and outcomes recorded as
// the runner records them.
function detectorOf(runId) {
  const state = { toolCallHistory: [] };
  const buckets = new Map();
  const vetoed = new Set(); // tool_call_ids of calls already vetoed (blocked here or reported)
  const config = { enabled: true };
  return (ev) => {
    if (ev.type === "tool_call") {
      const tool = toolName(ev.tool);
      const found = detectToolCallLoop(state, tool, ev.args, config, { runId });
      if (!found.stuck) {
        recordToolCall(state, tool, ev.args, ev.tool_call_id, config, { runId });
        return null;
      }
      const verdict = {
        level: found.level,
        detector: found.detector,
        count: found.count,
        message: found.message,
        warning_key: found.warningKey,
        paired_tool: found.pairedToolName ?? null,
        liveness_signal: found.livenessSignal ?? null,
      };
      if (found.level === "critical") {
        verdict.published = true;
        verdict.note = null;
        // blockToolCall: the blocked result goes through recordLoopOutcome (a veto record).
        const blocked = vetoResult(found.message);
        recordToolCallOutcome(state, {
          toolName: tool, toolParams: ev.args, toolCallId: ev.tool_call_id, result: blocked, runId,
        });
        if (ev.tool_call_id) vetoed.add(ev.tool_call_id);
      } else {
        verdict.published = shouldEmit(buckets, `${runId}:${found.warningKey}`, found.count);
        // finalizeToolCallOutcome appends the note to a published warning's result only.
        verdict.note = verdict.published ? warningNote(found.count) : null;
        recordToolCall(state, tool, ev.args, ev.tool_call_id, config, { runId });
      }
      return verdict;
    }
    if (ev.type === "tool_result") {
      // A runtime echoing the veto it answered the model with: the runner never sees it twice.
      if (ev.tool_call_id && vetoed.has(ev.tool_call_id) && !("error" in ev) && isVeto(ev.result)) {
        return null;
      }
      const outcome = { toolName: toolName(ev.tool), toolParams: ev.args, toolCallId: ev.tool_call_id, runId };
      if ("error" in ev) outcome.error = ev.error;
      else outcome.result = ev.result;
      recordToolCallOutcome(state, outcome);
      if (ev.tool_call_id && !("error" in ev) && isVeto(ev.result)) vetoed.add(ev.tool_call_id);
    }
    return null;
  };
}

// Each event's verdict, with runLoop's recovery allowance modelled: a critical intervention
// sets toolLoopRecoveryState.criticalToolLoopSeen; executeToolCalls passes it as `terminal`
// to the next intervention, which ends the run (terminateRun). Only Agent.prompt/reset clear
// it: never within one run, so a stream that goes on past the end meets `terminal` at every
// later critical ("runner" mode checks this model against the real runAgentLoop).
function runStream(stream) {
  const step = detectorOf(stream.run_id);
  let criticalToolLoopSeen = false;
  return stream.events.map((ev) => {
    const verdict = step(ev);
    if (verdict === null) return null;
    verdict.terminate_run = null;
    if (verdict.level === "critical") {
      if (criticalToolLoopSeen) verdict.terminate_run = TERMINATED_MESSAGE;
      criticalToolLoopSeen = true;
    }
    return verdict;
  });
}

// One run through OpenClaw's real runner (agent-core's runAgentLoop, Node >= 22): each
// tool_call is an assistant turn of one call, admitted by a beforeToolBatch that answers as
// admitToolCallBatch does (a critical intervention, or the published warnings) from the
// detector fed with the stream's events up to that call. Returns the index of the call whose
// batch ended the run (null: the run went to its end), the run's closing text, and the text
// appended to each call's tool result (the note).
async function runRunner(stream) {
  const runAgentLoop = await loadRunner();
  const step = detectorOf(stream.run_id);
  const events = stream.events;
  const callAt = events.flatMap((ev, i) => (ev.type === "tool_call" ? [i] : []));
  const names = [...new Set(callAt.map((i) => String(events[i].tool)))];
  const tools = names.map((name) => ({
    name, label: name, description: name, parameters: { type: "object" },
    execute: async () => ({ content: [{ type: "text", text: "ok" }], details: {} }),
  }));
  const usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
  const model = { id: "scripted", provider: "scripted", api: "scripted", name: "scripted",
    contextWindow: 1 << 20, maxTokens: 1 << 10, input: ["text"], reasoning: false,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 } };
  let turn = 0;
  let applied = 0; // events fed to the detector so far
  const streamFn = () => {
    const k = turn++;
    const assistant = { role: "assistant", usage, model: "scripted", api: "scripted", provider: "scripted",
      timestamp: 0 };
    const message = k < callAt.length
      ? { ...assistant, stopReason: "toolUse", content: [{ type: "toolCall", id: `k${k}`,
        name: String(events[callAt[k]].tool), arguments: events[callAt[k]].args }] }
      : { ...assistant, stopReason: "stop", content: [{ type: "text", text: "done" }] };
    return {
      async *[Symbol.asyncIterator]() { yield { type: "done", reason: message.stopReason, message }; },
      result: async () => message,
    };
  };
  const beforeToolBatch = async ({ calls }) => {
    const id = calls[0].toolCall.id;
    const at = callAt[Number(id.slice(1))];
    while (applied < at) step(events[applied++]);
    const verdict = step(events[applied++]);
    if (verdict?.level === "critical") {
      const tool = toolName(events[at].tool);
      return { intervention: { kind: "critical-tool-loop", toolCallId: id, toolName: tool,
        actionKey: "", detector: verdict.detector, count: verdict.count, reason: verdict.message } };
    }
    return { warnings: verdict?.note ? [{ kind: "tool-loop-warning", toolCallId: id, count: verdict.count }] : [] };
  };
  const config = { model, convertToLlm: (messages) => messages, beforeToolBatch };
  const prompt = { role: "user", content: "go", timestamp: 0 };
  const context = { systemPrompt: "", messages: [], tools };
  const messages = await runAgentLoop([prompt], context, config, async () => {}, undefined, streamFn);
  const notes = {};
  let lastCall = null;
  for (const m of messages) {
    if (m.role !== "toolResult") continue;
    lastCall = callAt[Number(m.toolCallId.slice(1))];
    const texts = m.content.filter((c) => c.type === "text").map((c) => c.text);
    if (!m.details?.intervention && texts.length > 1) notes[lastCall] = texts.at(-1);
  }
  const last = messages.at(-1);
  const closing = last?.role === "assistant" ? last.content.map((c) => c.text ?? "").join("") : null;
  // terminateRun: the runner's closing message follows the batch that ended the run.
  const endedAt = closing === "done" ? null : lastCall;
  return { ended_at: endedAt, closing, notes, calls: turn };
}

let runner;
async function loadRunner() {
  if (runner) return runner;
  const [major] = process.versions.node.split(".").map(Number);
  if (major < 22) throw new Error(`the runner mode needs Node >= 22 (OpenClaw's agent-core), got ${process.version}`);
  const exported = core.match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  const alias = exported?.[1].split(",").map((part) => part.trim().split(/\s+as\s+/))
    .find(([name]) => name === "runAgentLoop")?.[1];
  if (!alias) throw new Error(`${coreFile} does not export runAgentLoop`);
  runner = (await import(pathToFileURL(join(dist, coreFile)).href))[alias];
  return runner;
}

function facts(item) {
  const state = { toolCallHistory: [] };
  const params = { toolName: toolName(item.tool), toolParams: item.args, toolCallId: "c" };
  if ("error" in item) params.error = item.error;
  else params.result = item.result;
  const record = recordToolCallOutcome(state, params);
  return {
    result_hash: record?.resultHash ?? null,
    outcome_kind: record?.outcomeKind ?? null,
    failure_identity: record?.failureIdentityHash ?? null,
    no_progress: record?.noProgress === true,
    unknown_tool_name: record?.unknownToolName ?? null,
  };
}

async function configs(items) {
  const resolveLoopConfig = (await bundle("tool-loop-detection-config-"))("resolveToolLoopDetectionConfig");
  const defaultAgentId = (await bundle("agent-scope-config-"))("tryResolveDefaultAgentId");
  const effective = (block) => ({ enabled: block?.enabled === true, guard: block?.enabled !== false });
  return items.map(({ cfg, agents }) => ({
    default_agent: defaultAgentId(cfg) ?? null,
    global: effective(resolveLoopConfig({ cfg })),
    agents: Object.fromEntries(agents.map((id) => [id, effective(resolveLoopConfig({ cfg, agentId: id }))])),
  }));
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
let answer;
if (request.mode === "facts") answer = { facts: request.outcomes.map(facts) };
else if (request.mode === "config") answer = { configs: await configs(request.configs) };
else if (request.mode === "runner") {
  const runs = [];
  for (const stream of request.streams) runs.push(await runRunner(stream));
  answer = { runs };
}
else answer = { streams: request.streams.map(runStream) };
writeOut(`${JSON.stringify(answer)}\n`);
