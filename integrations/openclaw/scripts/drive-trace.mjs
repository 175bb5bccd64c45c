// Drives a LoopGuard trace (tests/data/traces/*.jsonl) through the plugin's OpenClaw hook
// handlers, with the real Kafka transport, and prints one JSON document: what before_tool_call
// returned for every call, and (after the trace) for one more probe call per run.
//
//   node scripts/drive-trace.mjs TRACE.jsonl '{"brokers":["127.0.0.1:9092"],"topics":{...}}' [waitAbortMs]
//
// As the traces were fed to OpenClaw's own detector (tests/data/traces/README), every call's
// real outcome is reported through after_tool_call, blocked or not: those calls really ran.
import { readFileSync } from "node:fs";
import { registerLoopGuard } from "../src/index.js";

const [tracePath, configJson, waitAbortText = "0"] = process.argv.slice(2);
const handlers = new Map();
const logs = [];
const api = {
  pluginConfig: JSON.parse(configJson),
  logger: Object.fromEntries(["debug", "info", "warn", "error"].map((l) => [l, (m) => logs.push(`${l}: ${m}`)])),
  on: (name, handler) => handlers.set(name, handler),
};
const plugin = registerLoopGuard(api, { runs: new Map() });
const emit = (name, event, ctx) => handlers.get(name)(event, ctx);

const events = readFileSync(tracePath, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const calls = [];
const runs = new Map();
const started = performance.now();
for (const ev of events) {
  const ctx = { runId: ev.run_id, agentId: ev.agent_id, sessionKey: ev.session_key };
  runs.set(ev.run_id, ctx);
  const hookEvent = { toolName: ev.tool, params: ev.args, runId: ev.run_id, toolCallId: ev.tool_call_id };
  if (ev.type === "tool_call") {
    const t0 = performance.now();
    const result = await emit("before_tool_call", hookEvent, { ...ctx, toolName: ev.tool, toolCallId: ev.tool_call_id });
    calls.push({ event_id: ev.event_id, run_id: ev.run_id, tool_call_id: ev.tool_call_id, result: result ?? null, ms: performance.now() - t0 });
  } else if (ev.type === "tool_result") {
    const outcome = "error" in ev ? { error: ev.error } : { result: ev.result };
    await emit("after_tool_call", { ...hookEvent, ...outcome, durationMs: 1 }, { ...ctx, toolName: ev.tool });
  } else if (ev.type === "compaction") {
    await emit("after_compaction", { messageCount: 0, compactedCount: 0 }, ctx);
  }
}
const traceMs = performance.now() - started;
// An abort_run arrives after the result that completed the window: wait for it, bounded.
const waitAbort = Number(waitAbortText);
const deadline = performance.now() + waitAbort;
while (waitAbort > 0 && plugin.stats.abortsReceived === 0 && performance.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const probes = [];
for (const [runId, ctx] of runs) {
  const result = await emit("before_tool_call", { toolName: "read", params: { path: "/probe" }, runId, toolCallId: `probe-${runId}` }, { ...ctx, toolName: "read" });
  probes.push({ run_id: runId, result: result ?? null });
}
await emit("gateway_stop", { reason: "shutdown" }, {});
process.stdout.write(`${JSON.stringify({ calls, probes, stats: plugin.stats, trace_ms: traceMs, logs })}\n`);
