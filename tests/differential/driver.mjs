// Differential driver: runs LoopGuard's generated streams through the published OpenClaw
// tool-loop detector (npm openclaw, pinned in package-lock.json) the way OpenClaw's runner
// calls it for a batch of one call (docs/semantics.md, "openclaw-2026.9"), with the runner
// around it modelled (runner_model.mjs: the recovery allowance of runLoop and the warning note).
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
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { bundle, dist, silence, toolName } from "./openclaw.mjs";
import { agentCore, runnerModel } from "./runner_model.mjs";

const writeOut = silence("loopguard-differential-", process.env.LOOPGUARD_DIFFERENTIAL_HOME);
const { detectorOf, runOf, recordToolCallOutcome } = await runnerModel();
const core = agentCore();

// Each event's verdict (null when none), with the runner's recovery allowance.
function runStream(stream) {
  const step = runOf(stream.run_id);
  return stream.events.map(step);
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
  const exported = core.text.match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  const alias = exported?.[1].split(",").map((part) => part.trim().split(/\s+as\s+/))
    .find(([name]) => name === "runAgentLoop")?.[1];
  if (!alias) throw new Error(`${core.file} does not export runAgentLoop`);
  runner = (await import(pathToFileURL(join(dist, core.file)).href))[alias];
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
