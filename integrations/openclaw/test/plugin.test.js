// The plugin through a recording fake of OpenClaw's api: what each hook publishes, how gate
// mode enforces verdicts and aborts, fail-open on a timeout or a lost broker, shutdown.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, resolveConfig, safeParseConfig } from "../src/config.js";
import { SharedConnection } from "../src/connection.js";
import plugin, { registerLoopGuard } from "../src/index.js";
import { FakeApi, RecordingTransport } from "./fakes.js";

const RUN = "run-1";
const CTX = { runId: RUN, agentId: "main", sessionKey: "agent:main:s1", toolName: "read" };
const READ = { toolName: "read", params: { path: "/a" }, runId: RUN, toolCallId: "c1" };

function setup(config = {}, answer = () => [], gatewayConfig = undefined) {
  const api = new FakeApi(config, gatewayConfig);
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
  assert.deepEqual([...api.handlers.keys()].sort(), ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_stop", "session_end", "tool_result_persist"]);
  assert.deepEqual(api.services.map((s) => s.id), ["loopguard-kafka"]);
  assert.equal(plugin.id, "loopguard");
  assert.equal(typeof plugin.register, "function");
});

test("no Kafka connection is made before the first event (inspect and reloads stay offline)", async () => {
  const { api, transport, guard } = setup();
  assert.equal(transport(), null);
  assert.equal(guard.connection.listeners.size, 0, "a discovery registration holds on to nothing");
  await api.emit("before_tool_call", READ, CTX);
  assert.equal(transport().started, true);
  assert.equal(guard.connection.listeners.size, 1);
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
  assert.equal(transport().downListeners.size, 0, "a call that stopped waiting leaves no listener behind");
});

const NOTE_10 = "[System note: Tool-loop warning after 10 repeated calls. Change your approach or stop if you are not making progress.]";
const USER_CTX = { ...CTX, requester: { channel: "telegram", senderId: "42" } }; // a message run
const persist = (api, toolCallId, ctx = CTX) => api.emit("tool_result_persist", {
  toolName: "read", toolCallId, message: { role: "toolResult", toolCallId, content: [{ type: "text", text: "raw" }] },
}, { agentId: ctx.agentId, sessionKey: ctx.sessionKey, toolName: "read", toolCallId });
const texts = (persisted) => persisted?.message.content.map((c) => c.text);

test("a published warning can ask a human (requireApproval); an unpublished one cannot", async () => {
  const msg = "WARNING: You have called read 10 times with identical arguments.";
  let published = true;
  const { api, guard } = setup({ onWarn: "requireApproval", approvalTimeoutMs: 60000 },
    (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", msg, published), verdict(ev, "warn")] : []));
  assert.deepEqual(await api.emit("before_tool_call", READ, USER_CTX), {
    requireApproval: { title: "LoopGuard: possible generic_repeat loop", description: msg, severity: "warning", timeoutMs: 60000 },
  });
  published = false;
  assert.equal(await api.emit("before_tool_call", { ...READ, toolCallId: "c2" }, USER_CTX), undefined);
  assert.equal(guard.stats.approvalsRequested, 1);
});

test("without an approval surface (CLI, cron, heartbeat: no requester) requireApproval degrades to the note", async () => {
  const { api, guard } = setup({ onWarn: "requireApproval" },
    (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", "WARNING"), { ...verdict(ev, "warn"), count: 10, note: NOTE_10 }] : []));
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined, "no approval request OpenClaw would fail");
  assert.deepEqual(texts(persist(api, "c1")), ["raw", NOTE_10]);
  assert.equal(guard.stats.approvalsRequested, 0);
  assert.equal(guard.stats.approvalsDegradedToNote, 1);
});

test("by default a published warning's note is appended to the tool result the model sees, not to the outcome", async () => {
  const { api, guard, transport } = setup({}, (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", "WARNING"), { ...verdict(ev, "warn"), count: 10, note: NOTE_10 }] : []));
  assert.equal(await api.emit("before_tool_call", READ, CTX), undefined);
  await api.emit("after_tool_call", { ...READ, result: { content: [{ type: "text", text: "raw" }] } }, CTX);
  assert.deepEqual(texts(persist(api, "c1")), ["raw", NOTE_10]);
  assert.equal(persist(api, "c1"), undefined, "one note per warning");
  assert.equal(persist(api, "other"), undefined);
  assert.deepEqual(transport().events().at(-1).result, { content: [{ type: "text", text: "raw" }] }, "LoopGuard records the raw outcome");
  assert.equal(guard.stats.notesAdded, 1);
});

test("a warning without a note (configurable profile) gets OpenClaw's note built from its count; onWarn allow adds none", async () => {
  const answer = (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", "WARNING"), { ...verdict(ev, "warn"), count: 10 }] : []);
  const noted = setup({}, answer);
  await noted.api.emit("before_tool_call", READ, CTX);
  assert.deepEqual(texts(persist(noted.api, "c1")), ["raw", NOTE_10]);
  const unpublished = setup({}, (ev) => (ev.want_verdict ? [loopEvent(ev, "warn", "WARNING", false), { ...verdict(ev, "warn"), count: 11 }] : []));
  await unpublished.api.emit("before_tool_call", READ, CTX);
  assert.equal(persist(unpublished.api, "c1"), undefined, "OpenClaw notes only published warnings");
  const allowed = setup({ onWarn: "allow" }, answer);
  await allowed.api.emit("before_tool_call", READ, CTX);
  assert.equal(persist(allowed.api, "c1"), undefined);
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

test("abort wins: a verdict that arrives after abort_run does not let a call of that run through", async () => {
  const reason = "CRITICAL: aborted";
  const abort = (ev) => ({ type: "command", command: "abort_run", run_id: ev.run_id, seq: ev.seq, detector: "compaction_loop_persisted", reason });
  const { api, guard } = setup({ verdictTimeoutMs: 5000 }, (ev) => (ev.want_verdict ? [abort(ev), verdict(ev, "allow")] : []));
  assert.deepEqual(await api.emit("before_tool_call", READ, CTX), { block: true, blockReason: reason });
  assert.equal(guard.stats.abortedWhileWaiting, 1);
});

test("abort wins: a call waiting for its verdict is blocked when abort_run arrives, not failed open at the timeout", async () => {
  const reason = "CRITICAL: aborted";
  const { api, guard, transport } = setup({ verdictTimeoutMs: 10_000 });
  const pending = api.emit("before_tool_call", READ, CTX);
  while (transport() === null || transport().sent.length === 0) await new Promise((r) => setImmediate(r));
  transport().onControl({ type: "command", command: "abort_run", run_id: RUN, seq: 1, detector: "x", reason });
  assert.deepEqual(await pending, { block: true, blockReason: reason });
  assert.equal(guard.stats.verdictTimeouts, 0);
  assert.equal(guard.stats.abortedWhileWaiting, 1);
});

test("a broker that goes down while a call waits for its verdict fails the call open at once", async () => {
  const { api, guard, transport } = setup({ verdictTimeoutMs: 10_000 });
  const pending = api.emit("before_tool_call", READ, CTX);
  while (transport() === null || transport().sent.length === 0) await new Promise((r) => setImmediate(r));
  transport().goDown();
  assert.equal(await pending, undefined);
  assert.equal(guard.stats.verdictTimeouts, 0);
  assert.equal(guard.stats.failOpenDisconnected, 1);
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

// Every synthetic "never ran" result OpenClaw 2026.9.6 writes (grep deniedReason in its dist/):
// plugin vetoes and approvals, tool admission, steering, aborted approvals, disposal.
const NOT_EXECUTED = [
  ["plugin-before-tool-call", "blocked"], ["plugin-approval", "blocked"], ["plugin-approval-unavailable", "blocked"],
  ["tool-admission", "blocked"], ["steering", "skipped"], ["client-voice-confirmation", "blocked"],
  ["internal-dispose", "blocked"], ["run-aborted", "blocked"],
];
for (const [deniedReason, status] of NOT_EXECUTED) {
  test(`a result OpenClaw wrote for a call that never ran (${deniedReason}) is not published as an outcome`, async () => {
    const { api, transport, guard } = setup({}, (ev) => (ev.want_verdict ? [verdict(ev, "allow")] : []));
    await api.emit("before_tool_call", READ, CTX); // allowed by LoopGuard, then stopped by OpenClaw
    const result = { content: [{ type: "text", text: "not run" }], details: { status, deniedReason } };
    await api.emit("after_tool_call", { ...READ, result, error: "not run" }, CTX);
    assert.deepEqual(transport().events().map((e) => e.type), ["tool_call"]);
    assert.deepEqual(guard.stats.notExecutedSkipped, { [deniedReason]: 1 });
  });
}

test("OpenClaw's own tool-loop veto is published as the 2026.9 veto, paired with its call", async () => {
  const { api, transport, guard } = setup();
  // OpenClaw's detector blocks before plugin hooks: no before_tool_call for this call.
  const result = { content: [{ type: "text", text: "CRITICAL: ..." }], details: { status: "blocked", deniedReason: "tool-loop", intervention: { kind: "critical-tool-loop" } } };
  await api.emit("after_tool_call", { ...READ, toolCallId: "c7", result, error: "CRITICAL: ..." }, CTX);
  const [call, veto] = transport().events();
  assert.deepEqual([call.type, call.tool_call_id, "want_verdict" in call], ["tool_call", "c7", false]);
  assert.deepEqual([veto.type, veto.tool_call_id, veto.seq], ["tool_result", "c7", call.seq + 1]);
  assert.deepEqual(veto.result, { details: { status: "blocked", deniedReason: "tool-loop" } });
  assert.equal(guard.stats.gatewayVetoesPublished, 1);
});

test("in privacy mode OpenClaw's tool-loop veto, which a hash cannot carry, is skipped and counted", async () => {
  const { api, transport, guard } = setup({ privacy: true });
  const result = { content: [{ type: "text", text: "CRITICAL" }], details: { status: "blocked", deniedReason: "tool-loop" } };
  await api.emit("after_tool_call", { ...READ, toolCallId: "c7", result, error: "CRITICAL" }, CTX);
  assert.equal(transport(), null, "nothing published");
  assert.deepEqual(guard.stats.notExecutedSkipped, { "tool-loop": 1 });
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

test("one connection per process: whichever instance gets gateway_stop flushes the one the hooks used", async () => {
  const connection = new SharedConnection();
  const runs = new Map();
  let transports = 0;
  let transport = null;
  const register = () => {
    const api = new FakeApi({ mode: "observe", flushTimeoutMs: 777 });
    registerLoopGuard(api, { runs, clock: null, connection, createTransport: (onControl) => {
      transports += 1;
      return (transport = Object.assign(new RecordingTransport(onControl), {
        close: async function close(timeoutMs) { this.closedWith = timeoutMs; this.stats.dropped += 2; },
      }));
    } });
    return api;
  };
  const hooks = register();
  const lifecycle = register(); // the gateway registers the plugin twice
  await hooks.emit("before_tool_call", READ, CTX);
  await lifecycle.emit("session_end", { sessionId: "s", sessionKey: CTX.sessionKey }, {});
  assert.equal(transports, 1);
  assert.deepEqual(transport.events().map((e) => e.type), ["tool_call", "run_end"]);
  await lifecycle.emit("gateway_stop", { reason: "shutdown" }, {});
  assert.equal(transport.closedWith, 777);
  assert.ok(lifecycle.logs.some((l) => l.level === "warn" && /2 buffered event\(s\) lost at shutdown/.test(l.message)));
  await hooks.emit("before_tool_call", { ...READ, toolCallId: "late" }, CTX);
  assert.equal(transports, 1, "nothing reopens after gateway_stop");
  assert.ok(hooks.logs.some((l) => /after gateway_stop is not sent/.test(l.message)));
});

test("the service's stop flushes the shared connection; its start after gateway_stop lets it reopen", async () => {
  const { api, transport } = setup({ flushTimeoutMs: 55 }, (ev) => (ev.want_verdict ? [verdict(ev, "block")] : []));
  await api.emit("before_tool_call", READ, CTX);
  const [service] = api.services;
  const first = transport();
  await service.stop();
  assert.equal(first.closedWith, 55);
  await api.emit("gateway_stop", { reason: "restart" }, {});
  await service.start(); // the gateway starts its services again in the same process
  const decided = await api.emit("before_tool_call", { ...READ, toolCallId: "c2" }, CTX);
  assert.equal(decided?.block, true, "the restarted instance hears its verdicts again");
  assert.notEqual(transport(), first, "a new connection after the restart");
  assert.deepEqual(transport().events().map((e) => e.tool_call_id), ["c2"]);
});

test("the gateway's own loop detection is reported at start-up and in the stats", () => {
  const on = setup({}, () => [], { tools: { loopDetection: { enabled: true } } });
  const warnings = on.api.logs.filter((l) => l.level === "warn");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0].message, /shadowed.*tools\.loopDetection\.enabled: false/);
  assert.deepEqual(on.guard.stats.gatewayLoopDetection, { rolling: true, postCompaction: true });
  const perAgent = setup({}, () => [], { tools: { loopDetection: { enabled: false } }, agents: { list: [{ id: "a", tools: { loopDetection: { enabled: true } } }] } });
  assert.equal(perAgent.guard.stats.gatewayLoopDetection.rolling, true);
  // The runtime config OpenClaw gives plugins keys agents by id (agents.entries).
  const runtime = setup({}, () => [], { tools: { loopDetection: { enabled: false } }, agents: { entries: { main: {}, b: { tools: { loopDetection: { enabled: true } } } } } });
  assert.equal(runtime.guard.stats.gatewayLoopDetection.rolling, true);
  const off = setup({}, () => [], { tools: { loopDetection: { enabled: false } } });
  assert.deepEqual(off.api.logs.filter((l) => l.level === "warn"), []);
  assert.deepEqual(off.guard.stats.gatewayLoopDetection, { rolling: false, postCompaction: false });
  const observe = setup({ mode: "observe" }, () => [], { tools: { loopDetection: { enabled: true } } });
  assert.deepEqual(observe.api.logs.filter((l) => l.level === "warn"), [], "observe mode blocks nothing to shadow");
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

test("brokers take the worker's address format: host:port lists, kafka:// optional", () => {
  const { brokers } = resolveConfig({ brokers: ["kafka://k1:9092,k2:9093", "k3:9094"] });
  assert.deepEqual(brokers, ["k1:9092", "k2:9093", "k3:9094"]);
  for (const bad of ["k1", "k1:x", "http://k1:9092", "k1:9092,", "k1:9092 k2:9093"]) {
    assert.equal(safeParseConfig({ brokers: [bad] }).success, false, bad);
  }
});

test("the config is validated with every problem listed", () => {
  const parsed = safeParseConfig({ mode: "enforce", verdictTimeoutMs: 20000, brokers: ["nohost"], extra: 1 });
  assert.equal(parsed.success, false);
  assert.deepEqual(parsed.error.issues.map((i) => i.path.join(".")), ["extra", "brokers.0", "mode", "verdictTimeoutMs"]);
  assert.throws(() => registerLoopGuard(new FakeApi({ mode: "enforce" })), ConfigError);
  assert.equal(plugin.configSchema.safeParse({}).success, true);
  assert.equal(plugin.configSchema.jsonSchema.properties.mode.default, "gate");
  assert.equal(plugin.configSchema.jsonSchema.properties.onWarn.default, "note");
});
