// The plugin through a recording fake of OpenClaw's api: what each hook publishes, how gate
// mode enforces verdicts and aborts, fail-open on a timeout or a lost broker, shutdown.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, safeParseConfig } from "../src/config.js";
import plugin, { registerLoopGuard } from "../src/index.js";
import { FakeApi, RecordingTransport } from "./fakes.js";

const RUN = "run-1";
const CTX = { runId: RUN, agentId: "main", sessionKey: "agent:main:s1", toolName: "read" };
const READ = { toolName: "read", params: { path: "/a" }, runId: RUN, toolCallId: "c1" };

function setup(config = {}, answer = () => []) {
  const api = new FakeApi(config);
  let transport = null;
  const guard = registerLoopGuard(api, {
    runs: new Map(),
    clock: null,
    createTransport: (onControl) => (transport = new RecordingTransport(onControl, { answer })),
  });
  return { api, guard, transport: () => transport };
}

const verdict = (ev, decision) => ({ type: "verdict", run_id: ev.run_id, tool_call_id: ev.tool_call_id, decision, trigger_event_id: ev.event_id, seq: ev.seq });
const loopEvent = (ev, action, message, published = true) => ({
  type: "loop_event", run_id: ev.run_id, trigger_event_id: ev.event_id, seq: ev.seq, tool: ev.tool,
  level: action === "warn" ? "warning" : "critical", action, detector: "generic_repeat", count: 20, message, published,
});

test("the plugin registers its hooks and nothing else", () => {
  const { api } = setup();
  assert.deepEqual([...api.handlers.keys()].sort(), ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_stop", "session_end"]);
  assert.equal(plugin.id, "loopguard");
  assert.equal(typeof plugin.register, "function");
});

test("no Kafka connection is made before the first event (inspect and reloads stay offline)", async () => {
  const { api, transport } = setup();
  assert.equal(transport(), null);
  await api.emit("before_tool_call", READ, CTX);
  assert.equal(transport().started, true);
});

test("a block verdict blocks the call with LoopGuard's message", async () => {
  const message = "CRITICAL: Called read with identical arguments and identical outcomes 20 times. Session execution blocked to prevent runaway loops.";
  const { api, guard } = setup({ mode: "gate" }, (ev) => (ev.want_verdict ? [loopEvent(ev, "block", message), verdict(ev, "block")] : []));
  assert.deepEqual(await api.emit("before_tool_call", READ, CTX), { block: true, blockReason: message });
  assert.deepEqual(guard.stats.verdicts, { allow: 0, warn: 0, block: 1 });
});

test("an allow verdict lets the call run and the published call asked for it", async () => {
  const { api, transport } = setup({}, (ev) => (ev.want_verdict ? [verdict(ev, "allow")] : []));
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  const [call] = transport().events();
  assert.equal(call.want_verdict, true);
  assert.equal(call.tool_call_id, "c1");
  assert.equal(call.agent_id, "main");
  assert.equal(typeof call.ts, "undefined");
});

test("a published warning can ask a human (requireApproval); an unpublished one cannot", async () => {
  const msg = "WARNING: You have called read 10 times with identical arguments.";
  let published = true;
  const { api, guard } = setup({ onWarn: "requireApproval", approvalTimeoutMs: 60000 },
    (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", msg, published), verdict(ev, "warn")] : []));
  assert.deepEqual(await api.emit("before_tool_call", READ, CTX), {
    requireApproval: { title: "LoopGuard: possible generic_repeat loop", description: msg, severity: "warning", timeoutMs: 60000 },
  });
  published = false;
  assert.equal(await api.emit("before_tool_call", { ...READ, toolCallId: "c2" }, CTX), undefined);
  assert.equal(guard.stats.approvalsRequested, 1);
});

test("warnings are allowed by default", async () => {
  const { api } = setup({}, (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", "WARNING"), verdict(ev, "warn")] : []));
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
});

test("no verdict within verdictTimeoutMs fails open, counted and logged", async () => {
  const { api, guard } = setup({ verdictTimeoutMs: 50 });
  const started = performance.now();
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  const waited = performance.now() - started;
  assert.ok(waited >= 45 && waited < 1000, `waited ${waited} ms`);
  assert.equal(guard.stats.verdictTimeouts, 1);
  assert.match(api.logs.find((l) => l.level === "warn").message, /no verdict for run run-1 call c1 in 50 ms: failing open/);
});

test("a cancelled tool call stops waiting at once", async () => {
  const { api } = setup({ verdictTimeoutMs: 5000 });
  const abort = new AbortController();
  const pending = api.emit("before_tool_call", READ, { ...CTX, abortSignal: abort.signal });
  abort.abort();
  assert.equal(await pending, undefined);
});

test("a lost broker fails open without waiting, and the call stays buffered", async () => {
  const { api, guard, transport } = setup({ verdictTimeoutMs: 5000 });
  await api.emit("agent_end", { runId: "warm-up" }, {});
  transport().isConnected = false;
  const started = performance.now();
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  assert.ok(performance.now() - started < 1000);
  assert.equal(guard.stats.failOpenDisconnected, 1);
  assert.equal(transport().events().at(-1).type, "tool_call");
});

test("after abort_run every further tool call of that run is blocked, other runs are not", async () => {
  const reason = "CRITICAL: tool read repeated 3 times with identical arguments and identical results within 3 attempts after auto-compaction.";
  const { api, transport, guard } = setup({ verdictTimeoutMs: 200 }, (ev) => (ev.want_verdict ? [verdict(ev, "allow")] : []));
  await api.emit("before_tool_call", READ, CTX);
  transport().onControl({ type: "command", command: "abort_run", run_id: RUN, seq: 9, detector: "compaction_loop_persisted", reason });
  const sent = transport().sent.length;
  assert.deepEqual(await api.emit("before_tool_call", { ...READ, toolCallId: "c9" }, CTX), { block: true, blockReason: reason });
  assert.equal(transport().sent.length, sent, "a call that will not run is not published");
  assert.equal(await api.emit("before_tool_call", { ...READ, runId: "run-2" }, { ...CTX, runId: "run-2" }), undefined);
  assert.equal(guard.stats.abortedRunBlocks, 1);
});

test("control messages of other gateways' runs are ignored", async () => {
  const { api, transport, guard } = setup({ verdictTimeoutMs: 200 }, (ev) => (ev.want_verdict ? [verdict(ev, "allow")] : []));
  await api.emit("before_tool_call", READ, CTX);
  transport().onControl({ type: "command", command: "abort_run", run_id: "someone-else", reason: "x" });
  assert.equal(guard.stats.abortsReceived, 0);
});

test("OpenClaw's synthetic result of a call we blocked is not published; a real outcome is", async () => {
  const { api, transport, guard } = setup({}, (ev) => (ev.want_verdict ? [verdict(ev, "block")] : []));
  await api.emit("before_tool_call", READ, CTX);
  const veto = { content: [{ type: "text", text: "x" }], details: { status: "blocked", deniedReason: "plugin-before-tool-call", reason: "x" } };
  await api.emit("after_tool_call", { ...READ, result: veto, error: "x" }, CTX);
  assert.equal(guard.stats.vetoResultsSkipped, 1);
  assert.deepEqual(transport().events().map((e) => e.type), ["tool_call"]);
  await api.emit("before_tool_call", { ...READ, toolCallId: "c2" }, CTX);
  await api.emit("after_tool_call", { ...READ, toolCallId: "c2", error: "File not found: /a" }, CTX);
  assert.deepEqual(transport().events().at(-1).error, "File not found: /a");
});

test("observe mode never waits and never asks for a verdict", async () => {
  const { api, transport } = setup({ mode: "observe", verdictTimeoutMs: 5000 });
  const started = performance.now();
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  assert.ok(performance.now() - started < 100);
  assert.equal("want_verdict" in transport().events()[0], false);
});

test("privacy mode publishes hashes only, never the raw args, result or error", async () => {
  const secret = "sk-live-SECRET-42";
  const { api, transport } = setup({ mode: "observe", privacy: true });
  const call = { toolName: "read", params: { path: `/vault/${secret}` }, runId: RUN, toolCallId: "c1" };
  await api.emit("before_tool_call", call, CTX);
  await api.emit("after_tool_call", { ...call, result: { content: [{ type: "text", text: secret }] } }, CTX);
  await api.emit("after_tool_call", { ...call, error: `denied ${secret}` }, CTX);
  const values = transport().sent.map((m) => m.value);
  assert.equal(values.some((v) => v.includes(secret)), false);
  const [c, r, e] = transport().events();
  assert.match(c.args_hash, /^read:[0-9a-f]{64}$/);
  assert.match(r.result_hash, /^[0-9a-f]{64}$/);
  assert.match(e.result_hash, /^error:[0-9a-f]{64}$/);
});

test("an oversized raw event is published in its hashed form with the same seq", async () => {
  const { api, transport, guard } = setup({ mode: "observe", maxEventBytes: 1024 });
  await api.emit("before_tool_call", READ, CTX);
  await api.emit("after_tool_call", { ...READ, result: { content: [{ type: "text", text: "x".repeat(5000) }] } }, CTX);
  const [, result] = transport().events();
  assert.equal(result.seq, 2);
  assert.equal(result.event_id, "run-1:2");
  assert.equal("result" in result, false);
  assert.match(result.result_hash, /^[0-9a-f]{64}$/);
  assert.equal(guard.stats.hashedOversized, 1);
});

test("compaction, agent_end and session_end become compaction and run_end on the lifecycle topic", async () => {
  const { api, transport } = setup({ mode: "observe" });
  await api.emit("before_tool_call", READ, CTX);
  await api.emit("after_compaction", { messageCount: 10, compactedCount: 6 }, { agentId: "main", sessionKey: CTX.sessionKey });
  await api.emit("agent_end", { runId: RUN, messages: [], success: true }, CTX);
  await api.emit("before_tool_call", { ...READ, runId: "run-2" }, { ...CTX, runId: "run-2" });
  await api.emit("session_end", { sessionId: "s", sessionKey: CTX.sessionKey, messageCount: 3 }, { sessionId: "s" });
  assert.deepEqual(transport().sent.map((m) => [m.topic, m.key, JSON.parse(m.value).type, JSON.parse(m.value).seq]), [
    ["loopguard.tool-calls", "run-1", "tool_call", 1],
    ["loopguard.compactions", "run-1", "compaction", 2],
    ["loopguard.compactions", "run-1", "run_end", 3],
    ["loopguard.tool-calls", "run-2", "tool_call", 1],
    ["loopguard.compactions", "run-2", "run_end", 2],
  ]);
});

test("a run keeps its seq across a plugin reload in the same process", async () => {
  const runs = new Map();
  const sent = [];
  const register = () => registerLoopGuard(new FakeApi({ mode: "observe" }), {
    runs, clock: null, createTransport: (onControl) => Object.assign(new RecordingTransport(onControl), { send: (t, k, v) => sent.push(JSON.parse(v)) }),
  });
  const first = register();
  await first.beforeToolCall(READ, CTX);
  const second = register();
  await second.beforeToolCall(READ, CTX);
  assert.deepEqual(sent.map((e) => e.seq), [1, 2]);
});

test("gateway_stop flushes the transport within flushTimeoutMs", async () => {
  const { api, transport } = setup({ mode: "observe", flushTimeoutMs: 1234 });
  await api.emit("before_tool_call", READ, CTX);
  await api.emit("gateway_stop", { reason: "shutdown" }, {});
  assert.equal(transport().closedWith, 1234);
});

test("a handler that throws fails open instead of letting OpenClaw fail closed", async () => {
  const { api } = setup({}, () => { throw new Error("boom"); });
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  assert.match(api.logs.find((l) => l.level === "error").message, /before_tool_call failed, failing open: Error: boom/);
});

test("a call without a run id is counted and not published", async () => {
  const { api, guard } = setup();
  assert.equal(await api.emit("before_tool_call", { toolName: "read", params: {} }, {}), undefined);
  assert.equal(guard.stats.unkeyed, 1);
});

test("the config is validated with every problem listed", () => {
  const parsed = safeParseConfig({ mode: "enforce", verdictTimeoutMs: 20000, brokers: ["nohost"], extra: 1 });
  assert.equal(parsed.success, false);
  assert.deepEqual(parsed.error.issues.map((i) => i.path.join(".")), ["extra", "brokers.0", "mode", "verdictTimeoutMs"]);
  assert.throws(() => registerLoopGuard(new FakeApi({ mode: "enforce" })), ConfigError);
  assert.equal(plugin.configSchema.safeParse({}).success, true);
  assert.equal(plugin.configSchema.jsonSchema.properties.mode.default, "gate");
});
