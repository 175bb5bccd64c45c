// Gated calls through the plugin's hook handlers and its real Kafka transport while the broker
// dies: one call with the broker up (no worker: it waits its verdict timeout), then a second
// call, announced on stdout as `{"phase":"calling"}` so the test can kill the broker while it
// waits for its verdict, then two more. Prints one JSON report at the end.
//
//   node scripts/drive-outage.mjs '{"brokers":["127.0.0.1:9092"],"topics":{...},"verdictTimeoutMs":5000}'
import { registerLoopGuard } from "../src/index.js";

const handlers = new Map();
const logs = [];
const api = {
  pluginConfig: JSON.parse(process.argv[2]),
  logger: Object.fromEntries(["debug", "info", "warn", "error"].map((l) => [l, (m) => logs.push(`${Math.round(performance.now())} ms ${l}: ${m}`)])),
  on: (name, handler) => handlers.set(name, handler),
};
const plugin = registerLoopGuard(api, { runs: new Map(), connection: null });
const ctx = { runId: "outage-run", agentId: "main", sessionKey: "agent:main:outage" };
const calls = [];
async function call(id) {
  const t0 = performance.now();
  const result = await handlers.get("before_tool_call")({ toolName: "read", params: { path: "/a" }, runId: ctx.runId, toolCallId: id }, ctx);
  calls.push({ id, result: result ?? null, ms: performance.now() - t0 });
}
await call("c1");
logs.push(`${Math.round(performance.now())} ms calling c2`);
process.stdout.write(`${JSON.stringify({ phase: "calling", stats: plugin.stats })}\n`);
await call("c2");
await call("c3");
await call("c4");
await handlers.get("gateway_stop")({ reason: "shutdown" }, {});
process.stdout.write(`${JSON.stringify({ phase: "done", calls, stats: plugin.stats, logs })}\n`);
